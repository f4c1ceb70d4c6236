"""Grammar-constrained decoding cost on SmolLM2 (49k vocab) and Gemma 3 (262k vocab).

Per model: LLTokenizer build time (once per tokenizer), compile time of a JSON schema, then a decode loop
under that schema timing separately the grammar work per token (mask + apply to logits + advance) and the
decode step (ctx.extend of one token). Prints medians in ms and the overhead ratio grammar / decode.
Usage: python bench/grammar.py [--tokens 40] [--threads 2]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from models import gemma_path, smollm_path

import llamay
from llamay.engine import Sampler, SamplingParams
from llamay.grammar import Grammar
from llamay.grammar.tokenizer import ll_tokenizer

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 6},
    "score": {"type": "number", "minimum": 0, "maximum": 100},
    "kind": {"enum": ["person", "place", "thing"]}}, "required": ["name", "tags", "score", "kind"],
    "additionalProperties": False}
PROMPT = "Describe a famous landmark as JSON: "


def ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3


def timed_step(matcher, sampler, logits: np.ndarray, history: list[int]) -> tuple[int, float, float]:
    """One constrained sample, timed -> (token, mask seconds, mask + apply + advance seconds). logits are
    masked in place; an end-of-generation token is not advanced over."""
    t0 = time.perf_counter()
    matcher.allowed()
    t1 = time.perf_counter()
    matcher.apply(logits)
    t2 = time.perf_counter()
    token = sampler.sample(logits, history)
    t3 = time.perf_counter()
    if token not in matcher.grammar.eos_ids:
        matcher.advance(token)
    return token, t1 - t0, t2 - t0 + time.perf_counter() - t3


def run(label: str, path, n_tokens: int, threads: int):
    llm = llamay.load(path, threads=threads)
    t0 = time.perf_counter()
    ll_tokenizer(llm.tokenizer)
    t_tok = time.perf_counter() - t0
    t0 = time.perf_counter()
    grammar = Grammar.compile(llm.tokenizer, "json_schema", SCHEMA)
    t_compile = time.perf_counter() - t0
    ctx, matcher = llm.create_context(PROMPT), grammar.matcher()
    sampler = Sampler(SamplingParams(temperature=1.0, seed=0))
    t_mask, t_grammar, t_decode = [], [], []
    logits = ctx.logits
    for _ in range(n_tokens):
        logits = np.array(logits, dtype=np.float32)
        token, mask, constraint = timed_step(matcher, sampler, logits, ctx.tokens)
        t_mask.append(mask)
        t_grammar.append(constraint)
        if matcher.is_done():
            matcher = grammar.matcher()  # keep measuring on a fresh object
        t0 = time.perf_counter()
        logits = ctx.extend([token])
        t_decode.append(time.perf_counter() - t0)
    ctx.delete(cache=False)
    print(f"{label:24s} n_vocab {llm.tokenizer.n_vocab:6d}  LLTokenizer build {t_tok * 1e3:7.1f} ms  "
          f"compile {t_compile * 1e3:6.1f} ms")
    print(f"{'':24s} per token (median of {n_tokens}): mask {ms(t_mask):.3f} ms, mask+apply+advance "
          f"{ms(t_grammar):.3f} ms, decode step {ms(t_decode):.2f} ms -> overhead "
          f"{statistics.median(t_grammar) / statistics.median(t_decode):.1%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    run("smollm2 (BPE, 49k)", smollm_path(), args.tokens, args.threads)
    run("gemma3 (SPM, 262k)", gemma_path(), args.tokens, args.threads)


if __name__ == "__main__":
    main()
