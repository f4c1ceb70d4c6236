"""`serve --upstream NAME=URL[,key-env=VAR][,api=openai|anthropic|ollama][,timeout=SECONDS]` parsed (pure)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...settings import UPSTREAM

APIS = ("openai", "anthropic", "ollama")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class UpstreamSpec:
    """One upstream. url: the base its own clients take (OpenAI: https://api.openai.com/v1; Anthropic:
    https://api.anthropic.com; Ollama: http://host:11434), no trailing slash."""
    name: str  # its models are served as NAME/model
    url: str
    api: str = UPSTREAM.api
    key_env: str | None = None  # the environment variable holding its key; None: no key sent
    timeout: float = UPSTREAM.timeout  # seconds it may stay silent before the request fails with 504


def parse_spec(text: str) -> UpstreamSpec:
    """'NAME=URL,key=value,...' -> UpstreamSpec; ValueError with a one-line reason."""
    head, *options = [part.strip() for part in text.split(",")]
    name, sep, url = head.partition("=")
    if not sep or not _NAME.fullmatch(name):
        raise ValueError(f"--upstream {text!r}: expected NAME=URL[,key-env=VAR][,api=openai|anthropic|ollama]"
                         "[,timeout=SECONDS] (NAME: letters, digits, '.', '_', '-')")
    if not re.match(r"https?://[^/\s]", url):
        raise ValueError(f"--upstream {name}: the URL must start with http:// or https://, got {url!r}")
    fields: dict = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key in fields or not value:
            raise ValueError(f"--upstream {name}: bad option {option!r} (key-env=VAR, api=..., timeout=SECONDS, "
                             "each once)")
        fields[key] = value
    unknown = sorted(set(fields) - {"api", "key-env", "timeout"})
    if unknown:
        raise ValueError(f"--upstream {name}: unknown option {unknown[0]!r} (key-env, api, timeout)")
    return UpstreamSpec(name, url.rstrip("/"), _api(name, fields.get("api", UPSTREAM.api)),
                        _var(name, fields.get("key-env")), _timeout(name, fields.get("timeout")))


def _api(name: str, api: str) -> str:
    if api not in APIS:
        raise ValueError(f"--upstream {name}: api must be one of {', '.join(APIS)}, got {api!r}")
    return api


def _var(name: str, var: str | None) -> str | None:
    if var is not None and not _VAR.fullmatch(var):
        raise ValueError(f"--upstream {name}: key-env names an environment variable (letters, digits, '_'), "
                         f"got {var!r}")
    return var


def _timeout(name: str, value: str | None) -> float:
    if value is None:
        return UPSTREAM.timeout
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"--upstream {name}: timeout must be a positive number of seconds, got {value!r}")
    return seconds
