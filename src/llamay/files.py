"""File primitives shared by snapshots, the digest cache and the model store (imports nothing from llamay):
atomic replacement of a file, and sha256 of a file read once in large blocks."""
from __future__ import annotations

import hashlib
import os
import tempfile
from typing import BinaryIO, Callable

CHUNK = 8 << 20  # bytes per read; hashlib releases the GIL on large updates


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], None]):
    """write(f) into a temp file in the same folder, fsync, rename over path, fsync the folder; on any
    failure the temp file is removed and path is untouched."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with open(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(folder)


def fsync_dir(folder: str | os.PathLike):
    """Make a rename inside folder durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: str | os.PathLike) -> str:
    """sha256 hex of the file's bytes (no prefix)."""
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()
