"""Benchmark of kernels.matmul on the real weight shapes of SmolLM2-135M (Q4_1) and Gemma 3 270M (Q4_K_M).

Decode (n=1): every layer's tensor of a kind in turn (weights stream from memory as in a real token),
reported as GB/s of weight bytes read. Prefill (n=512): one tensor per kind, reported as GOP/s (2*n*m*k).
Usage: python bench/matmul.py [--threads N] [--paths avx2,avx512] [--model smollm|gemma] [--file X.gguf] [--quick]
Each row is measured under every path given, in turn, so the paths are compared in one run."""
import argparse
import collections
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import gemma_file, smollm_file  # noqa: E402

from llamay.gguf import GGUFReader  # noqa: E402
from llamay.kernels import _lib  # noqa: E402
from llamay.kernels.matmul import QWeight, matmul, quantize_act, supported  # noqa: E402


def kinds(reader: GGUFReader) -> dict:
    """(kind, type, k, m) -> list of QWeight, in file order; kind is the tensor name without the layer."""
    out = collections.defaultdict(list)
    for t in reader.tensors.values():
        if len(t.shape) == 2 and supported(t.qtype):
            kind = t.name.split(".")[-2] if t.name.startswith("blk.") else t.name
            out[(kind, t.qtype.name, t.shape[0], t.shape[1])].append(QWeight.from_gguf(reader, t.name))
    return out


def best_time(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def decode_row(ws: list, threads: int, reps: int) -> tuple[float, float]:
    x = np.random.default_rng(0).standard_normal((1, ws[0].k), dtype=np.float32)
    a = quantize_act(x) if not ws[0].is_float else x
    out = np.empty((1, ws[0].m), np.float32)
    sec = best_time(lambda: [matmul(a, w, out, threads) for w in ws], reps)
    nbytes = sum(w.raw.size for w in ws)
    return sec, nbytes / sec / 1e9


def prefill_row(w, n: int, threads: int, reps: int) -> tuple[float, float]:
    x = np.random.default_rng(0).standard_normal((n, w.k), dtype=np.float32)
    out = np.empty((n, w.m), np.float32)
    matmul(x, w, out, threads)  # warm-up: first touch of out's pages
    sec = best_time(lambda: matmul(x, w, out, threads), reps)
    return sec, 2.0 * n * w.m * w.k / sec / 1e9


def bench_model(label: str, path: Path, threads: int, quick: bool, paths: list[str]):
    """One row per tensor kind; each row measured under every path in turn (interleaved), side by side."""
    groups = kinds(GGUFReader(path))
    load = os.getloadavg()[0]
    print(f"\n{label}: {path.name}  ({threads} threads, load average {load:.1f}"
          f"{': other processes share the cores' if load > 1.5 else ''})")
    cols = "".join(f"{p + ' GB/s':>13}" for p in paths) + " |" + "".join(f"{p + ' GOP/s':>14}" for p in paths)
    print(f"{'tensor':<18}{'type':<6}{'k':>6}{'m':>8}{'#':>4} | decode{cols} (prefill 512)")
    total = {p: 0.0 for p in paths}
    total_bytes = 0.0
    for (kind, tname, k, m), ws in groups.items():
        dec, pre = {}, {}
        for p in paths:
            with _lib.using(p):
                dsec, dec[p] = decode_row(ws, threads, 3 if quick else 10)
                total[p] += dsec
                pre[p] = prefill_row(ws[0], 512, threads, 1 if quick else 3)[1]
        total_bytes += sum(w.raw.size for w in ws)
        print(f"{kind:<18}{tname:<6}{k:>6}{m:>8}{len(ws):>4} |       " + "".join(f"{dec[p]:>13.1f}" for p in paths)
              + " |" + "".join(f"{pre[p]:>14.1f}" for p in paths))
    for p in paths:
        print(f"{p}: all matmuls of one decoded token {total[p] * 1e3:.2f} ms, {total_bytes / 1e6:.1f} MB, "
              f"{total_bytes / total[p] / 1e9:.1f} GB/s ({1 / total[p]:.0f} tok/s bound)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--paths", default=",".join(_lib.available()[1:] or _lib.available()),
                   help="kernel paths to compare, comma-separated (default: every SIMD path this CPU runs)")
    p.add_argument("--model", choices=("smollm", "gemma", "both"), default="both")
    p.add_argument("--file", type=Path, action="append", help="a GGUF file instead of --model (e.g. bench/dense_files.py's)")
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = p.parse_args()
    paths = [x for x in args.paths.split(",") if x]
    for x in paths:
        if x not in _lib.available():
            raise SystemExit(f"this CPU has no {x} path (it runs: {', '.join(_lib.available())})")
    print(f"machine: {_machine()}")
    for path in args.file or []:
        bench_model(path.stem, path, args.threads, args.quick, paths)
    if args.file:
        return
    if args.model in ("smollm", "both"):
        bench_model("SmolLM2-135M Q4_1", smollm_file(), args.threads, args.quick, paths)
    if args.model in ("gemma", "both"):
        bench_model("Gemma 3 270M Q4_K_M", gemma_file(), args.threads, args.quick, paths)


def _machine() -> str:
    sys.path.insert(0, str(Path(__file__).parent))
    import machine
    return machine.cpu()


if __name__ == "__main__":
    main()
