"""Where a forward pass spends its time, by op: the model's own layer graph (models/forward.py) run with a
barrier after every node, each node timed from the barrier before it to the one after (its slowest
thread), best of several runs per node. Decode is one token at a given context position, prefill a chunk
of tokens from position 0. The op shares show which nodes fusion could remove (small nodes cost their
latency, not their work), and the builder's fusions are timed against the same plan built without them.

usage: python bench/profile_ops.py [-m MODEL] [-t 1,2] [--ctx 256] [--prefill 512] [--reps 20]"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

from llamay.defaults import default_model_path  # noqa: E402
from llamay.engine.llm import load  # noqa: E402
from llamay.kernels.ops import BatchMeta  # noqa: E402
from llamay.models.forward import ForwardGraph  # noqa: E402


def make_plan(llm, n: int, start: int, fuse: bool = True) -> ForwardGraph:
    dec, page = llm.decoder, 16
    pool, states = dec.new_pool(-(-(start + n) // page), page), dec.new_states(1)
    plan = dec.new_plan(n, pool, fuse, states=states)
    plan.x[:] = np.random.default_rng(0).standard_normal(plan.x.shape).astype(np.float32) * 0.1
    pos = np.arange(start, start + n, dtype=np.int32)
    table = np.arange(pool.n_pages, dtype=np.int32)[None, :].copy()
    slots = np.zeros(1, np.int32) if states is not None else None  # a hybrid's one recurrent state slot
    plan.batch.fill(BatchMeta(pos, np.zeros(n, np.int32), table, page, slots))
    return plan


def fused_against_separate(llm, n: int, start: int, threads: int, reps: int) -> str:
    """Median seconds of whole runs (no barriers), fused and separate plans interleaved; same bits."""
    plans = {f: make_plan(llm, n, start, f) for f in (True, False)}
    x0, times = plans[True].x.copy(), {True: [], False: []}
    for _ in range(reps):
        for f, plan in plans.items():
            plan.x[:] = x0
            t = time.perf_counter()
            plan.b.run(threads)
            times[f].append(time.perf_counter() - t)
    assert np.array_equal(plans[True].x, plans[False].x)
    a, b = (statistics.median(times[f]) for f in (True, False))
    nodes = {f: len(p.b._g._specs) for f, p in plans.items()}
    return (f"fused {nodes[True]} nodes {a * 1e3:.3f} ms, separate {nodes[False]} nodes {b * 1e3:.3f} ms "
            f"(fused takes {a / b:.3f} of the time; identical outputs)")


def profile(llm, n: int, start: int, threads: int, reps: int) -> dict[str, list[float]]:
    plan = make_plan(llm, n, start)
    x0 = plan.x.copy()
    best = None
    for _ in range(reps):
        plan.x[:] = x0
        t = np.array([s for _, s in plan.b.profile(threads)])
        best = t if best is None else np.minimum(best, t)
    by_op: dict[str, list[float]] = defaultdict(list)
    for (op, _), s in zip(plan.b.profile(threads), best):
        by_op[op].append(s)
    return by_op


def show(label: str, by_op: dict[str, list[float]], n: int):
    total = sum(sum(v) for v in by_op.values())
    print(f"{label}: {sum(len(v) for v in by_op.values())} nodes, {total * 1e3:.2f} ms "
          f"({n / total:.0f} tok/s without the head)")
    for op, v in sorted(by_op.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {op:10s} {len(v):4d} nodes  {sum(v) * 1e3:7.3f} ms  {sum(v) / total:6.1%}  "
              f"{np.median(v) * 1e6:7.1f} us median")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("-t", "--threads", default="1,2")
    ap.add_argument("--ctx", type=int, default=256, help="decode position")
    ap.add_argument("--prefill", type=int, default=512, help="0: decode only")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    print(machine.describe())
    llm = load(args.model or default_model_path())
    print(f"model: {llm.path}")
    for t in (int(x) for x in args.threads.split(",")):
        show(f"decode at {args.ctx}, {t} threads", profile(llm, 1, args.ctx, t, args.reps), 1)
        if args.prefill:
            show(f"prefill {args.prefill}, {t} threads", profile(llm, args.prefill, 0, t, max(args.reps // 10, 2)),
                 args.prefill)
        print(f"decode, {t} threads: {fused_against_separate(llm, 1, args.ctx, t, args.reps * 10)}")
        if args.prefill:
            print(f"prefill, {t} threads: {fused_against_separate(llm, args.prefill, 0, t, max(args.reps // 4, 3))}")
    print(f"after: {machine.load()}")


if __name__ == "__main__":
    main()
