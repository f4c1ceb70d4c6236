"""Every environment variable llamay reads, in one place: its own, each with a LLAMAY_ prefix and a type,
and other tools' variables that it honours as those tools do (FOREIGN)."""
import os
from pathlib import Path


def kernels_path() -> str:
    """LLAMAY_KERNELS: 'auto' (default: the path this CPU runs fastest, measured at the first model load:
    kernels/pathpick.py), or force 'portable' (plain C), 'avx2',
    'avxvnni' (AVX2 with AVX-VNNI) or 'avx512' (F/BW/VL + VNNI) on x86-64; 'neon', 'dotprod' (sdot) or 'i8mm'
    (smmla) on arm64. Every path gives bit-identical results."""
    value = os.environ.get("LLAMAY_KERNELS", "auto").strip().lower()
    paths = ("auto", "portable", "avx2", "avxvnni", "avx512", "neon", "dotprod", "i8mm")
    if value not in paths:
        raise ValueError(f"LLAMAY_KERNELS must be one of {', '.join(paths)}, not {value!r}")
    return value


def threads() -> int | None:
    """LLAMAY_THREADS: default thread count for kernels (positive integer); unset means the physical cores."""
    value = os.environ.get("LLAMAY_THREADS")
    return int(value) if value else None


def adapt_threads() -> bool:
    """LLAMAY_ADAPT_THREADS: '1' (default) lets the engine run fewer threads while other work holds the
    cores (output is the same at any count); '0' always runs the configured count."""
    value = os.environ.get("LLAMAY_ADAPT_THREADS", "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"LLAMAY_ADAPT_THREADS must be 0 or 1, not {value!r}")
    return value == "1"


def home() -> Path:
    """LLAMAY_HOME: where llamay keeps its store and caches; unset or empty means ~/.llamay."""
    value = os.environ.get("LLAMAY_HOME")
    return Path(value).expanduser() if value else Path.home() / ".llamay"


def cache_disk() -> str | None:
    """LLAMAY_CACHE_DISK: the disk tier's size for `serve` and `run` when --cache-disk is not given (a
    size: 512M, 4G; 0: no disk tier); unset: 2G."""
    return os.environ.get("LLAMAY_CACHE_DISK") or None


def registry() -> str | None:
    """LLAMAY_REGISTRY: base URL of the Ollama registry pulls use (unset: registry.ollama.ai)."""
    return os.environ.get("LLAMAY_REGISTRY") or None


def hf_endpoint() -> str | None:
    """LLAMAY_HF_ENDPOINT: base URL of Hugging Face for pulls (unset: HF_ENDPOINT, then huggingface.co)."""
    return os.environ.get("LLAMAY_HF_ENDPOINT") or None


def comma_list(value: str) -> tuple[str, ...]:
    """'a, b,,c' -> ('a', 'b', 'c'): the form of every list-valued variable (and its CLI flag)."""
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _names(variable: str) -> tuple[str, ...] | None:
    """A comma-separated list variable; unset or empty means None."""
    return comma_list(os.environ.get(variable, "")) or None


def allowed_hosts() -> tuple[str, ...] | None:
    """LLAMAY_ALLOWED_HOSTS: Host names `serve` accepts besides localhost names, comma-separated globs
    ('*': any); unset: localhost names on a loopback address, any Host on another."""
    return _names("LLAMAY_ALLOWED_HOSTS")


def origins() -> tuple[str, ...]:
    """LLAMAY_ORIGINS: browser Origins `serve` accepts besides same-origin pages, comma-separated globs
    like https://*.example.com ('*': any); unset: none."""
    return _names("LLAMAY_ORIGINS") or ()


def api_key() -> str | None:
    """LLAMAY_API_KEY: the key `serve` requires (Authorization: Bearer KEY or x-api-key); unset: none."""
    return os.environ.get("LLAMAY_API_KEY") or None


def named(variable: str) -> str | None:
    """A variable the user named on the command line (serve --upstream NAME=URL,key-env=VAR: the upstream's
    key); unset or empty: None."""
    return os.environ.get(variable) or None


def debug() -> bool:
    """LLAMAY_DEBUG=1: the CLI shows the traceback of an internal error (default: one line)."""
    return os.environ.get("LLAMAY_DEBUG", "").strip() == "1"


def host() -> str | None:
    """LLAMAY_HOST: the server `ps` and `stop` talk to, host:port or a URL (default: serve's own default)."""
    return os.environ.get("LLAMAY_HOST") or None


# Other tools' variables, honoured as those tools read them; llamay never sets them.
FOREIGN = ("OLLAMA_MODELS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "HF_ENDPOINT", "HF_TOKEN", "HF_HOME",
           "XDG_CACHE_HOME")


def foreign(name: str) -> str | None:
    """The value of another tool's variable (one of FOREIGN), None when unset."""
    if name not in FOREIGN:
        raise KeyError(f"{name} is not a variable llamay reads")
    return os.environ.get(name)
