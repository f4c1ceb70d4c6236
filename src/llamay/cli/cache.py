"""The prefix cache's disk tier: llamay cache ls | du | clear [MODEL].

Each model's pages live in a folder of their own under --cache-dir (default $LLAMAY_HOME/cache/kv), named
by the weights digest, KV type and page size, with a scope.json saying which file made them."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from .common import CLIError, table
from .store_cmds import human_bytes, human_time


def add_parser(p):
    sub = p.add_subparsers(dest="cache_command", metavar="ls|du|clear", required=True)
    ls = sub.add_parser("ls", help="each model's pages on disk: model, digest, KV type, page size, size, last use")
    du = sub.add_parser("du", help="the disk tier's size, all models together")
    clear = sub.add_parser("clear", help="delete MODEL's pages (a file, a stored name, a digest's start), or all")
    clear.add_argument("model", nargs="?", help="whose pages (default: every model's)")
    for q in (ls, du, clear):
        q.add_argument("--cache-dir", metavar="DIR", help="the disk tier's folder (default $LLAMAY_HOME/cache/kv)")


def run(args):
    scopes = _scopes(args.cache_dir)
    if args.cache_command == "du":
        print(human_bytes(sum(s["bytes"] for s in scopes)))
    elif args.cache_command == "ls":
        rows = [("MODEL", "DIGEST", "KV", "PAGE", "SIZE", "USED")]
        names = _stored_names()
        rows += [(names.get(os.path.realpath(s["path"]) if s["path"] else "", s["model"]), s["digest"][:12], s["kv"], str(s["page_size"]), human_bytes(s["bytes"]),
                  human_time(s["used"]) if s["used"] else "-") for s in scopes]
        print(table(rows))
    else:
        chosen = [s for s in scopes if args.model is None or _names(s, args.model)]
        if args.model is not None and not chosen:
            raise CLIError(f"no pages of {args.model} on disk (llamay cache ls)")
        for s in chosen:
            shutil.rmtree(s["folder"], ignore_errors=True)
        print(f"deleted {human_bytes(sum(s['bytes'] for s in chosen))} of {len(chosen)} model(s)")


def _scopes(directory: str | None) -> list[dict]:
    from ..engine.cache_tiers import SCOPE_FILE, cache_root
    from ..kv.disk import SUFFIX
    root = Path(directory) if directory else cache_root()
    out = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if not folder.is_dir():
            continue
        try:
            meta = json.loads((folder / SCOPE_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        segs = [f.stat() for f in folder.iterdir() if f.name.endswith(SUFFIX)]
        out.append({"folder": folder, "model": str(meta.get("model", "?")), "path": str(meta.get("path", "")),
                    "digest": str(meta.get("digest", folder.name)), "kv": str(meta.get("kv", "?")),
                    "page_size": meta.get("page_size", "?"), "bytes": sum(st.st_size for st in segs),
                    "used": max((st.st_mtime for st in segs), default=0.0)})
    return out


def _stored_names() -> dict[str, str]:
    """Model file (real path) -> its stored names ('a:1, b:2'), so that `ls` shows names, not blob files."""
    from ..defaults import DEFAULT_NAME, default_model_path
    from ..store import StoreError, all_models
    try:
        models = [(m.model_path, m.name) for m in all_models() if m.model_path is not None]
    except (StoreError, OSError):
        models = []
    out: dict[str, list[str]] = {}
    for path, name in models + [(default_model_path(), DEFAULT_NAME)]:
        if path is not None and name not in out.get(os.path.realpath(path), []):
            out.setdefault(os.path.realpath(path), []).append(name)
    return {path: ", ".join(names) for path, names in out.items()}


def _names(scope: dict, name: str) -> bool:
    """Whether name (a digest's start, a model file, a stored model's name) is the scope's model."""
    if len(name) >= 6 and scope["digest"].startswith(name.lower()):
        return True
    if name in (scope["model"], scope["path"]) or (os.path.exists(name) and os.path.realpath(name) == scope["path"]):
        return True
    from ..engine.digest import weights_digest
    from .common import resolve_model
    try:
        return weights_digest(resolve_model(name)) == scope["digest"]
    except (CLIError, OSError):
        return False
