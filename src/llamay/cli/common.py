"""What every command shares: resolving -m, loading with one-line errors, shared flags."""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

from .. import env
from ..defaults import DEFAULT_NAME, DEFAULT_PULL, default_model_path
from ..kv import KV_TYPES
from ..settings import LOAD, LoadOptions

THREADS_HELP = ("kernel threads (default: the physical cores; while other work holds them the engine "
                "runs fewer, with the same output)")
KV_HELP = f"KV cache type (default {LOAD.kv}; q8: int8 keys and values; vq8: int8 values)"


class HelpFormat(argparse.HelpFormatter):
    """Every option's help shows its default, unless it says its default itself or has none to show."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


class Command:
    """A subcommand as cli/main.py expects a module: __doc__, add_parser(p), run(args)."""

    def __init__(self, doc: str, add_parser, run):
        self.__doc__, self.add_parser, self.run = doc, add_parser, run


def table(rows: list[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, three spaces apart (as `ollama list`)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("   ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


class CLIError(Exception):
    """Printed as one line `llamay: error: ...`, exit status 1."""


def resolve_model(name: str | None) -> str:
    """-m: a GGUF file, or a model name in llamay's store or Ollama's (DEFAULT_NAME: the default model's
    package when the store lacks it); none: the first stored model, else the default model's package."""
    return resolve_named(name)[0]


def resolve_named(name: str | None) -> tuple[str, str]:
    """resolve_model's path and the model's name to show: the stored name, or the file's name."""
    from ..store import StoreError, all_models, find, looks_like_path
    if name is None:
        stored = [m for m in _stored(all_models) if m.model_path is not None]
        if stored:
            return str(stored[0].model_path), stored[0].name
        return _default_path(), DEFAULT_NAME
    if os.path.isdir(name):
        raise CLIError(f"{name} is a directory, not a GGUF file")
    if os.path.exists(name):
        return name, os.path.basename(name)
    if looks_like_path(name):
        raise CLIError(f"no such file: {name}")
    try:
        model = find(name)
    except StoreError as e:
        raise CLIError(f"model not found: {name} is not a file, and {e}") from None
    if model is None and name.removesuffix(":latest") == DEFAULT_NAME:
        return _default_path(), DEFAULT_NAME
    if model is None:
        raise CLIError(f"model not found: {name} is neither a file nor a stored model "
                       f"(llamay pull {name} fetches it; llamay list shows what is stored)")
    if model.model_path is None:
        raise CLIError(f"{name} has no GGUF model layer llamay can run")
    return str(model.model_path), model.name


def input_file(path: str, flag: str = "") -> str:
    """A file the command reads (given by flag): `no such file: PATH` before any work when there is none."""
    of = f" ({flag})" if flag else ""
    if os.path.isdir(path):
        raise CLIError(f"{path} is a directory, not a file{of}")
    if not os.path.exists(path):
        raise CLIError(f"no such file: {path}{of}")
    return path


def output_file(path: str) -> str:
    """A file the command writes: `no such folder: DIR` before any work when its folder is missing."""
    folder = os.path.dirname(path)
    if folder and not os.path.isdir(folder):
        raise CLIError(f"no such folder: {folder} (for {path})")
    return path


def _default_path() -> str:
    path = default_model_path()
    if path is None:
        raise CLIError(f"no model given and none is stored: llamay pull {DEFAULT_PULL}")
    return str(path)


def _stored(all_models) -> list:
    from ..store import StoreError
    try:
        return all_models()
    except (StoreError, OSError):
        return []


SIZE_UNITS = {"": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10**6, "mib": 1 << 20,
              "g": 1 << 30, "gb": 10**9, "gib": 1 << 30}


MAX_THREADS = 512
CTX_HELP = (f"context length in tokens (default {LOAD.n_ctx}, at most the model's; 0: the model's training "
            "context, as llama-server's -c 0)")


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
# sampling values, checked alike by run's flags, serve's defaults and the chat's /set
TEMPERATURE, TOP_K, PROBABILITY = ranged(float, 0.0), ranged(int, 0), ranged(float, 0.0, 1.0)
PENALTY = ranged(float, 0.0, lo_open=True)
SEED = ranged(int, -1, 2**64 - 1)  # -1: a fresh one (llama.cpp's), as leaving it out


def seed_of(value: int | None) -> int | None:
    return None if value == -1 else value


def n_predict(text: str) -> int:
    """-n (and the chat's num_predict): at least 1, or -1 for no limit but the context (llama.cpp's convention)."""
    n = ranged(int, -1)(text)
    if n == 0:
        raise argparse.ArgumentTypeError("0 would generate nothing: give at least 1, or -1 for no limit")
    return n


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


def add_spec_arg(p: argparse.ArgumentParser):
    from ..engine.draft import MODES
    from ..settings import SPEC
    p.add_argument("--spec", choices=MODES, default=None,
                   help="speculative decoding: drafts checked in one pass, the same tokens as without. ngram "
                        "(prompt lookup), tree (what other branches of the prefix computed, else ngram), draft "
                        f"(--draft-model's guesses) or none; default: draft with --draft-model, else {SPEC.mode}")
    p.add_argument("--draft-model", "-md", "--model-draft", metavar="NAME|FILE", default=None,
                   help="a smaller model of the same vocabulary drafting for --spec draft")


def load_options(args, **overrides) -> LoadOptions:
    """The LoadOptions of a command's model flags, as far as it has them (-t, -c, --kv, --kv-budget, --lora,
    --spec, --draft-model, --cache-*), fields replaced by keyword."""
    flags = {"threads": "threads", "n_ctx": "ctx_size", "kv": "kv", "kv_budget": "kv_budget", "lora": "lora",
             "spec": "spec", "cache_dir": "cache_dir", "cache_redis": "cache_redis"}
    got = {field: getattr(args, flag) for field, flag in flags.items() if getattr(args, flag, None) is not None}
    if getattr(args, "draft_model", None):
        got["draft_model"] = resolve_model(args.draft_model)
    if hasattr(args, "cache_disk"):
        got["cache_disk"] = cache_disk(args)
    return LoadOptions.of(**{**got, **overrides})


def load_model(name: str | None, options: LoadOptions):
    """The model -m names, loaded as options say; its load's notes (a context or budget changed) on stderr."""
    from .. import load
    from ..gguf import GGUFError
    from ..models import UnsupportedModel
    path = resolve_model(name)
    try:
        llm = load(path, options)
    except (GGUFError, UnsupportedModel, ValueError) as e:
        raise CLIError(str(e)) from None
    for note in load_notes(llm, options.n_ctx, options.kv_budget):
        eprint(f"llamay: note: {note}")
    return llm


def load_notes(llm, n_ctx: int | None, kv_budget: int | None) -> list[str]:
    """What the load changed of what was asked: a context over the model's, a KV budget under one context."""
    notes = []
    if n_ctx and llm.n_ctx < n_ctx:
        notes.append(f"-c {n_ctx} is over the model's training context: using {llm.n_ctx}")
    note = budget_note(llm.spec, llm.n_ctx, llm.kv, kv_budget)
    return notes + [note] if note else notes


def budget_note(spec, n_ctx: int, kv: str, kv_budget: int | None) -> str | None:
    from ..engine.llm import context_pages
    pages, page = context_pages(spec, n_ctx, kv)
    if kv_budget and kv_budget < pages * page:
        return f"--kv-budget {kv_budget} bytes is under one full context: using {pages * page / 2**20:.1f} MiB"
    return None


def add_model_arg(p: argparse.ArgumentParser):
    p.add_argument("-m", "--model", help=f"a GGUF file or a stored model name (default: the first stored "
                                         f"model, else {DEFAULT_NAME})")


def add_model_args(p: argparse.ArgumentParser):
    """-m and how the model runs: threads and the KV cache."""
    add_model_arg(p)
    p.add_argument("-t", "--threads", type=THREADS, default=LOAD.threads, help=THREADS_HELP)
    p.add_argument("--kv", default=LOAD.kv, choices=list(KV_TYPES), help=KV_HELP)
    p.add_argument("--kv-budget", type=parse_size, default=LOAD.kv_budget,
                   help=f"memory for KV pages, e.g. 512M or 2GiB (default: room for {LOAD.pool_contexts} full contexts)")


def lora_arg(text: str):
    """argparse type of --lora: (name, file, scale)."""
    from ..models.lora import parse_adapter_arg
    try:
        name, path, scale = parse_adapter_arg(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"LoRA adapter not found: {path}")
    return name, path, scale


def disk_size(text: str) -> int:
    """parse_size, or 0 (none)."""
    return 0 if text.strip() == "0" else parse_size(text)


def add_cache_args(p: argparse.ArgumentParser):
    from ..settings import CACHE
    p.add_argument("--cache-disk", type=disk_size, default=None, metavar="SIZE",
                   help="the prefix cache's disk tier: computed pages kept on disk and read back by later prompts "
                        "of the same prefix, in this process or the next (default: LLAMAY_CACHE_DISK, else "
                        f"{CACHE.disk >> 30}G per model; 0: none)")
    p.add_argument("--cache-dir", metavar="DIR", default=None,
                   help="where the disk tier keeps its pages (default $LLAMAY_HOME/cache/kv)")
    p.add_argument("--cache-redis", metavar="URL", default=None,
                   help="a shared tier on Redis or Valkey (redis://host:port/db): pages published there and read "
                        "back by every server of the same weights")


def cache_disk(args) -> int:
    """--cache-disk, else LLAMAY_CACHE_DISK, else CACHE.disk: bytes of the disk tier (0: none)."""
    from ..settings import CACHE
    if args.cache_disk is not None:
        return args.cache_disk
    value = env.cache_disk()
    try:
        return disk_size(value) if value else CACHE.disk
    except argparse.ArgumentTypeError as e:
        raise CLIError(f"LLAMAY_CACHE_DISK: {e}") from None


def add_lora_arg(p: argparse.ArgumentParser):
    p.add_argument("--lora", type=lora_arg, action="append", default=None, metavar="NAME=FILE[:SCALE]",
                   help="a LoRA adapter (convert_lora_to_gguf.py's GGUF) applied to every request, scale 1 by "
                        "default; repeat for several")


@contextlib.contextmanager
def progress_bar(status: str, unit: str):
    """A bar on stderr while the block runs: yields step(done, total); the bar ends however the block does."""
    from ..store.progress import Progress
    progress = Progress(unit=unit)
    try:
        yield lambda done, total: progress(status, None, done, total)
    finally:
        progress.close()


def eprint(*args):
    print(*args, file=sys.stderr, flush=True)
