"""Speculative decoding's identity campaign: every prompt generated with spec none and with each drafting
mode (ngram; tree, after the plain run, so its branch is in the tree; draft: the real models drafting for
themselves, the tiny ones with another one-layer model), on every model at hand (SmolLM2-135M, Gemma 3 270M
when installed, tiny random llama / qwen2 / gemma3 files), with 1 and 2 threads, greedy and seeded, some
under a JSON schema; the token ids compared with ==. Prints, per model, threads, sampling and mode, the
prompts run, the tokens compared, the tokens that differ (the claim: zero) and the draft tokens accepted of
those drafted; exits 1 if any token differs.

    python scripts/spec_identity.py [--prompts 200] [--tokens 32] [--threads 1 2] [--models smollm gemma tiny]

Prompt i of a model is random.Random(i)'s pick of a template and its fillers, so a failure names its prompt."""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
from conftest import gemma_file, smollm_file  # noqa: E402
from fuzz_gguf import Geometry, tiny_decoder  # noqa: E402

import llamay  # noqa: E402
from llamay.grammar import Grammar  # noqa: E402

WORDS = ("river stone lamp harbor winter copper garden signal orange ladder cloud engine paper violet market "
         "thunder silver meadow candle anchor").split()
NAMES = ["Alice Smith", "Bob Jones", "Chen Wei", "Dara Okafor", "Eva Novak", "Farid Khan"]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"},
                                           "items": {"type": "array", "items": {"type": "string"}}},
          "required": ["name", "city", "items"]}


def text_prompt(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randrange(5, 12))]
    name, n = rng.choice(NAMES), rng.randrange(2, 9)
    line = " ".join(words)
    return rng.choice([
        f"Repeat exactly: {line}. {line}.",
        f"{line}\n{line}\n{' '.join(words[:n])}",
        ", ".join(str(i) for i in range(n, n + 12)) + ", " + ", ".join(str(i) for i in range(n, n + 4)) + ",",
        f"def {words[0]}_{words[1]}(x):\n    return x + {n}\n\ndef {words[2]}_{words[3]}(x):\n    return x * {n}\n\n"
        f"Rename {words[0]}_{words[1]} to {words[4]} in the code above:\ndef ",
        f"Record: {name} lives in {words[0].title()}ville and owns a {words[1]} and a {words[2]}.\nName: {name}\n"
        f"Town:",
        f"Once upon a time, a {words[0]} and a {words[1]} went to the {words[2]}. ",
        f"Q: What is a {words[0]}?\nA:",
        f"Write about {line}:",
    ])


MODES = ("ngram", "tree", "draft")


def models(chosen: list[str], tmp: Path) -> list[tuple[str, Path, Path, bool]]:
    """(label, file, its draft model, real): the real ones get text prompts, the tiny ones token prompts."""
    out = []
    if "smollm" in chosen and smollm_file():
        out.append(("SmolLM2-135M", smollm_file(), smollm_file(), True))
    if "gemma" in chosen and gemma_file():
        out.append(("Gemma-3-270M", gemma_file(), gemma_file(), True))
    if "tiny" in chosen:
        draft = tmp / "tiny-draft.gguf"
        draft.write_bytes(tiny_decoder(Geometry(n_layer=1), seed=2).to_bytes())
        for g in (Geometry(), Geometry(arch="qwen2"), Geometry(arch="gemma3", n_layer=3, window=8)):
            path = tmp / f"tiny-{g.arch}.gguf"
            path.write_bytes(tiny_decoder(g, seed=1).to_bytes())
            out.append((f"tiny {g.arch}", path, draft, False))
    return out


def sampling(i: int, real: bool) -> tuple[str, dict]:
    """Greedy or seeded; a random tiny model's flat distributions sampled narrower, so drafts can match."""
    if i % 2 == 0:
        return "greedy", dict(temperature=0)
    return "seeded", dict(temperature=0.7, seed=i) if real else dict(temperature=0.5, top_k=3, seed=i)


def campaign(label: str, path: Path, draft: Path, real: bool, threads: int, n_prompts: int, n_tokens: int,
             counts: dict) -> int:
    llm = llamay.load(path, threads=threads, n_ctx=1024 if real else 128, draft_model=draft, spec="ngram")
    llm.draft.cost = 0.25  # a model drafting for itself: its sizes' ratio (1) would never draft
    grammar = Grammar.compile(llm.tokenizer, "json_schema", SCHEMA) if real else None
    differing = 0
    for i in range(n_prompts):
        rng = random.Random(i)
        prompt = text_prompt(rng) if real else [rng.randrange(256) for _ in range(rng.randrange(1, 30))] * 2
        kind, kw = sampling(i, real)
        if grammar is not None and i % 10 == 5:
            kind, kw = kind + "+json", dict(kw, grammar=grammar)
        list(llm.generate(prompt, max_tokens=n_tokens, spec="none", **kw))
        plain = llm.stats.token_ids
        for mode in MODES:
            list(llm.generate(prompt, max_tokens=n_tokens, spec=mode, **kw))
            st, ids = llm.stats, llm.stats.token_ids
            bad = sum(a != b for a, b in zip(plain, ids)) + abs(len(plain) - len(ids))
            if bad:
                print(f"  DIFFERS: {label} threads={threads} prompt {i} ({kind}, {mode}): {bad} tokens")
            differing += bad
            c = counts.setdefault((label, threads, kind, mode), Counter())
            c.update(prompts=1, tokens=len(plain), differing=bad, drafted=st.drafted_tokens,
                     accepted=st.accepted_tokens)
    llm.context_store.check()
    llm.draft.store.check()
    print(f"  {label}, {threads} threads: {n_prompts} prompts, {differing} tokens differ", flush=True)
    return differing


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=["smollm", "gemma", "tiny"])
    args = ap.parse_args()
    counts, differing = {}, 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, path, draft, real in models(args.models, Path(tmp)):
            for threads in args.threads:
                differing += campaign(label, path, draft, real, threads, args.prompts, args.tokens, counts)
    print(f"{'model':14} {'threads':>7} {'sampling':13} {'mode':6} {'prompts':>7} {'tokens':>7} {'differ':>6} "
          f"{'accepted/drafted':>17}")
    for (label, threads, kind, mode), c in sorted(counts.items()):
        print(f"{label:14} {threads:7} {kind:13} {mode:6} {c['prompts']:7} {c['tokens']:7} {c['differing']:6} "
              f"{c['accepted']:8}/{c['drafted']:<8}")
    total = sum(c["prompts"] for c in counts.values())
    print(f"{total} generations compared, {differing} tokens differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
