"""Speculative decoding's speed: decode tok/s with spec none vs ngram (prompt lookup) and tree (a re-run turn:
the first run's branch is in the radix tree), and with --draft-model a draft model's, on the tasks of
llamay/measure/spec_tasks.py; side by side with llama.cpp on the same files and prompts: plain decoding
(llama-cpp-python), its native speculative modes (`llama-speculative-simple --spec-type ngram-simple,
ngram-map-k, ngram-mod, ngram-cache`, or draft-simple with the draft model) and llama-cpp-python's
prompt-lookup drafter. Runs interleaved, medians; decode = (generated - 1) tokens over the time from the first
token to the last (llama-speculative-simple: its own "decoded" figure). Also the cost of a decode step of 2,
4, 8, 16 tokens inside generations relative to one of 1 (what settings.SPEC.step_cost assumes).

usage: python bench/spec.py [MODEL.gguf ...] [--threads 2] [--reps 5] [--tokens 128] [--tasks code,doc,...]
       [--draft-model FILE] [--no-llamacpp] [--llamacpp-bin DIR]
llama.cpp's columns need llama-cpp-python (LLAMA_CPP_LIB_PATH=<dir of libllama.so> PYTHONPATH=<its source>)
and DIR holding llama-speculative-simple (built from the same llama.cpp tree); what is missing is skipped.
Default models: SmolLM2-135M, and Gemma 3 270M when installed."""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402
from models import gemma_path, smollm_path  # noqa: E402

import llamay  # noqa: E402
from llamay.engine.context_store import ContextStore  # noqa: E402
from llamay.measure.spec_tasks import SEEDED, TASKS  # noqa: E402

LLAMACPP_TYPES = ("ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache")


def llamay_runner(llm, spec: str, rerun: bool = False):
    def run(prompt: str, sampling: dict, n: int) -> tuple[float, float]:
        """-> (decode tok/s, draft tokens accepted per pass that verified one). rerun: the prompt's answer
        generated once before (untimed), as a re-run turn finds it in the tree."""
        llm.reset()
        if rerun:
            list(llm.generate(prompt, max_tokens=n, spec="none", **sampling))
        list(llm.generate(prompt, max_tokens=n, spec=spec, **sampling))
        st = llm.stats
        return (st.generated_tokens - 1) / st.decode_s, st.accepted_tokens / max(1, st.draft_steps)
    return run


def llamacpp_runner(path, threads: int, draft: int | None):
    """llama-cpp-python generating token by token (draft: its prompt-lookup drafter's tokens per step)."""
    from llama_cpp import Llama, llama_vocab_is_eog
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    lookup = LlamaPromptLookupDecoding(num_pred_tokens=draft) if draft else None
    llm = Llama(model_path=str(path), n_ctx=2048, n_batch=512, n_threads=threads, n_threads_batch=threads,
                verbose=False, draft_model=lookup, seed=SEEDED["seed"])

    def run(prompt: str, sampling: dict, n: int) -> tuple[float, float]:
        ids = llm.tokenize(prompt.encode(), add_bos=True, special=True)
        kw = dict(temp=sampling["temperature"], top_k=sampling.get("top_k", 1), top_p=sampling.get("top_p", 1.0),
                  min_p=sampling.get("min_p", 0.0), repeat_penalty=sampling.get("repeat_penalty", 1.0))
        llm.set_seed(SEEDED["seed"])
        out, t_first = 0, None
        for tok in llm.generate(ids, reset=True, **kw):
            t_first = t_first or time.perf_counter()
            out += 1
            if out >= n or llama_vocab_is_eog(llm._model.vocab, tok):
                break
        return (out - 1) / (time.perf_counter() - t_first), float("nan")
    return run


def llamacpp_spec_runner(binary: Path, path, threads: int, spec_type: str, draft_model: str | None = None):
    """llama.cpp's own speculative decoding: llama-speculative-simple with --spec-type (draft-simple: -md)."""
    def run(prompt: str, sampling: dict, n: int) -> tuple[float, float]:
        argv = [str(binary), "-m", str(path), "-p", prompt, "-n", str(n), "-t", str(threads), "-c", "2048",
                "--spec-type", spec_type, "--temp", str(sampling["temperature"]), "--seed", str(SEEDED["seed"]),
                "--top-k", str(sampling.get("top_k", 1)), "--top-p", str(sampling.get("top_p", 1.0)),
                "--min-p", str(sampling.get("min_p", 0.0)), "--repeat-penalty", str(sampling.get("repeat_penalty", 1.0))]
        if draft_model:
            argv += ["-md", draft_model, "-td", str(threads)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", out.stderr + out.stdout)
        accept = re.search(r"n_accept\s+=\s+(\d+)", out.stderr + out.stdout)
        if out.returncode or not decoded:
            raise RuntimeError(f"{spec_type}: exit {out.returncode}: {out.stderr[-300:]}")
        drafted = re.search(r"n_drafted\s+=\s+(\d+)", out.stderr + out.stdout)
        rate = int(accept.group(1)) / max(1, int(drafted.group(1))) if accept and drafted else float("nan")
        return int(decoded.group(1)) / float(decoded.group(2)), rate
    return run


def runners(llm, path, threads: int, llamacpp: bool, binary: Path | None, draft_model: str | None) -> dict:
    out = {"llamay none": llamay_runner(llm, "none"), "llamay ngram": llamay_runner(llm, "ngram"),
           "llamay tree (re-run)": llamay_runner(llm, "tree", rerun=True)}
    if draft_model:
        out["llamay draft"] = llamay_runner(llm, "draft")
    if llamacpp:
        try:
            out["llama.cpp"] = llamacpp_runner(path, threads, None)
            out["llama.cpp py-lookup"] = llamacpp_runner(path, threads, 10)
        except (ImportError, OSError, RuntimeError) as e:
            print(f"llama-cpp-python: skipped ({type(e).__name__}: {e})")
    if binary is not None:
        for spec_type in LLAMACPP_TYPES:
            out[f"llama.cpp {spec_type}"] = llamacpp_spec_runner(binary, path, threads, spec_type)
        if draft_model:
            out["llama.cpp draft-simple"] = llamacpp_spec_runner(binary, path, threads, "draft-simple", draft_model)
    return out


def compare(llm, path, threads: int, reps: int, n: int, tasks: list[str], llamacpp: bool, binary: Path | None,
            draft_model: str | None):
    run = runners(llm, path, threads, llamacpp, binary, draft_model)
    print(f"\n{Path(path).name}: {threads} threads, {n} tokens, {reps} interleaved runs, medians (decode tok/s, "
          "x llamay none; llamay's accepted draft tokens per verifying pass, llama.cpp's accepted / drafted)")
    for task in tasks:
        prompt, sampling = TASKS[task]
        for fn in run.values():
            fn(prompt, sampling, n)  # warm-up: graphs built
        res, order = {who: [] for who in run}, list(run)
        for rep in range(reps):
            for who in order[rep % len(order):] + order[:rep % len(order)]:  # each runner after each other
                res[who].append(run[who](prompt, sampling, n))
        med = {who: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for who, v in res.items()}
        base = med["llamay none"][0]
        print(f"  {task}:")
        for who, (tps, acc) in med.items():
            what = "accepted/drafted" if who.startswith("llama.cpp") else "accepted/pass"  # its own counters
            print(f"    {who:24} {tps:7.1f} tok/s  {tps / base:5.2f}x" + (f"  {what} {acc:4.2f}" if acc == acc else ""))
        theirs = {who: v[0] for who, v in med.items() if who.startswith("llama.cpp ")}
        if theirs:
            best = max(theirs, key=theirs.get)
            ours = max(v[0] for who, v in med.items() if who in ("llamay ngram", "llamay draft"))
            print(f"    llamay (ngram or draft) / llama.cpp's best speculative ({best}): {ours / theirs[best]:.2f}x")


def step_costs(llm, reps: int, n: int):
    """Median time of the decode steps of 1, 2, 4, 8, 16 tokens inside generations of the doc task (plain
    and ngram), relative to 1: what settings.SPEC.step_cost assumes."""
    times, forward = {size: [] for size in (1, 2, 4, 8, 16)}, ContextStore.compute

    def timed(store, items, rows):
        t = time.perf_counter()
        out = forward(store, items, rows)
        times.get(sum(len(tokens) for _, tokens in items), []).append(time.perf_counter() - t)
        return out
    ContextStore.compute = timed
    try:
        prompt, sampling = TASKS["doc"]
        for _ in range(reps):
            for spec in ("none", "ngram"):
                llamay_runner(llm, spec)(prompt, sampling, n)
    finally:
        ContextStore.compute = forward
    one = statistics.median(times[1])
    print(f"  decode step cost in generations, relative to 1 token ({one * 1e3:.1f} ms): "
          + ", ".join(f"{size}: {statistics.median(t) / one:.2f}" for size, t in times.items() if size > 1 and t))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--draft-model")
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--llamacpp-bin", type=Path, help="the directory holding llama-speculative-simple")
    args = ap.parse_args()
    models = args.models or [smollm_path()]
    if not args.models:
        try:
            models.append(gemma_path())
        except ImportError:
            print("Gemma 3 270M not installed: SmolLM2 alone")
    print(machine.describe(args.threads))
    for path in models:
        llm = llamay.load(path, threads=args.threads, n_ctx=2048, draft_model=args.draft_model, spec="ngram")
        binary = args.llamacpp_bin / "llama-speculative-simple" if args.llamacpp_bin else None
        compare(llm, path, args.threads, args.reps, args.tokens, args.tasks.split(","), not args.no_llamacpp,
                binary, args.draft_model)
        step_costs(llm, args.reps, args.tokens)
    print(f"\nafter: {machine.load()}")


if __name__ == "__main__":
    main()
