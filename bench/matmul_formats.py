"""matmul speed by weight format on one random matrix: decode (n=1, GB/s of weight bytes over several
matrices so they stream from memory) and prefill (n=128, GOP/s), under every kernel path this CPU runs,
interleaved. usage: python bench/matmul_formats.py [--types Q4_0,Q4_K,Q6_K,IQ4_NL,IQ4_XS,MXFP4] [--threads 2]"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

from llamay.gguf import BY_NAME  # noqa: E402
from llamay.kernels import _lib  # noqa: E402
from llamay.kernels.matmul import QWeight, act_block, matmul, quantize_act  # noqa: E402

M = K = 2048
N_MATS = 64  # 64 x ~2.3 MB: beyond the caches


def random_weight(name: str, rng) -> QWeight:
    qt = BY_NAME[name]
    raw = rng.integers(0, 256, (M * K // qt.block_size, qt.type_size), dtype=np.uint8)
    if name == "MXFP4":
        raw[:, 0] = 120
    else:
        raw[:, 0:2] = np.full((len(raw), 1), 0.01, np.float16).view(np.uint8)
    return QWeight(raw.reshape(-1), name, M, K)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default="Q4_0,Q8_0,IQ4_NL,IQ4_XS,MXFP4")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    print(machine.describe(args.threads))
    rng = np.random.default_rng(0)
    v1, vp = rng.standard_normal((1, K)).astype(np.float32), rng.standard_normal((128, K)).astype(np.float32)
    for name in args.types.split(","):
        ws = [random_weight(name, rng) for _ in range(N_MATS)]
        bs = act_block(ws[0].qtype)  # the K-quants read activations in 256-value blocks
        x1, xp = quantize_act(v1, bs=bs), quantize_act(vp, bs=bs)
        for path in _lib.available():
            with _lib.using(path):
                dec, pre = [], []
                for _ in range(args.reps):
                    t = time.perf_counter()
                    for w in ws:
                        matmul(x1, w, n_threads=args.threads)
                    dec.append(sum(w.raw.size for w in ws) / (time.perf_counter() - t) / 1e9)
                    t = time.perf_counter()
                    matmul(xp, ws[0], n_threads=args.threads)
                    pre.append(2 * 128 * M * K / (time.perf_counter() - t) / 1e9)
            print(f"{name:7s} {path:8s} decode {statistics.median(dec):6.1f} GB/s   prefill "
                  f"{statistics.median(pre):6.1f} GOP/s")
    print(machine.load())


if __name__ == "__main__":
    main()
