"""SentencePiece-style BPE over token scores (tokenizer.ggml.model "llama").

Spaces become U+2581; symbols are UTF-8 characters; the pair whose concatenation is the
highest-scoring token merges first; leftover characters fall back to <0xNN> byte tokens.
ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_spm_session)
"""
from __future__ import annotations

import numpy as np
import regex

from .bpe import CACHE_LIMIT
from .merge import merge_symbols
from .vocab import Vocab

SPACE = "\u2581"


def _chunk_pattern(tokens: list[str]) -> regex.Pattern:
    """One chunk: a run of U+2581, then characters up to the next U+2581 that no token can join
    to its left neighbour. Merges never cross a chunk start, so chunks tokenize independently."""
    joiners = set(regex.findall("([^\u2581\x00])\u2581", "\x00".join(tokens)))
    if not joiners:
        return regex.compile("\u2581*[^\u2581]+|\u2581+")
    cls = "".join(regex.escape(c) for c in sorted(joiners))
    return regex.compile(f"\u2581*(?:[{cls}]\u2581+|[^\u2581])+|\u2581+")


class SPMModel:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.t2i = vocab.token_to_id
        self.neg_scores = (-vocab.scores.astype(np.float64)).tolist()
        self.chunk = _chunk_pattern(vocab.tokens)
        self.cache: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        """`text` is one raw fragment, the space prefix already applied by the caller."""
        text = text.replace(" ", SPACE)
        out: list[int] = []
        cache = self.cache
        for chunk in self.chunk.findall(text):
            ids = cache.get(chunk)
            if ids is None:
                if len(cache) >= CACHE_LIMIT:
                    cache.clear()
                ids = cache[chunk] = self._chunk(chunk)
            out.extend(ids)
        return out

    def _chunk(self, text: str) -> tuple[int, ...]:
        t2i, neg = self.t2i, self.neg_scores

        def key(a: str, b: str):
            tid = t2i.get(a + b)
            return None if tid is None else neg[tid]

        out: list[int] = []
        for piece in merge_symbols(list(text), key):
            tid = t2i.get(piece)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._byte_token(b) for b in piece.encode("utf-8", "surrogateescape"))
        return tuple(out)

    def _byte_token(self, b: int) -> int:
        tid = self.t2i.get(f"<0x{b:02X}>")
        if tid is None:
            tid = self.t2i.get(bytes([b]).decode("utf-8", "surrogateescape"))
        if tid is None:
            if self.vocab.unk_id is None:
                raise ValueError(f"vocabulary has no token for byte 0x{b:02X}")
            tid = self.vocab.unk_id
        return tid
