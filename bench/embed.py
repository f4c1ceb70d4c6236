"""Embedding throughput: N sentences in one batched embed() call vs one call per sentence (sentences/s).

Sentences: the 20 of shared/fixtures/llamacpp/minilm-l6-v2/embeddings.json (short to long, one over 256
tokens), cycled to N. Model: all-MiniLM-L6-v2 F16 by default (any encoder GGUF, or a decoder with
--model). Each figure is the best of --repeat runs after one warm-up; the batched vectors are checked
against the one-at-a-time ones (cosine) so the speed-up is not bought with different results.
Usage: python bench/embed.py [--n 64] [--threads 2] [--repeat 3] [--model PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

SHARED = Path(os.environ.get("LLAMAY_SHARED", Path(__file__).resolve().parent.parent.parent / "shared"))
FIXTURE = SHARED / "fixtures" / "llamacpp" / "minilm-l6-v2" / "embeddings.json"
MINILM = SHARED / "fixtures" / "models" / "all-minilm-l6-v2-f16.gguf"


def sentences(n: int) -> list[str]:
    texts = [s["text"] for s in json.loads(FIXTURE.read_text())["sentences"]]
    return [texts[i % len(texts)] for i in range(n)]


def best(fn, repeat: int) -> tuple[float, object]:
    fn()  # warm-up
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def open_any(path: str, threads: int | None):
    from llamay.engine.embed import Embedder, open_embedder
    from llamay.server.embed_models import is_encoder
    if is_encoder(path):
        return open_embedder(path, threads=threads)
    import llamay
    return Embedder.for_llm(llamay.load(path, threads=threads))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", default=str(MINILM))
    args = ap.parse_args()
    emb = open_any(args.model, args.threads)
    texts = sentences(args.n)
    n_tokens = sum(emb.count_tokens(texts))
    t_batch, batched = best(lambda: emb.embed(texts), args.repeat)
    t_single, single = best(lambda: [emb.embed([t])[0] for t in texts], args.repeat)
    worst = min(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) for a, b in zip(batched, single))
    print(f"model {os.path.basename(args.model)}, {args.n} sentences, {n_tokens} tokens, "
          f"threads {args.threads or 'all'}")
    print(f"one request (batched):  {args.n / t_batch:8.1f} sentences/s  ({n_tokens / t_batch:8.0f} tokens/s)")
    print(f"one request each:       {args.n / t_single:8.1f} sentences/s  ({n_tokens / t_single:8.0f} tokens/s)")
    print(f"batched / one at a time: {t_single / t_batch:.2f}x   (min cosine batched vs single {worst:.6f})")


if __name__ == "__main__":
    main()
