"""Anonymous memory for large arrays that are faulted in as they are first written: zeros on a 2 MiB boundary,
with huge pages asked for where the kernel gives them on request (Linux THP "madvise"): a weight streamed whole
each token then costs far fewer TLB misses. (Not for the state slots: on a VM whose guest memory the host backs
on first touch, a slot's first write cost the same with huge pages, and the kernel's compaction for them can
stall it longer.)"""
from __future__ import annotations

import mmap

import numpy as np

HUGE = 2 << 20


def huge_zeros(n: int) -> np.ndarray:
    """n bytes of zeros (uint8), 2 MiB aligned; 64-byte aligned plain memory where there is no anonymous mmap
    (Windows)."""
    if not hasattr(mmap, "MAP_ANONYMOUS"):
        arr = np.zeros(n + 64, np.uint8)
        off = -arr.ctypes.data % 64
        return arr[off:off + n]
    buf = mmap.mmap(-1, n + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buf.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without THP
            pass
    arr = np.frombuffer(buf, np.uint8)
    off = -arr.ctypes.data % HUGE
    return arr[off:off + n]
