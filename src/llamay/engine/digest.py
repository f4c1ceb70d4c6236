"""The weights digest: sha256 hex of a whole GGUF file, the identity a snapshot is checked against.

Hashing a model takes ~1 s per 250 MB, so each digest is computed once per (realpath, size, mtime_ns)
and cached in memory and on disk ($LLAMAY_HOME/cache/digests.json). The disk cache is advisory: a
missing, unreadable, corrupt or unwritable cache file is ignored (and rewritten), never an error.
"""
from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

from llamay import env
from llamay.files import sha256_file, write_atomic

CACHE_VERSION = 1
_HEX64 = re.compile(r"[0-9a-f]{64}")
_memory: dict[tuple[str, int, int], str] = {}  # (realpath, size, mtime_ns) -> sha256 hex
_lock = threading.Lock()  # serialises the disk cache's read-modify-write within this process


def weights_digest(path: str | os.PathLike) -> str:
    """sha256 hex of the file at path, from cache when the file is unchanged since it was hashed."""
    real = os.path.realpath(path)
    key = _key(real)
    if key in _memory:
        return _memory[key]
    entry = _load_cache().get(real, {})
    if (entry.get("size"), entry.get("mtime_ns")) == key[1:] and _HEX64.fullmatch(str(entry.get("sha256"))):
        _memory[key] = entry["sha256"]
        return entry["sha256"]
    value = sha256_file(real)
    if _key(real) == key:  # the file did not change while it was hashed: the digest names this version
        _memory[key] = value
        _remember(real, key, value)
    return value


def cache_path() -> Path:
    return env.home() / "cache" / "digests.json"


def _key(real: str) -> tuple[str, int, int]:
    st = os.stat(real)
    return real, st.st_size, st.st_mtime_ns


def _load_cache() -> dict[str, dict]:
    """realpath -> {"size", "mtime_ns", "sha256"}; {} for anything but a well-formed cache."""
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if isinstance(v, dict)}


def _remember(real: str, key: tuple[str, int, int], digest: str):
    """Add one entry (replacing the path's older one) and rewrite the cache atomically."""
    with _lock:
        entries = _load_cache()
        entries[real] = {"size": key[1], "mtime_ns": key[2], "sha256": digest}
        try:
            _write_json_atomic(cache_path(), {"version": CACHE_VERSION, "entries": entries})
        except OSError:
            pass  # an unwritable cache costs a rehash next time, nothing more


def _write_json_atomic(path: Path, data: dict):
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda f: f.write(json.dumps(data, indent=1, sort_keys=True).encode("utf-8")))
