"""Loads the compiled kernel library once and declares C signatures (ctypes releases the GIL per call)."""
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
declare("ly_max_threads", restype=I32)
AVX2 = bool(lib.ly_init(1 if env.kernels_path() == "portable" else 0))


def set_path(portable: bool) -> bool:
    """Switch kernel path at run time (tests compare paths); returns whether AVX2 is now used."""
    global AVX2
    AVX2 = bool(lib.ly_init(1 if portable else 0))
    return AVX2
