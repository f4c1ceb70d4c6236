"""State engine benchmarks: restore of a saved 512-token context vs re-prefilling it, fork cost, and
decode speed with paged KV at several page sizes (page_size >= context = one contiguous page).
usage: python bench/state.py MODEL.gguf [--threads 2] [--reps 5] [--decode-ctx 512 4096]"""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from llamay.engine.llm import LLM


def median_time(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def restore_vs_prefill(path, threads, reps):
    llm = LLM(path, threads=threads, n_ctx=2048)
    ids = np.random.default_rng(0).integers(300, llm.n_vocab - 300, 512).tolist()

    def prefill():
        llm.reset()
        llm.create_context(ids).delete(cache=False)
    t_prefill = median_time(prefill, reps)
    with tempfile.TemporaryDirectory() as tmp:
        snap = os.path.join(tmp, "ctx.llamayctx")
        llm.create_context(ids).save(snap)

        def restore():
            llm.restore_context(snap).delete(cache=False)
        restore()
        t_restore = median_time(restore, reps * 4)
    print(f"512-token context: re-prefill {t_prefill * 1e3:.1f} ms, restore from file {t_restore * 1e3:.2f} ms, "
          f"ratio {t_prefill / t_restore:.0f}x")
    long_ids = np.random.default_rng(2).integers(300, llm.n_vocab - 300, 32 * llm.page_size).tolist()
    llm.reset()
    base = llm.create_context(long_ids)
    before = llm.kv_view().stats.pages_allocated
    t = time.perf_counter()
    kids = base.fork(8)
    dt = (time.perf_counter() - t) / 8
    print(f"fork of a {base.n_pages}-page context 8 ways: {dt * 1e6:.1f} us per branch, "
          f"{llm.kv_view().stats.pages_allocated - before} pages allocated")
    for k in kids + [base]:
        k.delete(cache=False)


def decode_speed(path, threads, n_ctx, page_size, n=64):
    llm = LLM(path, threads=threads, n_ctx=n_ctx + n + 8, page_size=page_size)
    ids = np.random.default_rng(1).integers(300, llm.n_vocab - 300, n_ctx).tolist()
    ctx = llm.create_context(ids)
    tok = int(np.argmax(ctx.logits))
    t = time.perf_counter()
    for _ in range(n):
        tok = int(np.argmax(ctx.extend([tok])))
    return n / (time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--decode-ctx", type=int, nargs="*", default=[512, 4096])
    ap.add_argument("--page-sizes", type=int, nargs="*", default=[16, 32, 64, 256])
    args = ap.parse_args()
    restore_vs_prefill(args.model, args.threads, args.reps)
    for n_ctx in args.decode_ctx:
        contiguous = decode_speed(args.model, args.threads, n_ctx, n_ctx + 72)  # one page per context
        row = [f"contiguous {contiguous:.1f}"]
        for ps in args.page_sizes:
            tps = decode_speed(args.model, args.threads, n_ctx, ps)
            row.append(f"page {ps}: {tps:.1f} ({tps / contiguous - 1:+.1%})")
        print(f"decode tok/s at context {n_ctx}: " + ", ".join(row))


if __name__ == "__main__":
    main()
