"""Loads the compiled kernel library once and declares C signatures (ctypes releases the GIL per call)."""
import contextlib
import ctypes
import importlib.machinery
import os

from .. import env

_HERE = os.path.dirname(__file__)


def _find_library() -> str:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(_HERE, "_kernels" + suffix)
        if os.path.exists(path):
            return path
    raise ImportError("llamay's C kernels are not built: reinstall with `pip install .` "
                      "(or `python setup.py build_ext --inplace` in a checkout)")


lib = ctypes.CDLL(_find_library())
P = ctypes.c_void_p
I64 = ctypes.c_int64
I32 = ctypes.c_int
F32 = ctypes.c_float


def declare(name: str, *argtypes, restype=None):
    fn = getattr(lib, name)
    fn.argtypes, fn.restype = list(argtypes), restype
    return fn


declare("ly_init", I32, restype=I32)
declare("ly_best_path", restype=I32)
declare("ly_can_run", I32, restype=I32)

# csrc/common.h LY_PATH_*: each bit-identical to the others (x86-64: avx2..avx512; arm64: neon..i8mm)
PATHS = ("portable", "avx2", "avxvnni", "avx512", "neon", "dotprod", "i8mm")


def available() -> tuple[str, ...]:
    """The kernel paths this CPU runs, portable first."""
    return tuple(name for i, name in enumerate(PATHS) if lib.ly_can_run(i))


def current() -> str:
    return _current


def set_path(name: str) -> None:
    """Switch the kernel path at run time ('auto': the widest this CPU runs, until the first model load
    measures the paths: pathpick.py). Raises ValueError for a path the CPU lacks."""
    global _current, _auto_pending
    got = lib.ly_init(-1 if name == "auto" else PATHS.index(name))
    if got < 0:
        raise ValueError(f"this CPU cannot run the {name} kernels (it runs: {', '.join(available())})")
    _current, _auto_pending = PATHS[got], name == "auto"


def auto_pending() -> bool:
    """True while the path is 'auto' by flags and no measured choice (or explicit path) replaced it."""
    return _auto_pending


@contextlib.contextmanager
def using(name: str):
    """Run a block under one kernel path, then restore the previous one (tests and `verify` compare paths)."""
    old = _current
    set_path(name)
    try:
        yield
    finally:
        set_path(old)


def each_path(fn) -> dict:
    """{path: fn() under that path} for every path this CPU runs (portable first)."""
    out = {}
    for name in available():
        with using(name):
            out[name] = fn()
    return out


def skipped() -> tuple[str, ...]:
    """The paths this CPU cannot run (comparisons say which were left out)."""
    return tuple(name for name in PATHS if name not in available())


_current, _auto_pending = "portable", False
set_path(env.kernels_path())
