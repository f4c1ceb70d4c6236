"""GGML tiles vs x16 tiles (csrc/x16.h) on random weights, per kernel path and type, one core: decode
matvecs in cache (one matrix again and again) and streaming (--mats matrices in turn, more than the L3),
and --tokens tokens in cache; GB/s of weight bytes, best of several runs, the two layouts interleaved.
Usage: python bench/x16.py [--paths avx2,avx512] [--types Q4_0,Q4_K] [--m 2048 --k 2048] [--mats 24] [--tokens 16]"""
import argparse
import os
import time

import numpy as np

from llamay.kernels import _lib
from llamay.kernels.matmul import QWeight, matmul, quantize_act
from llamay.kernels.quantize import quantize_rows


def best(fns: dict, reps: int) -> dict:
    """label -> best seconds of fns[label](), the labels taking turns"""
    out = dict.fromkeys(fns, float("inf"))
    for _ in range(reps):
        for label, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[label] = min(out[label], time.perf_counter() - t0)
    return out


def quantized(wf: np.ndarray, name: str) -> np.ndarray:
    """wf's rows in the type; IQ4_NL, which the quantizer does not write: random nibbles under f16 scales"""
    if name != "IQ4_NL":
        return quantize_rows(wf, name).reshape(-1)
    rng = np.random.default_rng(1)
    blocks = np.empty((wf.size // 32, 18), np.uint8)
    blocks[:, :2] = (rng.standard_normal(len(blocks)) * 0.01).astype(np.float16).view(np.uint8).reshape(-1, 2)
    blocks[:, 2:] = rng.integers(0, 256, (len(blocks), 16), dtype=np.uint8)
    return blocks.reshape(-1)


def row(path: str, name: str, what: str, nbytes: int, sec: dict):
    g, x = (nbytes / sec[k] / 1e9 for k in ("ggml", "x16"))
    print(f"{path:<8}{name:<8}{what:<22}{g:>8.1f}{x:>8.1f}{x / g:>8.2f}x", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--paths", default=",".join(_lib.available()[1:]))
    p.add_argument("--types", default="Q4_0,Q8_0,Q4_K,Q6_K")
    p.add_argument("--m", type=int, default=2048)
    p.add_argument("--k", type=int, default=2048)
    p.add_argument("--mats", type=int, default=24, help="matrices streamed in turn (0: skip)")
    p.add_argument("--tokens", type=int, default=16, help="tokens of the many-token row (0: skip)")
    args = p.parse_args()
    m, k, rng = args.m, args.k, np.random.default_rng(0)
    wf = rng.standard_normal((m, k)).astype(np.float32) * 0.05
    a1 = quantize_act(rng.standard_normal((1, k)).astype(np.float32))
    an = quantize_act(rng.standard_normal((max(args.tokens, 1), k)).astype(np.float32))
    out = np.empty((max(args.tokens, 1), m), np.float32)
    print(f"load average {os.getloadavg()[0]:.1f}; [{m}, {k}], one thread; GB/s of weight bytes")
    print(f"{'path':<8}{'type':<8}{'':<22}{'GGML':>8}{'x16':>8}")
    for name in args.types.split(","):
        raw = quantized(wf, name)
        ws = [QWeight(raw.copy(), name, m, k) for _ in range(max(args.mats, 1))]
        xs = [w.repacked(force=True) for w in ws]
        for path in args.paths.split(","):
            with _lib.using(path):
                sec = best({"ggml": lambda: matmul(a1, ws[0], out[:1], 1), "x16": lambda: matmul(a1, xs[0], out[:1], 1)}, 60)
                row(path, name, "decode, in cache", raw.size, sec)
                if args.mats:
                    sec = best({"ggml": lambda: [matmul(a1, w, out[:1], 1) for w in ws],
                                "x16": lambda: [matmul(a1, w, out[:1], 1) for w in xs]}, 8)
                    row(path, name, f"decode, {args.mats} streamed", raw.size * args.mats, sec)
                if args.tokens:
                    sec = best({"ggml": lambda: matmul(an, ws[0], out, 1), "x16": lambda: matmul(an, xs[0], out, 1)}, 20)
                    row(path, name, f"{args.tokens} tokens, in cache", raw.size, sec)


if __name__ == "__main__":
    main()
