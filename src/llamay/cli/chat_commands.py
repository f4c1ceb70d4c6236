"""The chat's input rules as pure functions: commands, multi-line messages, /set values, chat names."""
from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from .common import PENALTY, PROBABILITY, SEED, TEMPERATURE, TOP_K, n_predict, seed_of

QUOTES = '"""'  # opens and closes a multi-line message, as in Ollama

HELP = f"""Available Commands:
  /set            Set session variables (/set alone lists them)
  /show           Show the current settings
  /system TEXT    Set the system message
  /save NAME      Save the conversation
  /load NAME      Load a saved conversation
  /clear          Clear the conversation
  /bye            Exit
  /?, /help       Help for a command

Use {QUOTES} to begin a multi-line message; Ctrl + c stops a reply, Ctrl + d exits."""


def _max_tokens(text: str) -> int | None:
    """num_predict: -n's rule; -1 (no limit but the context) is LLM.generate's None."""
    n = n_predict(text)
    return None if n == -1 else n


def _seed(text: str) -> int | None:
    return seed_of(SEED(text))


# Ollama's parameter name -> (LLM.generate keyword, its type: the range of run's flag)
PARAMS: dict[str, tuple[str, Callable]] = {
    "temperature": ("temperature", TEMPERATURE),
    "top_k": ("top_k", TOP_K),
    "top_p": ("top_p", PROBABILITY),
    "min_p": ("min_p", PROBABILITY),
    "repeat_penalty": ("repeat_penalty", PENALTY),
    "seed": ("seed", _seed),
    "num_predict": ("max_tokens", _max_tokens),
}

SET_HELP = f"""Available Commands:
  /set parameter NAME VALUE   Set a sampling parameter (or /set NAME VALUE)
  /set system TEXT            Set the system message
  /set verbose                Show timings after each reply
  /set quiet                  Hide timings

Parameters: {', '.join(PARAMS)}"""

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def split_command(line: str) -> tuple[str, str]:
    """'/set temperature 0.5' -> ('/set', 'temperature 0.5')."""
    head, *rest = line.strip().split(None, 1)
    return head, rest[0].strip() if rest else ""


def read_message(line: str, more: Callable[[], str]) -> str:
    """The message that starts with line: one opening with \"\"\" goes on over lines read by more() until one
    ends with \"\"\" (the quotes are not part of it; Ollama's rule). more() may raise EOFError."""
    if not line.startswith(QUOTES):
        return line
    lines, body = [], line[len(QUOTES):]
    while not body.endswith(QUOTES):
        lines.append(body)
        body = more()
    lines.append(body[:-len(QUOTES)])
    return "\n".join(lines)


def parse_param(arg: str) -> tuple[str, str, object]:
    """'/set' arguments 'NAME VALUE' or 'parameter NAME VALUE' -> (name, LLM.generate keyword, value).
    ValueError: one line saying what is wrong."""
    words = arg.split()
    if words[:1] == ["parameter"]:
        words = words[1:]
    if not words or words[0] not in PARAMS:
        got = f"unknown parameter '{words[0]}'" if words else "no parameter given"
        raise ValueError(f"{got}: one of {', '.join(PARAMS)}")
    if len(words) != 2:
        raise ValueError(f"usage: /set {words[0]} VALUE")
    name, text = words
    key, kind = PARAMS[name]
    try:
        return name, key, kind(text)
    except argparse.ArgumentTypeError as e:
        raise ValueError(f"{name}: {e}") from None


def check_name(name: str, command: str) -> str:
    """The argument of /save or /load: a saved chat's name, letters, digits, '.', '_', '-' (at most 64, no '..'),
    so it stays one file name in one folder. ValueError: one line."""
    if not name:
        raise ValueError(f"usage: {command} NAME")
    if not NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"'{name}' is not a chat name: use letters, digits, '.', '_' and '-' (at most 64), "
                         "starting with a letter or digit")
    return name
