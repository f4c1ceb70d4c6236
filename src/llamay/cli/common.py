"""What every command shares: resolving -m, loading with one-line errors, shared flags."""
from __future__ import annotations

import argparse
import os
import sys

from ..defaults import INSTALL_HINT, default_model_path


class CLIError(Exception):
    """Printed as one line `llamay: error: ...`, exit status 1."""


def resolve_model(name: str | None) -> str:
    if name is None:
        path = default_model_path()
        if path is None:
            raise CLIError(f"no model given and the default model is not installed: {INSTALL_HINT}")
        return str(path)
    if not os.path.exists(name):
        raise CLIError(f"model file not found: {name}")
    if os.path.isdir(name):
        raise CLIError(f"{name} is a directory, not a GGUF file")
    return name


def load_model(name: str | None, threads: int | None, n_ctx: int | None = None, kv: str = "f16"):
    from .. import load
    from ..gguf import GGUFError
    from ..models import UnsupportedModel
    path = resolve_model(name)
    try:
        return load(path, threads=threads, n_ctx=n_ctx, kv=kv)
    except (GGUFError, UnsupportedModel, ValueError) as e:
        raise CLIError(str(e)) from None


def add_model_args(p: argparse.ArgumentParser):
    p.add_argument("-m", "--model", help="GGUF file (default: SmolLM2-135M-Instruct)")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--kv", default="f16", choices=["f16", "f32", "q8", "vq8"],
                   help="KV cache type (default f16; q8: int8 keys and values; vq8: int8 values)")


def eprint(*args):
    print(*args, file=sys.stderr, flush=True)
