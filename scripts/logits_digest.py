"""The real engine's logits as digests, one per (model, kernel path, thread count): a short prompt's prefill
(the logits of every position) then decode steps (greedy), on every path this CPU runs, at 1 and 2 threads.
Prints `<model> <path>, <n> thread(s): <first 16 hex digits of the sha256 of the float32 logits' bytes>`.
scripts/arm64_python.sh runs it with the host's Python and with an arm64 Python under qemu: every line of a
model must carry one digest.

    python scripts/logits_digest.py [MODEL.gguf ...]   (default: SmolLM2 and Gemma 3 270M, as tests find them)
    python scripts/logits_digest.py --models           (prints the default files' paths)
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

os.environ["LLAMAY_ADAPT_THREADS"] = "0"  # every step runs the thread count asked for

import llamay  # noqa: E402
from llamay.kernels import _lib  # noqa: E402

PROMPT = "The quick brown fox jumps over the lazy"  # 8 tokens on SmolLM2, 9 on Gemma (BOS)
N_DECODE = 2
THREADS = (1, 2)


def digest(llm, ids: list[int]) -> str:
    """Prefill, the last prompt token again as a decode step, then N_DECODE decode steps, from an empty
    cache; hashes every logit they produce."""
    llm.reset()
    prefill = llm.logits(ids)  # [len(ids), n_vocab], one batch
    h = hashlib.sha256(prefill.tobytes())
    ctx = llm.create_context(ids)  # the prompt's pages from the cache, its last token computed again alone
    last = ctx.logits  # [n_vocab]
    h.update(last.tobytes())
    for _ in range(N_DECODE):
        last = ctx.extend([int(last.argmax())])  # [n_vocab], one token
        h.update(last.tobytes())
    ctx.delete(cache=False)
    return h.hexdigest()[:16]


def run(path: Path):
    """Loads the model under each path, as LLAMAY_KERNELS would (a path with x16 tiles regroups the weights
    at load: QWeight.repacked), and digests at each thread count."""
    for kernels in _lib.available():
        with _lib.using(kernels):
            llm = llamay.load(path, threads=max(THREADS), n_ctx=64)
            ids = llm.tokenize(PROMPT)
            if kernels == "portable":
                print(f"{path.stem}: {len(ids)} prompt tokens, {N_DECODE} decode steps", flush=True)
            for n in THREADS:
                llm.decoder.nthreads = n  # as `llamay verify` compares counts: the pool holds max(THREADS)
                print(f"{path.stem} {kernels}, {n} thread(s): {digest(llm, ids)}", flush=True)


def default_models() -> list[Path]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from conftest import gemma_file, smollm_file
    found = [smollm_file(), gemma_file()]
    if None in found:
        sys.exit("SmolLM2 or Gemma 3 270M is not installed (tests/conftest.py says how)")
    return found


if __name__ == "__main__":
    if sys.argv[1:] == ["--models"]:
        print(*default_models(), sep="\n")
    else:
        for model in [Path(a) for a in sys.argv[1:]] or default_models():
            run(model)
