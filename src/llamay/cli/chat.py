"""`llamay run` without -p: Ollama's interactive chat. Commands (/? lists them), \"\"\" multi-line messages,
Ctrl-C stops a reply and keeps the chat (the partial reply is dropped, the message stays: Ollama's rule),
Ctrl-D or /bye exits. Replies go to stdout, everything else to stderr."""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

from ..chat import ChatTemplateError
from ..engine import ContextOverflow, OutOfPages
from .chat_commands import HELP, PARAMS, QUOTES, SET_HELP, check_name, parse_param, read_message, split_command
from .common import eprint
from .conversation import Conversation
from .lines import Lines

INTERRUPT_HINT = "Use Ctrl + d or /bye to exit."
FAILURES = (ValueError, OSError, OutOfPages, ChatTemplateError)  # one line each; the chat goes on


def chat(llm, sampling: dict, grammar=None, system: str | None = None, verbose: bool = False,
         name: str | None = None):
    """sampling: LLM.generate's keywords (max_tokens, temperature, ...), which /set changes; name: the
    model's name to show (default: its file's)."""
    lines = Lines()
    # Ctrl-C at a terminal is the chat's own, even when started with SIGINT ignored (a non-interactive
    # shell's background job inherits that; Ollama's chat takes Ctrl-C there too)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if lines.interactive else None
    eprint(f"Chat with the model: /? for help, {QUOTES} for several lines, /bye or Ctrl + d to exit.")
    try:
        Chat(Conversation(llm, system), lines, sampling, grammar, verbose, name).loop()
    finally:
        lines.close()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def timings(s) -> str:
    """The --verbose line of a generation's GenerationStats."""
    return (f"prompt: {s.prompt_tokens} tokens ({s.cached_tokens} cached) in {s.prefill_s:.3f} s; "
            f"generated {s.generated_tokens} tokens in {s.decode_s:.3f} s "
            f"({s.generated_tokens / max(s.decode_s, 1e-9):.1f} tok/s); finish: {s.finish_reason}"
            + (f"; speculative: {s.accepted_tokens} of {s.drafted_tokens} draft tokens accepted in {s.draft_steps} "
               "passes" if s.drafted_tokens else ""))


@contextlib.contextmanager
def _sigint_sets():
    """While the block runs, Ctrl-C sets the yielded Event instead of raising KeyboardInterrupt: a reply
    stops between tokens, never inside the engine's bookkeeping."""
    stopped = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda signum, frame: stopped.set())
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, previous)


def _dim(text: str):
    eprint(f"\x1b[2m{text}\x1b[0m" if sys.stderr.isatty() else text)


class Chat:
    def __init__(self, conv: Conversation, lines: Lines, sampling: dict, grammar, verbose: bool,
                 name: str | None = None):
        self.conv, self.lines, self.sampling, self.grammar, self.verbose = conv, lines, sampling, grammar, verbose
        self.name = name or os.path.basename(conv.llm.path)
        self.commands = {"/bye": self._bye, "/exit": self._bye, "/?": self._help, "/help": self._help,
                         "/clear": self._clear, "/system": self._system, "/set": self._set, "/show": self._show,
                         "/save": self._save, "/load": self._load}

    def loop(self):
        while True:
            try:
                line = self.lines.read(">>> ")
                ended = self.command(line) if line.startswith("/") else self.turn(read_message(line, self._more))
            except KeyboardInterrupt:  # at the prompt: the line (or multi-line message) is dropped
                eprint("\n" + INTERRUPT_HINT)
                continue
            except EOFError:
                if self.lines.interactive:
                    print()
                return
            if ended:
                return

    def _more(self) -> str:
        return self.lines.read("... ")

    def command(self, line: str) -> bool:
        """Runs one /command (never sent to the model) -> True when the chat ends."""
        name, arg = split_command(line)
        run = self.commands.get(name)
        if run is None:
            eprint(f"Unknown command '{name}'. Type /? for help")
            return False
        try:
            return bool(run(arg))
        except FAILURES as e:
            eprint(f"error: {e}")
            return False

    def turn(self, text: str) -> bool:
        """Sends a user message; its reply joins the conversation unless Ctrl-C stopped it."""
        if not text.strip():
            return False
        conv = self.conv
        conv.messages.append({"role": "user", "content": text})
        with _sigint_sets() as stopped:
            try:
                ids = conv.prompt()
                conv.llm.check_fits(len(ids), room=1)
                reply = self._stream(ids, stopped)
            except FAILURES as e:
                conv.messages.pop()
                hint = " (/clear starts over)" if isinstance(e, (ChatTemplateError, ContextOverflow)) else ""
                eprint(f"error: {e}{hint}")
                return False
        if reply is not None:
            conv.messages.append({"role": "assistant", "content": reply})
            self._report()
        return False

    def _stream(self, ids: list[int], stopped: threading.Event) -> str | None:
        """Streams the reply to stdout -> its text; None when Ctrl-C (stopped) cut it."""
        out = []
        with contextlib.closing(self.conv.llm.generate(ids, grammar=self.grammar, **self.sampling)) as pieces:
            for piece in pieces:  # closing them early cancels the generation
                if stopped.is_set():
                    print()
                    return None
                sys.stdout.write(piece)
                sys.stdout.flush()
                out.append(piece)
        print()
        return "".join(out)

    def _report(self):
        """After a reply: the mark of a cut one, and with verbose its timings."""
        s, limit = self.conv.llm.stats, self.sampling["max_tokens"]
        if s.finish_reason == "length":
            at_limit = limit is not None and s.generated_tokens >= limit
            _dim("[stopped: length limit]" if at_limit else "[stopped: the context is full]")
        if self.verbose:
            eprint(timings(s))

    def _bye(self, arg: str) -> bool:
        return True

    def _help(self, arg: str):
        eprint(SET_HELP if arg.lstrip("/") == "set" else HELP)

    def _clear(self, arg: str):
        self.conv.messages = []  # the system message stays, as in Ollama
        eprint("Cleared session context")

    def _system(self, arg: str):
        if not arg:
            raise ValueError(f"usage: /system TEXT (or /system {QUOTES} for several lines)")
        self.conv.system = read_message(arg, self._more) or None
        eprint("Set system message.")

    def _set(self, arg: str):
        word = arg.split(None, 1)[0] if arg else ""
        if not word:
            eprint(SET_HELP)
        elif arg in ("verbose", "quiet"):
            self.verbose = arg == "verbose"
            eprint(f"Set '{arg}' mode.")
        elif word == "system":
            self._system(arg[len(word):].strip())
        else:
            name, key, value = parse_param(arg)
            self.sampling[key] = value
            eprint(f"Set parameter '{name}' to '{arg.split()[-1]}'")

    def _show(self, arg: str):
        if arg:
            raise ValueError("usage: /show (it shows every setting)")
        shown = {"seed": "random", "num_predict": -1}  # what None means for these
        values = {name: self.sampling[key] for name, (key, _) in PARAMS.items()}
        conv = self.conv
        eprint(f"model: {self.name}\nsystem: {conv.system or '(none: the template default)'}\n"
               f"parameters: {', '.join(f'{n} {shown.get(n) if v is None else v}' for n, v in values.items())}\n"
               f"messages: {len(conv.messages)}; timings: {'verbose' if self.verbose else 'quiet'}")

    def _save(self, arg: str):
        n_tokens = self.conv.save(check_name(arg, "/save"))
        eprint(f"Saved chat '{arg}' ({n_tokens} tokens)")

    def _load(self, arg: str):
        n_tokens = self.conv.load(check_name(arg, "/load"))
        eprint(f"Loaded chat '{arg}' ({len(self.conv.messages)} messages, {n_tokens} tokens)")
