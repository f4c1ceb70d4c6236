"""SentencePiece-style BPE over token scores (tokenizer.ggml.model "llama").

Spaces become U+2581; symbols are UTF-8 characters; the pair whose concatenation is the
highest-scoring token merges first; leftover characters fall back to <0xNN> byte tokens.
ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_spm_session)
"""
from __future__ import annotations

import sys

import numpy as np
import regex

from .bpe import cached_encode
from .merge import PairTable, merge_symbols
from .vocab import Vocab

SPACE = "\u2581"
# private-use marks around a special token's id in the marked text (see SPMModel.encode_parts)
OPEN, CLOSE = "\ue000", "\ue001"


def _chunk_regex(tokens: list[str], marked: bool) -> regex.Pattern:
    """One chunk: a run of U+2581, then characters up to the next U+2581 that no token can join
    to its left neighbour. Merges never cross a chunk start, so chunks tokenize independently.
    `marked`: OPEN id CLOSE is a chunk of its own, and no other chunk crosses an OPEN."""
    joiners = set(regex.findall("([^\u2581\x00])\u2581", "\x00".join(tokens))) - {OPEN}
    mark, other = (f"{OPEN}[0-9]+{CLOSE}|", f"[^\u2581{OPEN}]") if marked else ("", "[^\u2581]")
    if not joiners:
        return regex.compile(f"{mark}\u2581*{other}+|\u2581+")
    cls = "".join(regex.escape(c) for c in sorted(joiners))
    return regex.compile(f"{mark}\u2581*(?:[{cls}]\u2581+|{other})+|\u2581+")


def _neg_scores(scores: np.ndarray) -> list[float]:
    """Merge keys: -score (lower merges first), kept finite so that INF still means "cannot merge"."""
    return np.minimum(-scores.astype(np.float64), sys.float_info.max).tolist()


class SPMModel:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.t2i = vocab.token_to_id
        self.pairs = PairTable(self.t2i, "", _neg_scores(vocab.scores))
        self._regexes: dict[bool, regex.Pattern] = {}  # built on first use: they scan the vocabulary
        self.cache: dict[str, tuple[int, ...]] = {}  # chunk of the marked text -> ids
        self.raw_cache: dict[str, tuple[int, ...]] = {}  # the same for text that holds an OPEN itself

    def _chunks(self, marked: bool) -> regex.Pattern:
        if marked not in self._regexes:
            self._regexes[marked] = _chunk_regex(self.vocab.tokens, marked)
        return self._regexes[marked]

    def encode_parts(self, raws: list[str], ids: list[int]) -> list[int]:
        """Raw fragments interleaved with special ids (SpecialMatcher.split). Each non-empty fragment
        follows a special token or starts the text, so each gets the space prefix when the vocabulary
        asks for one. All fragments are chunked by one regex pass over a marked text."""
        prefix = SPACE if self.vocab.add_space_prefix else ""
        texts = [prefix + r.replace(" ", SPACE) if r else "" for r in raws]
        parts = [""] * (2 * len(ids) + 1)
        parts[0::2] = texts
        parts[1::2] = [f"{OPEN}{tid}{CLOSE}" for tid in ids]
        marked = "".join(parts)
        if marked.count(OPEN) == len(ids):  # the raw text holds no OPEN of its own
            return cached_encode(self.cache, self._chunks(True).findall(marked), self._chunk)
        out = self._encode_text(texts[0])
        for tid, text in zip(ids, texts[1:]):
            out.append(tid)
            out += self._encode_text(text)
        return out

    def _encode_text(self, text: str) -> list[int]:
        return cached_encode(self.raw_cache, self._chunks(False).findall(text), self._raw_chunk)

    def _chunk(self, text: str) -> tuple[int, ...]:
        if text[0] == OPEN:
            return (int(text[1:-1]),)
        return self._raw_chunk(text)

    def _raw_chunk(self, text: str) -> tuple[int, ...]:
        t2i = self.t2i
        out: list[int] = []
        for piece in merge_symbols(list(text), self.pairs):
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
