"""Embeddings and reranking: `open_embedder(path)` for an encoder file (bert, nomic-bert) and
`Embedder.for_llm(llm)` for a loaded decoder. Inputs are batched padding-free; an input longer than the
context is a ValueError (never truncated). An Embedder is used from one thread at a time."""
from __future__ import annotations

import os

import numpy as np

from ..gguf import GGUFReader
from ..kernels.threads import default_threads
from ..kernels.ops import BatchMeta, rmsnorm
from ..models.encoder import Encoder
from ..models.encoder_spec import POOLING, encoder_spec, is_encoder
from ..models import ModelFileError
from ..models.spec import UnsupportedModel
from ..tokenizer import Tokenizer, VocabError

MAX_BATCH_TOKENS = 8192  # tokens per encoder pass: bounds activation memory, does not change results


class Embedder:
    def __init__(self, name: str, tokenizer: Tokenizer, n_embd: int, n_ctx: int, pooling: str, hidden):
        """hidden(ids [n] int32, lens, types [n] int32 | None) -> float32 [n, n_embd] final hidden states."""
        self.name, self.tokenizer, self.n_embd, self.n_ctx, self.pooling = name, tokenizer, n_embd, n_ctx, pooling
        self._hidden = hidden
        self.encoder: Encoder | None = None
        self.n_passes = 0  # forward passes run (one per batch of up to MAX_BATCH_TOKENS tokens)

    @classmethod
    def for_llm(cls, llm, pooling: str | None = None) -> Embedder:
        """Embeddings from a loaded decoder (final normed hidden states; default pooling: the file's
        {arch}.pooling_type, else last token). Call embed() on the model's scheduler thread: it uses
        llm.runner's decoder (its own pool, never the KV cache)."""
        arch = llm.spec.arch
        pooling = pooling or POOLING.get(int(llm.metadata.get(f"{arch}.pooling_type", 3)), "last")
        dh = DecoderHidden(llm)
        return cls(os.path.basename(llm.path), llm.tokenizer, llm.spec.n_embd, llm.n_ctx, pooling, dh)

    # -- tokens ----------------------------------------------------------------------------------
    def _ids(self, item: str | list[int]) -> list[int]:
        if isinstance(item, str):
            return self.tokenizer.encode(item, add_special=True, parse_special=False)
        ids = [int(t) for t in item]
        bad = [t for t in ids if not 0 <= t < self.tokenizer.n_vocab]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.tokenizer.n_vocab}): {bad[:5]}")
        return ids

    def count_tokens(self, inputs: list[str | list[int]]) -> list[int]:
        return [len(self._ids(x)) for x in inputs]

    def _check(self, ids: list[int], i: int):
        if not ids:
            raise ValueError(f"input {i} has no tokens")
        if len(ids) > self.n_ctx:
            raise ValueError(f"input {i} has {len(ids)} tokens, more than the context of {self.n_ctx} tokens")

    # -- embeddings ------------------------------------------------------------------------------
    def embed(self, inputs: list[str | list[int]], normalize: bool = True,
              pooling: str | None = None) -> list[np.ndarray]:
        """float32 [n_embd] per input (pooling 'none': [n_tokens, n_embd] per input)."""
        pooling = pooling or self.pooling
        if pooling == "rank":
            raise ValueError("pooling 'rank' scores pairs: use rank(query, documents)")
        if pooling not in POOLING.values():
            raise ValueError(f"unknown pooling {pooling!r} (one of {', '.join(POOLING.values())})")
        seqs = [self._ids(x) for x in inputs]
        for i, ids in enumerate(seqs):
            self._check(ids, i)
        return [_finish(_pool(h, pooling), normalize) for h in self._hiddens(seqs, None)]

    def rank(self, query: str, documents: list[str]) -> list[float]:
        """Raw relevance score per document (the classifier's first logit for [CLS] q [SEP] d [SEP])."""
        if self.pooling != "rank" or self.encoder is None:
            raise ValueError(f"{self.name} is not a reranker (pooling '{self.pooling}', not 'rank')")
        q = self._ids(query)
        seqs, types = [], []
        for doc in documents:
            d = self.tokenizer.encode(doc, add_special=False)
            sep = [] if self.tokenizer.sep_id is None else [self.tokenizer.sep_id]
            seqs.append(q + d + sep)
            types.append([0] * len(q) + [1] * (len(d) + len(sep)))
        for i, ids in enumerate(seqs):
            self._check(ids, i)
        cls_rows = np.stack([h[0] for h in self._hiddens(seqs, types)]) if seqs else np.zeros((0, self.n_embd))
        return [float(s[0]) for s in self.encoder.classify(cls_rows.astype(np.float32))] if seqs else []

    def _hiddens(self, seqs: list[list[int]], types: list[list[int]] | None) -> list[np.ndarray]:
        """Hidden states per sequence, computed in passes of up to MAX_BATCH_TOKENS tokens."""
        out: list[np.ndarray] = []
        lo = 0
        while lo < len(seqs):
            hi, n = lo, 0
            while hi < len(seqs) and (hi == lo or n + len(seqs[hi]) <= MAX_BATCH_TOKENS):
                n += len(seqs[hi])
                hi += 1
            lens = [len(s) for s in seqs[lo:hi]]
            ids = np.asarray([t for s in seqs[lo:hi] for t in s], np.int32)
            tt = None if types is None else np.asarray([t for s in types[lo:hi] for t in s], np.int32)
            h = self._hidden(ids, lens, tt)
            self.n_passes += 1
            out += np.split(h, np.cumsum(lens)[:-1])
            lo = hi
        return out


def _pool(h: np.ndarray, pooling: str) -> np.ndarray:
    """h [n_tokens, n_embd] of one sequence -> its pooled vector (or h itself for 'none')."""
    if pooling == "mean":
        return h.mean(axis=0, dtype=np.float64).astype(np.float32)
    if pooling == "cls":
        return h[0].copy()
    if pooling == "last":
        return h[-1].copy()
    return h.copy()


def _finish(v: np.ndarray, normalize: bool) -> np.ndarray:
    """L2-normalise over the last axis (a zero vector stays zero)."""
    if not normalize:
        return np.ascontiguousarray(v, np.float32)
    norm = np.sqrt(np.square(v, dtype=np.float64).sum(axis=-1, keepdims=True))
    return (v / np.where(norm > 0, norm, 1.0)).astype(np.float32)


def file_tokenizer(reader: GGUFReader) -> Tokenizer:
    """The file's tokenizer; metadata no tokenizer can be built from is the file's fault: ModelFileError."""
    try:
        return Tokenizer.from_gguf(reader)
    except VocabError as e:
        raise ModelFileError(str(e)) from None


def open_embedder(path: str | os.PathLike, threads: int | None = None) -> Embedder:
    """An Embedder for an encoder file. A decoder file is refused: load it with llamay.load and use
    Embedder.for_llm(llm)."""
    path = os.fspath(path)
    reader = GGUFReader(path)
    if not is_encoder(reader.metadata):
        arch = reader.metadata.get("general.architecture")
        raise UnsupportedModel(f"{os.path.basename(path)} is a '{arch}' model, not an encoder: load it with "
                               "llamay.load(path) and embed with Embedder.for_llm(llm)")
    spec = encoder_spec(reader.metadata)
    enc = Encoder(reader, spec, threads or default_threads())
    e = Embedder(os.path.basename(path), file_tokenizer(reader), spec.n_embd, spec.n_ctx_train,
                 spec.pooling, enc.forward)
    e.encoder = enc
    return e


class DecoderHidden:
    """Final normed hidden states of a decoder for a padding-free batch, computed in a private page pool
    (the LLM's KV cache and radix tree are not touched). ref: llama.cpp embeddings = result_norm."""
    PAGE_SIZE = 32

    def __init__(self, llm):
        self.dec, self.nthreads = llm.decoder, llm.threads
        if llm.spec.layer_norm:
            raise UnsupportedModel(f"{llm.spec.arch}: embeddings from a LayerNorm decoder are not supported yet")

    def __call__(self, ids: np.ndarray, lens: list[int], types=None) -> np.ndarray:
        d, s, ps = self.dec, self.dec.spec, self.PAGE_SIZE
        n_pages = [-(-n // ps) for n in lens]
        pool, states = d.new_pool(sum(n_pages), ps, "f32"), d.new_states(len(lens))
        table = np.zeros((len(lens), max(n_pages)), np.int32)
        first = np.cumsum([0] + n_pages)
        for i, n in enumerate(n_pages):
            table[i, :n] = np.arange(first[i], first[i] + n)
        pos = np.concatenate([np.arange(n, dtype=np.int32) for n in lens])
        seq = np.concatenate([np.full(n, i, np.int32) for i, n in enumerate(lens)])
        plan = d.new_plan(len(ids), pool, states=states)
        d.fill_inputs(plan, ids, pos)
        slots = np.arange(len(lens), dtype=np.int32) if states is not None else None
        plan.run(BatchMeta(pos, seq, table, ps, slots), self.nthreads)
        return rmsnorm(plan.x, d.output_norm[0], s.norm_eps, self.nthreads)
