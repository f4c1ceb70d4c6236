"""K-quant matmul speed on gemma-3-270m's real Q4_K and Q6_K tensors.

Decode (1 token): GB/s of weight bytes, cycling over every layer's tensor of the kind (so not one
cache-resident matrix). Prefill (512 tokens): GOP/s (2 * m * k * n / s) on layer 0's tensor. Both through
the tile on 1 thread (ly_qk_tile_call) and through the driver on 2 threads (ly_matmul).
usage: python bench/matmul_qk.py [path/to/gemma-3-270m-q4_k_m.gguf]"""
import ctypes
import sys
import time

import numpy as np

from llamay.gguf import GGUFReader
from llamay.kernels import _lib
from llamay.kernels import matmul as mm
from llamay.kernels import reference_qk as ref
from models import gemma_path

P, I64 = ctypes.c_void_p, ctypes.c_int64
TILE = _lib.declare("ly_qk_tile_call", ctypes.c_int, P, ctypes.c_size_t, I64, I64, P, P, P, I64, I64, I64, P,
                    I64, restype=ctypes.c_int)


def runner(w: np.ndarray, qtype: str, act, threads: int):
    """-> a no-argument function computing y = x @ w.T once (1 thread: the tile; else: the driver)"""
    m, (n, k) = w.shape[0], act.q.shape
    if threads > 1:
        qw, out = mm.QWeight(w.reshape(-1), qtype, m, k), np.empty((n, m), np.float32)
        return lambda: mm.matmul(act, qw, out=out, n_threads=threads)
    y = np.empty((n, m), np.float32)
    return lambda: TILE(ref.TYPE_IDS[qtype], w.ctypes.data, w.shape[1], 0, m, act.q.ctypes.data,
                        act.d.ctypes.data, act.s16.ctypes.data, k, 0, n, y.ctypes.data, m)


def best_time(fns, repeats: int) -> tuple[float, float]:
    """(wall, process cpu) seconds for one pass over fns, best of repeats. On a shared machine the cpu time
    of 1 thread is the steadier figure; with 2 threads it sums both."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        for fn in fns:
            fn()
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return wall, cpu


def bench(r: GGUFReader, suffix: str, qtype: str):
    names = [n for n, t in r.tensors.items() if n.endswith(suffix) and t.qtype.name == qtype]
    mats = [np.asarray(r.data(n)).reshape(r.tensors[n].shape[1], -1) for n in names]
    k, nbytes = r.tensors[names[0]].shape[0], sum(w.nbytes for w in mats)
    rng = np.random.default_rng(0)
    one, many = (mm.quantize_act(rng.standard_normal((n, k)).astype(np.float32)) for n in (1, 512))
    print(f"{qtype} {suffix} k={k} m={mats[0].shape[0]}, decode over {len(mats)} layers ({nbytes / 1e6:.1f} MB)")
    for threads in (1, 2):
        dec = best_time([runner(w, qtype, one, threads) for w in mats], 50)
        pre = best_time([runner(mats[0], qtype, many, threads)], 5)
        ops = 2 * mats[0].shape[0] * k * 512
        print(f"  threads={threads}: decode {nbytes / dec[0] / 1e9:5.1f} GB/s wall, {nbytes / dec[1] / 1e9:5.1f} cpu"
              f" | prefill 512: {ops / pre[0] / 1e9:5.1f} GOP/s wall, {ops / pre[1] / 1e9:5.1f} cpu")


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else str(gemma_path())
    r = GGUFReader(path)
    print(f"path: {_lib.current()}")
    bench(r, "attn_output.weight", "Q4_K")
    bench(r, "ffn_down.weight", "Q4_K")
    bench(r, "ffn_down.weight", "Q6_K")


if __name__ == "__main__":
    main()
