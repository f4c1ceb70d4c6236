"""llamay vs llama.cpp on the same GGUF files, interleaved runs, medians and ratios, with the machine and
its memory-read bandwidth (decode is also shown as a share of the bandwidth limit).

llama.cpp runs as its own `llama-bench` (--llama-bench PATH: built from the llama.cpp tree inside the
llama-cpp-python sdist) or, without it, through llama-cpp-python when installed. Method as llama-bench's:
prefill = 512 tokens from an empty context in one call; decode = 128 single-token steps; --depth D adds
decode after a D-token context (llama-bench -d D), where attention's share grows.
usage: python bench/compare_llamacpp.py MODEL.gguf [MODEL.gguf ...] [--threads 2] [--reps 5]
                                        [--llama-bench PATH] [--depth 4096 --depth 16384]"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402

import llamay  # noqa: E402
from llamay.gguf import GGUFReader  # noqa: E402
from llamay.measure.bench import bench_tokens, time_decode, time_decode_at, time_prefill  # noqa: E402

N_PP, N_TG = 512, 128


def llamay_runner(path, threads, depths=()):
    llm = llamay.load(path, threads=threads, n_ctx=1024)
    ids = bench_tokens(llm.n_vocab, N_PP)
    prompt = llm.tokenize("Once upon a time", parse_special=True)
    out = {"pp": lambda: N_PP / time_prefill(llm, ids), "tg": lambda: N_TG / time_decode(llm, N_TG, prompt)}
    held = {}  # depth -> a context holding that many tokens, prefilled on first use
    # a second model of the file (its regrouped weights shared) holds them: prefill's reset() frees llm's
    deep = llamay.load(path, threads=threads, n_ctx=max(d + N_TG + 64 for d in depths)) if depths else None

    def at(d):
        if d not in held:
            held[d] = deep.create_context(bench_tokens(deep.n_vocab, d, seed=1))
        return N_TG / time_decode_at(held[d], N_TG)
    for d in depths:
        out[f"tg@{d}"] = lambda d=d: at(d)
    return out


def llama_bench_runner(exe, path, threads, depths=()):
    """One llama-bench process per measurement (it warms up itself); tokens/s as it reports them."""
    def run(p, n, d=0):
        out = subprocess.run([exe, "-m", str(path), "-t", str(threads), "-p", str(p), "-n", str(n), "-d", str(d),
                              "-r", "1", "-o", "json"], check=True, capture_output=True, text=True).stdout
        return json.loads(out)[0]["avg_ts"]
    out = {"pp": lambda: run(N_PP, 0), "tg": lambda: run(0, N_TG)}
    for d in depths:
        out[f"tg@{d}"] = lambda d=d: run(0, N_TG, d)
    return out


def llama_cpp_python_runner(path, threads):
    from llama_cpp import Llama
    llm = Llama(model_path=str(path), n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads,
                verbose=False)
    ids = bench_tokens(llm.n_vocab(), N_PP)

    def pp():
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids)
        return N_PP / (time.perf_counter() - t)

    def tg():
        llm.reset()
        llm.eval(llm.tokenize(b"Once upon a time", add_bos=True, special=True))
        t = time.perf_counter()
        for _ in range(N_TG):
            llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
        return N_TG / (time.perf_counter() - t)
    return {"pp": pp, "tg": tg}


def bytes_per_token(path) -> int:
    """Weight bytes one decode step reads: every tensor, less the embedding table when a separate output
    matrix exists (then only one row of it is read)."""
    r = GGUFReader(str(path))
    total = sum(t.n_bytes for t in r.tensors.values())
    return total - r.tensors["token_embd.weight"].n_bytes if "output.weight" in r.tensors else total


def compare(path, threads, reps, ref, depths=()):
    ours = llamay_runner(path, threads, depths)
    print(machine.kernel_choice())
    for f in ours.values():
        f()  # warm-up: plans built, pages touched, the deep contexts prefilled
    res = {(who, k): [] for who in ("ours", "ref") for k in ours}
    for _ in range(reps):
        for k in ours:
            res["ours", k].append(ours[k]())
            if ref and k in ref:
                res["ref", k].append(ref[k]())
    med = {key: statistics.median(v) for key, v in res.items() if v}
    limit = machine.read_bandwidth(threads) * 1e9 / bytes_per_token(path)
    print(f"\n{Path(path).name}: {threads} threads, {reps} interleaved runs each, medians (tok/s)")
    for k, label in (("pp", f"prefill {N_PP}"), ("tg", f"decode  {N_TG}"),
                     *((f"tg@{d}", f"decode  {N_TG} at {d}") for d in depths)):
        line = f"  {label}: llamay {med['ours', k]:8.1f}"
        if ("ref", k) in med:
            line += f"   llama.cpp {med['ref', k]:8.1f}   ratio {med['ours', k] / med['ref', k]:.2f}x"
        if k == "tg":
            line += f"   bandwidth limit {limit:.0f}: llamay at {med['ours', k] / limit:.0%}"
            if ("ref", k) in med:
                line += f", llama.cpp at {med['ref', k] / limit:.0%}"
        print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--llama-bench", help="path of llama.cpp's llama-bench")
    ap.add_argument("--depth", type=int, action="append", default=[], help="also decode after this many tokens")
    args = ap.parse_args()
    print(machine.describe(args.threads))
    for path in args.models:
        if args.llama_bench:
            ref = llama_bench_runner(args.llama_bench, path, args.threads, args.depth)
        else:
            try:
                ref = llama_cpp_python_runner(path, args.threads)
            except ImportError:
                print("neither --llama-bench nor llama-cpp-python: llamay alone")
                ref = None
        compare(path, args.threads, args.reps, ref, args.depth)
    print(f"\nafter: {machine.load()}")


if __name__ == "__main__":
    main()
