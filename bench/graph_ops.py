"""Costs inside a graph run, per kernel path and thread count, best of repeated runs:

  - a node's own overhead (claim, completion, wait): 480 small adds, each depending on the one before
    (a chain) or on the one two back (neighbours independent);
  - attention shaped like a Gemma 3 layer (4 query heads over 1 KV head of 256, f16 KV): prefill of 512
    positions (cycles per query-key pair at the machine's nominal clock) and one decode token at 2000.

usage: python bench/graph_ops.py [--ghz 2.1]"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

from llamay.kernels import _lib  # noqa: E402
from llamay.kernels.builder import Builder  # noqa: E402
from llamay.kernels.ops import BatchMeta  # noqa: E402
from llamay.kv import PagePool  # noqa: E402


def best(fn, reps: int) -> float:
    fn()
    out = 1e9
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def node_overhead():
    for label, stride in (("chain", 1), ("neighbours independent", 2)):
        b = Builder()
        xs, y = [b.tensor(1, 576) for _ in range(stride)], b.tensor(1, 576)
        for i in range(480):
            b.add(xs[i % stride], y)
        line = "  ".join(f"{t} threads {best(lambda: b.run(t), 50) / 480 * 1e6:.2f} us" for t in (1, 2))
        print(f"node overhead, {label}: {line}")


def attention_graph(n_tokens: int, n_ctx: int):
    rng = np.random.default_rng(0)
    ps, n_pages = 16, -(-n_ctx // 16)
    pool = PagePool(1, n_pages, ps, 1, 256)
    for arr in (pool.k[0], pool.v[0]):
        arr[:] = rng.standard_normal(arr.size // 2).astype(np.float16).view(np.uint8).reshape(arr.shape)
    b = Builder()
    batch = b.batch(n_tokens)
    q = b.tensor(n_tokens, 4 * 256)
    b.attention(q, pool, 0, batch, 4, 0.0625)
    q[:] = rng.standard_normal(q.shape)
    pos = np.arange(n_ctx - n_tokens, n_ctx, dtype=np.int32)
    table = np.arange(n_pages, dtype=np.int32)[None, :].copy()
    batch.fill(BatchMeta(pos, np.zeros(n_tokens, np.int32), table, ps))
    return b


def attention(ghz: float):
    prefill, decode = attention_graph(512, 512), attention_graph(1, 2000)
    pairs = 512 * 513 / 2
    for path in _lib.available()[1:]:
        with _lib.using(path):
            p1 = best(lambda: prefill.run(1), 5)
            d = {t: best(lambda: decode.run(t), 30) for t in (1, 2)}
        print(f"attention {path:6s}: prefill 512, 1 thread {p1 * 1e3:.1f} ms ({p1 * ghz * 1e9 / pairs:.0f} cycles "
              f"per pair); decode at 2000, 1 thread {d[1] * 1e6:.0f} us, 2 threads {d[2] * 1e6:.0f} us")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ghz", type=float, default=2.1, help="nominal clock, for cycles per pair")
    args = ap.parse_args()
    print(machine.describe())
    node_overhead()
    attention(args.ghz)
    print(f"after: {machine.load()}")


if __name__ == "__main__":
    main()
