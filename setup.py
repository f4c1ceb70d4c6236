"""Builds the C kernels as one shared library loaded with ctypes (no Python C API: ctypes releases the
GIL during calls). Portable C plus ISA units compiled with target attributes, each only for its
architecture (x86-64: AVX2, AVX-VNNI, AVX-512; arm64: NEON, dotprod, i8mm); csrc/dispatch.c's kernel table
chooses among them at run time. GCC or clang (MinGW-w64 on Windows; MSVC cannot build the core). Threads are the platform's (csrc/pool.c),
no OpenMP: POSIX threads, or Win32's (linked with Synchronization.lib for WaitOnAddress)."""
import sys
from glob import glob

from setuptools import Extension, setup

THREADS = [] if sys.platform == "win32" else ["-pthread"]

setup(ext_modules=[Extension(
    "llamay.kernels._kernels",
    sources=sorted(glob("src/llamay/kernels/csrc/*.c")),
    depends=sorted(glob("src/llamay/kernels/csrc/*.h")),
    # -ffp-contract=off: no silent FMA, so the portable and AVX2 paths do the same float operations.
    extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off", "-fno-fast-math"] + THREADS,
    extra_link_args=THREADS,
    libraries=["synchronization"] if sys.platform == "win32" else [],
)])
