"""llamay list | show | rm | cp: llamay's model store, and Ollama's store read in place.

Each command is an add_*_parser(p) / run_*(args) pair (cli/main.py wires them). Output follows
`ollama list` / `ollama show`: sizes in decimal units (format.HumanBytes), times as format.HumanTime.
"""
from __future__ import annotations

import json
import math
import os
import time

from ..gguf import GGUFError, GGUFReader
from ..store import (
    FILE_TYPES,
    ModelName,
    Store,
    StoredModel,
    StoreError,
    all_models,
    find,
    gguf_config,
    looks_like_path,
    ollama_store,
    parse_name,
)
from .common import CLIError, Command, resolve_model, table

TEMPLATE_LINES = 6


def human_bytes(n: int) -> str:
    """ref: ollama format.HumanBytes (1000-based; whole numbers from 10 up, one decimal below)."""
    for scale, unit in ((10**12, "TB"), (10**9, "GB"), (10**6, "MB"), (10**3, "KB")):
        if n >= scale:
            value = n / scale
            if value >= 10 or value == math.trunc(value):
                return f"{int(value)} {unit}"
            return f"{value:.1f} {unit}"
    return f"{n} B"


def _duration(seconds: float) -> str:
    """ref: ollama format.humanDuration."""
    s = int(seconds)
    if s < 60:
        return "Less than a second" if s < 1 else "1 second" if s == 1 else f"{s} seconds"
    minutes = int(seconds / 60)
    if minutes < 60:
        return "About a minute" if minutes == 1 else f"{minutes} minutes"
    hours = math.floor(seconds / 3600 + 0.5)  # Go's math.Round: halves away from zero
    if hours == 1:
        return "About an hour"
    for limit, div, unit in ((48, 1, "hours"), (24 * 14, 24, "days"), (24 * 60, 24 * 7, "weeks"),
                             (24 * 365 * 2, 24 * 30, "months")):
        if hours < limit:
            return f"{hours // div} {unit}"
    return f"{hours // (24 * 365)} years"


def human_time(mtime: float, now: float | None = None) -> str:
    """'2 hours ago', 'About a minute ago', '3 days from now' (ref: ollama format.HumanTime)."""
    delta = (time.time() if now is None else now) - mtime
    return _duration(delta) + " ago" if delta >= 0 else _duration(-delta) + " from now"


def _name(text: str) -> ModelName:
    try:
        return parse_name(text)
    except StoreError as e:
        raise CLIError(str(e)) from None


def _header(m: StoredModel) -> GGUFReader | None:
    """The model layer's GGUF header; None when the manifest has no GGUF model layer."""
    return None if m.model_path is None else _read_header(m.model_path, m.name)


def _read_header(path, name: str) -> GGUFReader:
    try:
        return GGUFReader(path)
    except (GGUFError, OSError) as e:
        raise CLIError(f"{name}: {e}") from None


def _quant_arch(m: StoredModel) -> tuple[str, str]:
    """From the config blob (as Ollama's details), else from the GGUF header; '-' when neither says."""
    quant, arch = m.config.get("file_type"), m.config.get("model_family")
    if not (quant and arch):
        try:
            reader = _header(m)
        except CLIError:
            reader = None  # one unreadable file does not hide the rest of the list
        md = reader.metadata if reader is not None else {}
        quant = quant or FILE_TYPES.get(md.get("general.file_type"), "-")
        arch = arch or str(md.get("general.architecture", "-"))
    return str(quant), str(arch)


def add_list_parser(p):
    """No options: every model in llamay's store, then every model in Ollama's."""


def run_list(args):
    try:
        models = all_models()
    except StoreError as e:
        raise CLIError(str(e)) from None
    rows = [("NAME", "ID", "SIZE", "QUANT", "ARCH", "MODIFIED", "SOURCE")]
    for m in models:
        rows.append((m.name, m.digest[:12], human_bytes(m.size), *_quant_arch(m), human_time(m.modified),
                     m.source))
    print(table(rows))


def _find(text: str) -> StoredModel:
    name = _name(text)
    try:
        m = find(name)
    except StoreError as e:
        raise CLIError(str(e)) from None
    if m is None:
        raise CLIError(f"model '{name.display}' not found")
    return m


def _model_rows(reader: GGUFReader | None, stored: dict, source: str) -> tuple[list[tuple[str, str]], dict]:
    """stored: a store's config blob (over the header's)."""
    md = reader.metadata if reader is not None else {}
    config = {**(gguf_config(reader) if reader is not None else {}), **stored}
    arch = config.get("model_family") or "-"
    rows = [("architecture", arch), ("parameters", config.get("model_type") or "-"),
            ("context length", str(md.get(f"{arch}.context_length", "-"))),
            ("embedding length", str(md.get(f"{arch}.embedding_length", "-"))),
            ("quantization", config.get("file_type") or "-")]
    state = _state_bytes(md) if reader is not None else 0
    if state:  # a hybrid's: what each context and each prefix-cache checkpoint holds besides its K/V
        rows.append(("recurrent state", f"{human_bytes(state)} per context and per checkpoint"))
    return rows + [("source", source)], md


def _state_bytes(md: dict) -> int:
    """A hybrid model's recurrent state in bytes; 0 for others and for a header llamay cannot run."""
    from ..models import UnsupportedModel
    from ..models.describe import state_bytes
    from ..models.spec import arch_spec
    try:
        return state_bytes(arch_spec(md))
    except (UnsupportedModel, GGUFError, KeyError, ValueError, TypeError):
        return 0


def _params_rows(params: dict) -> list[tuple[str, str]]:
    """Modelfile style: one row per value, lists (stop) spread over several rows."""
    rows = []
    for key, value in params.items():
        for v in value if isinstance(value, list) else [value]:
            rows.append((key, json.dumps(v, ensure_ascii=False) if isinstance(v, str) else str(v)))
    return rows


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"  {title}"] + [f"    {line}" for line in lines] + [""]


def _kv_lines(rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows) + 4
    return [k.ljust(width) + v for k, v in rows]


def _first_lines(text: str, n: int) -> list[str]:
    lines = text.strip("\n").splitlines()
    return lines[:n] + (["..."] if len(lines) > n else [])


def add_show_parser(p):
    p.add_argument("name", help="model name, e.g. qwen2.5:0.5b, or a GGUF file")
    p.add_argument("--arch", action="store_true",
                   help="print the decoder's per-layer plan instead, one line per kind of layer")


def run_show(args):
    if getattr(args, "arch", False):  # callers building args by hand may leave it out
        print("\n".join(_arch_lines(args.name)))
        return
    if looks_like_path(args.name) or os.path.isfile(args.name):  # a llama.cpp user's file: its header alone
        path = resolve_model(args.name)
        reader, source, m = _read_header(path, args.name), f"file {os.path.abspath(path)}", None
    else:
        m = _find(args.name)
        reader, source = _header(m), m.source
    rows, md = _model_rows(reader, m.config if m else {}, source)
    out = [""] + _section("Model", _kv_lines(rows))
    if m and m.params:
        out += _section("Parameters", _kv_lines(_params_rows(m.params)))
    if m and m.system:
        out += _section("System", _first_lines(m.system, TEMPLATE_LINES))
    template = (m and m.template) or md.get("tokenizer.chat_template")
    if template:
        out += _section("Template", _first_lines(str(template), TEMPLATE_LINES))
    license_text = (m and m.license) or md.get("general.license")
    if license_text:
        out += _section("License", _first_lines(str(license_text), 1)[:1])
    print("\n".join(out))


def _arch_lines(name: str) -> list[str]:
    from ..models import UnsupportedModel
    from ..models.describe import describe
    from ..models.spec import arch_spec
    from .common import resolve_model
    path = resolve_model(name)
    try:
        reader = GGUFReader(path)
        return describe(arch_spec(reader.metadata, reader.tensors))
    except (GGUFError, UnsupportedModel, OSError) as e:
        raise CLIError(f"{name}: {e}") from None


def _refuse_ollama(name: ModelName, what: str):
    """Ollama's store is read in place and never written: say so instead of 'not found'."""
    reader = ollama_store()
    if reader.manifest_path(name) is not None:
        raise CLIError(f"'{name.display}' is in Ollama's store ({reader.root}), which llamay only reads; {what}")


def add_rm_parser(p):
    p.add_argument("names", nargs="+", metavar="NAME", help="model(s) in llamay's store")


def run_rm(args):
    store = Store()
    for text in args.names:
        name = _name(text)
        if store.manifest_path(name) is None:
            _refuse_ollama(name, f"remove it with `ollama rm {name.display}`")
            raise CLIError(f"model '{name.display}' not found")
        try:
            store.remove(name)
        except StoreError as e:
            raise CLIError(str(e)) from None
        print(f"deleted '{name.display}'")


def add_cp_parser(p):
    p.add_argument("source", help="model in llamay's store")
    p.add_argument("destination", help="new name (same model ID, blobs shared)")


def run_cp(args):
    src, dst = _name(args.source), _name(args.destination)
    store = Store()
    if store.manifest_path(src) is None:
        _refuse_ollama(src, "llamay does not copy models out of it (that would duplicate its blobs); "
                            f"use it by its name as it is, or `ollama cp {src.display} {dst.display}`")
        raise CLIError(f"model '{src.display}' not found")
    try:
        store.copy(src, dst)
    except StoreError as e:
        raise CLIError(str(e)) from None
    print(f"copied '{src.display}' to '{dst.display}'")



LIST = Command("List the models in llamay's store and Ollama's (read in place).", add_list_parser, run_list)
SHOW = Command("Show a stored model: architecture, parameters, context, quantization, template, license; "
               "--arch: its per-layer plan.",
               add_show_parser, run_show)
RM = Command("Remove models from llamay's store (a blob stays while another model uses it).", add_rm_parser, run_rm)
CP = Command("Copy a model to a second name in llamay's store.", add_cp_parser, run_cp)
