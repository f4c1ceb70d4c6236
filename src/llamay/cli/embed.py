"""llamay embed | rerank: embeddings as JSON, and documents ranked against a query as a table.

Two command objects (EMBED, RERANK) with __doc__, add_parser(p) and run(args), as cli/main.py expects.
An encoder file (bert, nomic-bert) is opened as an Embedder; a decoder is loaded and embeds through
Embedder.for_llm."""
from __future__ import annotations

import argparse
import json
import sys

from ..settings import LoadOptions
from .common import THREADS, THREADS_HELP, CLIError, Command, load_model, resolve_named


def open_model(name: str | None, threads: int | None):
    """-m -> an Embedder (an encoder file directly, a decoder through llamay.load), named by its stored name
    or file name."""
    from ..engine.embed import Embedder, open_embedder
    from ..gguf import GGUFError
    from ..server.embed_models import is_encoder
    path, label = resolve_named(name)
    try:
        emb = open_embedder(path, threads=threads) if is_encoder(path) else \
            Embedder.for_llm(load_model(path, LoadOptions(threads=threads)))
    except (GGUFError, ValueError) as e:
        raise CLIError(str(e)) from None
    emb.name = label
    return emb


def _common(p: argparse.ArgumentParser):
    p.add_argument("-m", "--model", help="GGUF file or stored model (an encoder such as all-MiniLM, or any decoder)")
    p.add_argument("-t", "--threads", type=THREADS, default=None, help=THREADS_HELP)


def add_embed_parser(p: argparse.ArgumentParser):
    _common(p)
    p.add_argument("text", nargs="*", help="texts to embed (none: one text per line of stdin)")
    p.add_argument("--raw", action="store_true", help="do not L2-normalise the vectors")


def run_embed(args) -> int:
    texts = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise CLIError("nothing to embed: give texts as arguments or on stdin")
    emb = open_model(args.model, args.threads)
    try:
        vectors = emb.embed(texts, normalize=not args.raw)
    except ValueError as e:
        raise CLIError(str(e)) from None
    json.dump({"model": args.model or emb.name, "embeddings": [v.tolist() for v in vectors]}, sys.stdout)
    print()
    return 0


def add_rerank_parser(p: argparse.ArgumentParser):
    _common(p)
    p.add_argument("-q", "--query", required=True, help="the query the documents are ranked against")
    p.add_argument("documents", nargs="+", help="documents to rank")


def rank_table(documents: list[str], scores: list[float], width: int = 60) -> str:
    """Rows sorted by score, highest first: rank, score (raw logit), input index, document (cut to width)."""
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    lines = [f"{'RANK':<5} {'SCORE':>10} {'INDEX':>5}  DOCUMENT"]
    for rank, i in enumerate(order, 1):
        doc = documents[i] if len(documents[i]) <= width else documents[i][:width - 1] + "\u2026"
        lines.append(f"{rank:<5} {scores[i]:>10.4f} {i:>5}  {doc}")
    return "\n".join(lines)


def run_rerank(args) -> int:
    emb = open_model(args.model, args.threads)
    try:
        scores = emb.rank(args.query, args.documents)
    except ValueError as e:
        raise CLIError(str(e)) from None
    print(rank_table(args.documents, scores))
    return 0


EMBED = Command("Embed texts with an embedding model (or any decoder); prints JSON {model, embeddings}.",
                 add_embed_parser, run_embed)
RERANK = Command("Rank documents against a query with a reranker (pooling type rank); prints a table.",
                  add_rerank_parser, run_rerank)
