"""Builds the C kernels as one shared library loaded with ctypes (no Python C API: ctypes releases the
GIL during calls). Portable C plus ISA units compiled with target attributes, each only for its
architecture (x86-64: AVX2, AVX-VNNI, AVX-512; arm64: NEON, dotprod, i8mm); csrc/dispatch.c's kernel table
chooses among them at run time. GCC or clang; on Windows MinGW-w64's gcc (MSVC cannot build the core: GCC
attributes and builtins). Threads are the platform's (csrc/pool.c), no OpenMP: POSIX threads, or Win32's
(linked with Synchronization.lib for WaitOnAddress)."""
import sys
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

WINDOWS = sys.platform == "win32"
THREADS = [] if WINDOWS else ["-pthread"]


class BuildCore(build_ext):
    """A plain shared library, not a Python module: no PyInit_ export and no libpython (csrc/common.h
    LY_API marks the exports). Units compile in parallel; on Windows with MinGW-w64 (`--compiler` overrides)."""

    def initialize_options(self):
        super().initialize_options()
        self.parallel = True  # one compiler per CPU
        if WINDOWS:
            self.compiler = "mingw32"

    def get_export_symbols(self, ext):
        return []

    def get_libraries(self, ext):
        return ext.libraries


setup(cmdclass={"build_ext": BuildCore}, ext_modules=[Extension(
    "llamay.kernels._kernels",
    sources=sorted(glob("src/llamay/kernels/csrc/*.c")),
    depends=sorted(glob("src/llamay/kernels/csrc/*.h")),
    # -ffp-contract=off: no silent FMA, so the portable and AVX2 paths do the same float operations.
    extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off", "-fno-fast-math"] + THREADS,
    # Windows: -static, so the DLL needs no MinGW runtime DLL beside it (only the system's)
    extra_link_args=["-static"] if WINDOWS else THREADS,
    libraries=["synchronization"] if WINDOWS else [],
)])
