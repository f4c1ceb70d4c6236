"""Byte-level BPE (tokenizer.ggml.model "gpt2") and SPM-style BPE ("gemma4") over merge ranks.

ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe_session), src/unicode.cpp (byte encoding)
"""
from __future__ import annotations

from itertools import chain

from .merge import PairTable, merge_symbols
from .pretokenize import PreTokenizer
from .vocab import Vocab

CACHE_LIMIT = 1 << 18  # words kept in the word -> ids cache before it is cleared


def byte_to_unicode() -> list[str]:
    """GPT-2's printable stand-in for each byte: printable latin-1 stays, the rest maps to 256+n."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, n = [""] * 256, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


BYTE_TO_UNICODE = byte_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in enumerate(BYTE_TO_UNICODE)}
_LATIN1_TO_UNICODE = {b: c for b, c in enumerate(BYTE_TO_UNICODE)}


def byte_encode(word: str) -> str:
    return word.encode("utf-8").decode("latin-1").translate(_LATIN1_TO_UNICODE)


def merge_ranks(merges: list[str]) -> dict[str, int]:
    """'left right' -> rank; llama.cpp keeps the first rank of a duplicated merge."""
    ranks = dict(zip(merges, range(len(merges))))
    if len(ranks) != len(merges):
        for i in range(len(merges) - 1, -1, -1):
            ranks[merges[i]] = i
    return ranks


class BPEModel:
    """Words from the pre-tokenizer, each merged by rank and cached."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.t2i = vocab.token_to_id
        ranks = merge_ranks(vocab.merges)
        self.pairs = PairTable(ranks, " ", range(len(vocab.merges)))
        self.byte_level = vocab.pre != "gemma4"  # gemma4 merges raw UTF-8 with <0xXX> fallback
        self.pre = PreTokenizer(vocab.pre)
        self.cache: dict[str, tuple[int, ...]] = {}

    def encode(self, text: str) -> list[int]:
        if not self.byte_level:
            text = text.replace(" ", "\u2581")
        return cached_encode(self.cache, self.pre.split(text), self._word)

    def encode_parts(self, raws: list[str], ids: list[int]) -> list[int]:
        return encode_fragments(self.encode, raws, ids)

    def _word(self, word: str) -> tuple[int, ...]:
        t2i = self.t2i
        enc = byte_encode(word) if self.byte_level else word
        if enc in t2i and (self.vocab.ignore_merges or (not self.byte_level and not enc.strip("\n"))):
            return (t2i[enc],)  # whole word is a token (llama3 ignore_merges; gemma4 newline runs)
        pieces = merge_symbols(list(enc), self.pairs)
        ids = tuple(map(t2i.get, pieces))
        if None not in ids:
            return ids
        out: list[int] = []
        for piece, tid in zip(pieces, ids):
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._byte_fallback(piece))
        return tuple(out)

    def _byte_fallback(self, piece: str) -> list[int]:
        """Each byte of an unknown piece as a token where one exists (others are dropped, as llama.cpp)."""
        out = []
        for b in piece.encode("utf-8", "surrogateescape"):
            key = bytes([b]).decode("utf-8", "surrogateescape") if self.byte_level else f"<0x{b:02X}>"
            tid = self.t2i.get(key)
            if tid is not None:
                out.append(tid)
        return out


def encode_fragments(encode, raws: list[str], ids: list[int]) -> list[int]:
    """Raw fragments interleaved with special ids (SpecialMatcher.split), each fragment on its own."""
    out = encode(raws[0]) if raws[0] else []
    for tid, raw in zip(ids, raws[1:]):
        out.append(tid)
        if raw:
            out += encode(raw)
    return out


def cached_encode(cache: dict[str, tuple[int, ...]], words: list[str], encode_word) -> list[int]:
    """The ids of `words` in order, each word's ids from `cache` (filled by encode_word on a miss).
    The cache is cleared before it would outgrow CACHE_LIMIT, never while this call needs it."""
    missing = set(words).difference(cache)
    if missing:
        if len(cache) + len(missing) > CACHE_LIMIT:
            cache.clear()
            missing = set(words)
        for word in missing:
            cache[word] = encode_word(word)
    return list(chain.from_iterable(map(cache.__getitem__, words)))
