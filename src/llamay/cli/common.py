"""What every command shares: resolving -m, loading with one-line errors, shared flags."""
from __future__ import annotations

import argparse
import os
import sys

from ..defaults import DEFAULT_PULL, default_model_path
from ..kv import KV_TYPES
from ..settings import LOAD

THREADS_HELP = ("kernel threads (default: the physical cores; while other work holds them the engine "
                "runs fewer, with the same output)")
KV_HELP = f"KV cache type (default {LOAD.kv}; q8: int8 keys and values; vq8: int8 values)"


class CLIError(Exception):
    """Printed as one line `llamay: error: ...`, exit status 1."""


def resolve_model(name: str | None) -> str:
    """-m: a GGUF file, or a model name in llamay's store or Ollama's; none: the first stored model,
    else the default model's package."""
    from ..store import StoreError, all_models, find
    if name is None:
        stored = [m for m in _stored(all_models) if m.model_path is not None]
        if stored:
            return str(stored[0].model_path)
        path = default_model_path()
        if path is None:
            raise CLIError(f"no model given and none is stored: llamay pull {DEFAULT_PULL}")
        return str(path)
    if os.path.isdir(name):
        raise CLIError(f"{name} is a directory, not a GGUF file")
    if os.path.exists(name):
        return name
    try:
        model = find(name)
    except StoreError as e:
        raise CLIError(f"model not found: {name} is not a file, and {e}") from None
    if model is None:
        raise CLIError(f"model not found: {name} is neither a file nor a stored model (llamay list; llamay pull)")
    if model.model_path is None:
        raise CLIError(f"{name} has no GGUF model layer llamay can run")
    return str(model.model_path)


def _stored(all_models) -> list:
    from ..store import StoreError
    try:
        return all_models()
    except (StoreError, OSError):
        return []


SIZE_UNITS = {"": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
              "g": 1 << 30, "gb": 10**9, "gib": 1 << 30}


MAX_THREADS = 512


def ranged(kind, lo=None, hi=None, lo_open: bool = False):
    """An argparse type: a number of `kind` in [lo, hi] ((lo, hi] with lo_open); the message gives the range."""
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if v != v or (lo is not None and (v < lo or (lo_open and v == lo))) or (hi is not None and v > hi):
            if hi is None:
                want = f"{'>' if lo_open else '>='} {lo}"
            else:
                want = f"in {'(' if lo_open else '['}{lo}, {hi}]"
            raise argparse.ArgumentTypeError(f"{text} is out of range: it must be {want}")
        return v
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


THREADS = ranged(int, 1, MAX_THREADS)


def parse_size(text: str) -> int:
    """'512M', '2GiB', '1.5g', '1000000' -> bytes."""
    t = text.strip().lower()
    num = t.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = t[len(num):].strip()
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if unit not in SIZE_UNITS or value <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 512M, 2GiB)")
    return int(value * SIZE_UNITS[unit])


def load_model(name: str | None, threads: int | None, n_ctx: int | None = None, kv: str = LOAD.kv,
               kv_budget: int | None = LOAD.kv_budget, lora=None):
    from .. import load
    from ..gguf import GGUFError
    from ..models import UnsupportedModel
    path = resolve_model(name)
    try:
        return load(path, threads=threads, n_ctx=n_ctx, kv=kv, kv_budget=kv_budget, lora=lora)
    except (GGUFError, UnsupportedModel, ValueError) as e:
        raise CLIError(str(e)) from None


def add_model_args(p: argparse.ArgumentParser):
    p.add_argument("-m", "--model", help="GGUF file (default: SmolLM2-135M-Instruct)")
    p.add_argument("-t", "--threads", type=THREADS, default=LOAD.threads, help=THREADS_HELP)
    p.add_argument("--kv", default=LOAD.kv, choices=list(KV_TYPES), help=KV_HELP)
    p.add_argument("--kv-budget", type=parse_size, default=LOAD.kv_budget,
                   help=f"memory for KV pages, e.g. 512M or 2GiB (default: room for {LOAD.pool_contexts} full contexts)")


def lora_arg(text: str):
    """argparse type of --lora: (name, file, scale)."""
    from ..models.lora import parse_spec
    try:
        name, path, scale = parse_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"LoRA adapter not found: {path}")
    return name, path, scale


def add_lora_arg(p: argparse.ArgumentParser):
    p.add_argument("--lora", type=lora_arg, action="append", default=None, metavar="NAME=FILE[:SCALE]",
                   help="a LoRA adapter (convert_lora_to_gguf.py's GGUF) applied to every request, scale 1 by "
                        "default; repeat for several")


def eprint(*args):
    print(*args, file=sys.stderr, flush=True)
