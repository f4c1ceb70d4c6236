"""llamay vs llama.cpp (llama-cpp-python) on the same GGUF file, interleaved runs, medians and ratios.

Method as in ../shared/fixtures/llamacpp/*/bench.json: prefill = 512 tokens from an empty context in one
call; decode = after the prompt "Once upon a time", 128 greedy single-token steps.
usage: python bench/compare_llamacpp.py MODEL.gguf [--threads 2] [--reps 3]"""
import argparse
import statistics
import time

import numpy as np

import llamay
from llamay.tools.bench import time_decode, time_prefill


def llamay_runs(path, threads):
    llm = llamay.load(path, threads=threads, n_ctx=1024)
    prompt = llm.tokenize("Once upon a time", parse_special=True)
    return llm, lambda ids: time_prefill(llm, ids), lambda n: time_decode(llm, n, prompt)


def llamacpp_runs(path, threads):
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=1024, n_batch=512, n_threads=threads, n_threads_batch=threads,
                verbose=False)
    prompt = llm.tokenize(b"Once upon a time", add_bos=True, special=True)

    def prefill(ids):
        llm.reset()
        t = time.perf_counter()
        llm.eval(ids)
        return time.perf_counter() - t

    def decode(n):
        llm.reset()
        llm.eval(prompt)
        t = time.perf_counter()
        for _ in range(n):
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            llm.eval([tok])
        return time.perf_counter() - t
    return llm, prefill, decode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    ours_llm, ours_pp, ours_tg = llamay_runs(args.model, args.threads)
    ids = [ours_llm.tokenizer.bos_id or 0] + ours_llm.tokenize(
        open(__file__).read() * 8, add_special=False)[:511]
    try:
        _, ref_pp, ref_tg = llamacpp_runs(args.model, args.threads)
    except ImportError:
        ref_pp = ref_tg = None
        print("llama-cpp-python is not installed: printing llamay alone")
    res = {k: [] for k in ("ours_pp", "ours_tg", "ref_pp", "ref_tg")}
    ours_pp(ids), ours_tg(8)  # warm-up
    if ref_pp:
        ref_pp(ids), ref_tg(8)
    for _ in range(args.reps):
        res["ours_pp"].append(ours_pp(ids))
        if ref_pp:
            res["ref_pp"].append(ref_pp(ids))
        res["ours_tg"].append(ours_tg(128))
        if ref_tg:
            res["ref_tg"].append(ref_tg(128))
    pp = {k: 512 / statistics.median(v) for k, v in res.items() if v and k.endswith("pp")}
    tg = {k: 128 / statistics.median(v) for k, v in res.items() if v and k.endswith("tg")}
    print(f"model {args.model}, {args.threads} threads, {args.reps} interleaved runs (medians)")
    print(f"prefill 512: llamay {pp['ours_pp']:7.1f} tok/s" +
          (f"   llama.cpp {pp['ref_pp']:7.1f} tok/s   ratio {pp['ours_pp'] / pp['ref_pp']:.2f}x" if ref_pp else ""))
    print(f"decode  128: llamay {tg['ours_tg']:7.1f} tok/s" +
          (f"   llama.cpp {tg['ref_tg']:7.1f} tok/s   ratio {tg['ours_tg'] / tg['ref_tg']:.2f}x" if ref_tg else ""))


if __name__ == "__main__":
    main()
