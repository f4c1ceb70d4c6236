"""Speculative decoding's speed: decode tok/s with spec none vs ngram (prompt lookup) on three tasks, and
llama.cpp's speculative mode (llama-cpp-python's prompt-lookup drafter) on the same files and prompts.

Tasks: rewriting a given code file with a small change, listing the facts of a given document (both greedy),
and free text with nothing to look up (seeded sampling, so no greedy loop repeats itself). Runs interleaved,
medians; decode = (generated - 1) tokens over the time from the first token to the last. Also the cost of a
decode step of 2, 4, 8, 16 tokens inside generations relative to one of 1 (what settings.SPEC.step_cost
assumes).

usage: python bench/spec.py [MODEL.gguf ...] [--threads 2] [--reps 5] [--tokens 128] [--no-llamacpp]
llama.cpp's column needs llama-cpp-python: LLAMA_CPP_LIB_PATH=<dir of libllama.so> PYTHONPATH=<its source>;
without it the column is skipped. Default models: SmolLM2-135M, and Gemma 3 270M when installed."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import machine  # noqa: E402
from models import gemma_path, smollm_path  # noqa: E402

import llamay  # noqa: E402
from llamay.engine.runner import Runner  # noqa: E402

CODE = '''import json
from dataclasses import dataclass


@dataclass
class Account:
    owner: str
    balance: float = 0.0

    def deposit(self, amount: float) -> None:
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount

    def withdraw(self, amount: float) -> None:
        if amount > self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount

    def to_json(self) -> str:
        return json.dumps({"owner": self.owner, "balance": self.balance})


def total(accounts: list[Account]) -> float:
    return sum(a.balance for a in accounts)
'''
DOC = ("The Harbor Street Library reopened on 3 March after an eight-month renovation. The new reading room seats "
       "120 people and has 40 study desks with power outlets. Opening hours are 9:00 to 20:00 on weekdays and 10:00 "
       "to 16:00 on Saturdays; the library is closed on Sundays. Membership is free for residents of the county, and "
       "visitors can buy a day pass for 2 euros. The children's section moved to the ground floor, next to the cafe. "
       "Printing costs 10 cents per page in black and white and 50 cents per page in colour. The library also lends "
       "laptops for up to three hours to members with a valid card. Questions can be sent to "
       "info@harborlibrary.example or asked at the front desk.")
GREEDY = dict(temperature=0.0)
SEEDED = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, seed=1)
TASKS = {  # name -> (prompt, sampling)
    "code": ("Original file:\n```python\n" + CODE + "```\n\nThe same file with the method withdraw renamed to "
             "take_out:\n```python\n", GREEDY),
    "doc": ("Notice:\n" + DOC + "\n\nThe facts in the notice, one per line, in its own words:\n- ", GREEDY),
    "free": ("Once upon a time, in a small village by the sea, there lived", SEEDED),
}


def llamay_runner(llm, spec: str):
    def run(prompt: str, sampling: dict, n: int) -> tuple[float, float]:
        """-> (decode tok/s, draft tokens accepted per pass that verified one)."""
        llm.reset()
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


def runners(llm, path, threads: int, llamacpp: bool) -> dict:
    out = {"llamay none": llamay_runner(llm, "none"), "llamay ngram": llamay_runner(llm, "ngram")}
    if llamacpp:
        try:
            out["llama.cpp"] = llamacpp_runner(path, threads, None)
            out["llama.cpp lookup"] = llamacpp_runner(path, threads, 10)
        except (ImportError, OSError, RuntimeError) as e:
            print(f"llama.cpp: skipped ({type(e).__name__}: {e})")
    return out


def compare(llm, path, threads: int, reps: int, n: int, llamacpp: bool):
    run = runners(llm, path, threads, llamacpp)
    print(f"\n{Path(path).name}: {threads} threads, {n} tokens, {reps} interleaved runs, medians (decode tok/s; "
          "accepted draft tokens per verifying pass)")
    for task, (prompt, sampling) in TASKS.items():
        for fn in run.values():
            fn(prompt, sampling, n)  # warm-up: graphs built
        res, order = {who: [] for who in run}, list(run)
        for rep in range(reps):
            for who in order[rep % len(order):] + order[:rep % len(order)]:  # each runner after each other
                res[who].append(run[who](prompt, sampling, n))
        med = {who: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for who, v in res.items()}
        base = med["llamay none"][0]
        cells = [f"{who} {tps:7.1f} ({tps / base:.2f}x)" for who, (tps, _) in med.items()]
        line = f"  {task:5}: " + "  ".join(cells) + f"  accepted/pass {med['llamay ngram'][1]:.1f}"
        if "llama.cpp lookup" in med:
            line += f"  ngram / llama.cpp lookup {med['llamay ngram'][0] / med['llama.cpp lookup'][0]:.2f}x"
        print(line)


def step_costs(llm, reps: int, n: int):
    """Median time of the decode steps of 1, 2, 4, 8, 16 tokens inside generations of the doc task (plain
    and ngram), relative to 1: what settings.SPEC.step_cost assumes."""
    times, forward = {size: [] for size in (1, 2, 4, 8, 16)}, Runner.forward_batch

    def timed(runner, items, rows):
        t = time.perf_counter()
        out = forward(runner, items, rows)
        times.get(sum(len(tokens) for _, tokens in items), []).append(time.perf_counter() - t)
        return out
    Runner.forward_batch = timed
    try:
        prompt, sampling = TASKS["doc"]
        for _ in range(reps):
            for spec in ("none", "ngram"):
                llamay_runner(llm, spec)(prompt, sampling, n)
    finally:
        Runner.forward_batch = forward
    one = statistics.median(times[1])
    print(f"  decode step cost in generations, relative to 1 token ({one * 1e3:.1f} ms): "
          + ", ".join(f"{size}: {statistics.median(t) / one:.2f}" for size, t in times.items() if size > 1 and t))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--no-llamacpp", action="store_true")
    args = ap.parse_args()
    models = args.models or [smollm_path()]
    if not args.models:
        try:
            models.append(gemma_path())
        except ImportError:
            print("Gemma 3 270M not installed: SmolLM2 alone")
    print(machine.describe(args.threads))
    for path in models:
        llm = llamay.load(path, threads=args.threads, n_ctx=2048)
        compare(llm, path, args.threads, args.reps, args.tokens, not args.no_llamacpp)
        step_costs(llm, args.reps, args.tokens)
    print(f"\nafter: {machine.load()}")


if __name__ == "__main__":
    main()
