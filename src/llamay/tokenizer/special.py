"""Splitting raw text around special tokens before the model tokenizer runs.

llama.cpp's tokenizer_st_partition tries special tokens longest first; each token splits every raw
fragment at its leftmost occurrences in turn, honouring the token's lstrip/rstrip attributes (the
stripped whitespace is dropped). Control and unknown tokens are only parsed when asked; user-defined
tokens always are. Here the same choice is made with a map of consumed characters: an occurrence is
taken iff none of its characters is already consumed by an earlier token or a strip.
ref: llama.cpp src/llama-vocab.cpp (tokenizer_st_partition)
"""
from __future__ import annotations

import regex

from .vocab import CONTROL, LSTRIP, RSTRIP, UNKNOWN, Vocab, special_ids

_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale
_END = ""  # trie key marking a complete token


class _Trie:
    """Special tokens of one parse mode: which of them occur in a text."""

    def __init__(self, vocab: Vocab, ids: list[int]):
        self.texts = {vocab.tokens[tid]: tid for tid in ids}
        self.root: dict = {}
        for tid in ids:
            node = self.root
            for ch in vocab.tokens[tid]:
                node = node.setdefault(ch, {})
            node[_END] = tid
        self.starts = regex.compile("[" + "".join(regex.escape(c) for c in self.root) + "]") if ids else None

    def present(self, text: str) -> set[int]:
        # a substring search per token (C speed) beats the per-position walk when tokens are few;
        # rough costs in ns: ~300 per call plus ~1 per character, ~300 per character walked
        if len(self.texts) * (300 + len(text)) < 300 * len(text):
            return {tid for t, tid in self.texts.items() if t in text}
        return self._walk(text)

    def _walk(self, text: str) -> set[int]:
        found: set[int] = set()
        if self.starts is None:
            return found
        root, n = self.root, len(text)
        for m in self.starts.finditer(text):
            q = m.start()
            node = root[text[q]]
            q += 1
            while True:
                tid = node.get(_END)
                if tid is not None:
                    found.add(tid)
                if q >= n:
                    break
                node = node.get(text[q])
                if node is None:
                    break
                q += 1
        return found


class SpecialMatcher:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.order = special_ids(vocab)
        self.rank = {tid: r for r, tid in enumerate(self.order)}
        self._tries: dict[bool, _Trie] = {}

    def _trie(self, parse_special: bool) -> _Trie:
        trie = self._tries.get(parse_special)
        if trie is None:
            skip = 0 if parse_special else CONTROL | UNKNOWN
            ids = [t for t in self.order if not self.vocab.attrs[t] & skip]
            trie = self._tries[parse_special] = _Trie(self.vocab, ids)
        return trie

    def partition(self, text: str, parse_special: bool) -> list:
        """Fragments in text order: a token id, or a (start, end) span of raw text."""
        if not text:
            return []
        present = sorted(self._trie(parse_special).present(text), key=self.rank.__getitem__)
        if not present:
            return [(0, len(text))]
        consumed = bytearray(len(text))
        taken: list[tuple[int, int, int]] = []
        for tid in present:
            self._take(text, tid, consumed, taken)
        return _fragments(consumed, sorted(taken))

    def _take(self, text: str, tid: int, consumed: bytearray, taken: list) -> None:
        tok, attr = self.vocab.tokens[tid], self.vocab.attrs[tid]
        size, start = len(tok), 0
        while True:
            p = text.find(tok, start)
            if p < 0:
                return
            clash = consumed.rfind(1, p, p + size)
            if clash >= 0:
                start = clash + 1  # any occurrence starting before this overlaps it
                continue
            consumed[p:p + size] = b"\x01" * size
            taken.append((p, tid, size))
            if attr & LSTRIP:
                _strip(text, consumed, p - 1, -1)
            start = p + size
            if attr & RSTRIP:
                start = _strip(text, consumed, start, 1)


def _strip(text: str, consumed: bytearray, i: int, step: int) -> int:
    """Consumes C whitespace from i in direction `step` up to a consumed character; returns the stop."""
    while 0 <= i < len(text) and not consumed[i] and text[i] in _C_SPACE:
        consumed[i] = 1
        i += step
    return i


def _fragments(consumed: bytearray, taken: list[tuple[int, int, int]]) -> list:
    """Interleaves the unconsumed runs of raw text with the taken (position, id, length) tokens."""
    out, i = [], 0
    for p, tid, size in taken + [(len(consumed), None, 0)]:
        _raw_runs(consumed, i, p, out)
        if tid is not None:
            out.append(tid)
        i = p + size
    return out


def _raw_runs(consumed: bytearray, i: int, end: int, out: list) -> None:
    while i < end:
        j = consumed.find(1, i, end)
        j = end if j < 0 else j
        if j > i:
            out.append((i, j))
        k = consumed.find(0, j, end)
        i = end if k < 0 else k
