"""Benchmark of .llamayctx snapshots at the KV geometry of Gemma 3 270M and SmolLM2-135M (f16 KV).

Per context length: write (atomic, fsync included), read + verify (map, checksum, views), and two
restores into fresh, scattered pages of a pool laid out as kv/pool.py's (uint8 [n_slots, row_bytes] per
layer): "views+copy" = read_snapshot then one numpy assignment per layer and K/V; "into pool" =
SnapshotFile.read_pages_into (preadv straight into the pages, checksum while they are in cache).
Files are in the page cache (a warm restore). Times are the median of --repeat runs (min in brackets).
With --prefill, also times re-prefilling 512 tokens of each model with llamay and prints the ratio.
Usage: python bench/snapshot_io.py [--page-size N] [--repeat N] [--prefill] [--dir DIR]"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from llamay.kv.snapshot_format import KVGeometry, SnapshotFile, SnapshotHeader, read_snapshot, write_snapshot

GEOMETRY = {"gemma3-270m": ("gemma3", 18, 1, 256), "smollm2-135m": ("llama", 30, 3, 64)}  # n_layer, n_kv_head, head_dim
DIGEST = "0" * 64


def timed(fn, repeat: int) -> tuple[float, float]:
    """(median, min) seconds."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times)


def fmt(t: tuple[float, float]) -> str:
    return f"{t[0] * 1e3:6.2f} ({t[1] * 1e3:5.2f}) ms"


def make(g: KVGeometry, n_tokens: int):
    rng = np.random.default_rng(0)
    header = SnapshotHeader(DIGEST, g, rng.integers(0, 50_000, n_tokens))
    shape = g.layer_shape(header.n_pages, g.k_page_bytes)
    layers = [[rng.standard_normal(shape, np.float32).astype(np.float16) for _ in range(g.n_layer)] for _ in "kv"]
    return header, layers[0], layers[1]


def restore_views(path: Path, pool_k: list, pool_v: list, page_ids: np.ndarray):
    snap = read_snapshot(path)
    n, page_size = snap.header.n_pages, snap.header.geometry.page_size
    for pool, layers in ((pool_k, snap.layers_k), (pool_v, snap.layers_v)):
        for dest, layer in zip(pool, layers):
            dest[page_ids] = layer.view(np.uint8).reshape(n, page_size, -1)


def restore_pool(path: Path, pool_k: list, pool_v: list, page_ids: np.ndarray):
    with SnapshotFile(path) as f:
        f.read_pages_into(pool_k, pool_v, page_ids)


def bench_one(folder: Path, name: str, n_tokens: int, args) -> float:
    arch, n_layer, n_kv_head, head_dim = GEOMETRY[name]
    g = KVGeometry.dense(arch, n_layer, n_kv_head, head_dim, "f16", args.page_size)
    header, ks, vs = make(g, n_tokens)
    path = folder / f"{name}-{n_tokens}.llamayctx"
    t_write = timed(lambda: write_snapshot(path, header, ks, vs), min(args.repeat, 5))
    t_read = timed(lambda: read_snapshot(path), args.repeat)
    n_pool_pages = 3 * header.n_pages + 1
    pool_k, pool_v = ([np.zeros((n_pool_pages, args.page_size, g.k_page_bytes // args.page_size), np.uint8)
                       for _ in range(n_layer)] for _ in "kv")
    page_ids = np.arange(header.n_pages) * 3 + 1  # scattered, as a free list hands them out
    t_views = timed(lambda: restore_views(path, pool_k, pool_v, page_ids), args.repeat)
    t_pool = timed(lambda: restore_pool(path, pool_k, pool_v, page_ids), args.repeat)
    mb = path.stat().st_size / 1e6
    print(f"{name:13s} {n_tokens:5d} tok {mb:6.2f} MB  write {fmt(t_write)}  read+verify {fmt(t_read)}  "
          f"restore: views+copy {fmt(t_views)}  into pool {fmt(t_pool)}")
    return t_pool[0]


def prefill_seconds(model_path: Path, n_tokens: int) -> float:
    import llamay
    llm = llamay.load(model_path)
    ids = [int(t) for t in np.random.default_rng(0).integers(10, 1000, n_tokens)]

    def run():
        llm.reset()
        llm.eval_last(ids)
    return timed(run, 2)[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--page-size", type=int, default=256)  # engine/llm.py's PAGE_SIZE
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--prefill", action="store_true", help="also time re-prefill of 512 tokens (slow)")
    ap.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        restore = {(name, n): bench_one(Path(tmp), name, n, args) for name in GEOMETRY for n in (512, 4096)}
    if args.prefill:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from conftest import gemma_file, smollm_file
        for name, find in (("gemma3-270m", gemma_file), ("smollm2-135m", smollm_file)):
            t = prefill_seconds(find(), 512)
            print(f"{name:13s}  512 tok  prefill {t * 1e3:7.1f} ms   restore {restore[(name, 512)] * 1e3:5.2f} ms"
                  f"   restore is {t / restore[(name, 512)]:5.0f}x faster")


if __name__ == "__main__":
    main()
