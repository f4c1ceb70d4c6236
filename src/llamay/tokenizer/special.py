"""Splitting raw text around special tokens before the model tokenizer runs.

llama.cpp's tokenizer_st_partition tries special tokens longest first; each token splits every raw
fragment at its leftmost occurrences in turn, honouring the token's lstrip/rstrip attributes (the
stripped whitespace is dropped). Control and unknown tokens are only parsed when asked; user-defined
tokens always are. Here the same choice is made with a map of consumed characters: an occurrence is
taken iff none of its characters is already consumed by an earlier token or a strip.

Fast path: when no token of a parse mode strips whitespace and none can start before a higher-priority
token and overlap it (runs of one repeated character excepted, see _overlap_free), that token-by-token
pass takes exactly the occurrences one leftmost-longest scan takes, so a single regex split (in C) does
it. Gemma's vocabulary, whose whitespace runs are user-defined tokens, needs this on long texts (the
partition's Python work grows with the number of occurrences); short texts keep the partition, whose
set-up is cheaper.
ref: llama.cpp src/llama-vocab.cpp (tokenizer_st_partition)
"""
from __future__ import annotations

import re

import regex

from .vocab import CONTROL, LSTRIP, RSTRIP, UNKNOWN, Vocab, special_ids

_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale
_END = ""  # trie key marking a complete token
# the fast path's regex is built (then always used) once this many characters per token of the parse
# mode were split, i.e. once partition() has cost about as much as the build: ~40 us per token (0.25 s
# for Gemma's 6k control tokens) against 0.5-1 us per character of code (measured on a busy 2-core
# machine); short one-off texts never pay for it
SCAN_CHARS_PER_TOKEN = 50
_MAX_FAST_LEN = 400  # longest token the fast-path regex is built for (one nested group per character)


class _Trie:
    """Special tokens of one parse mode: which of them occur in a text. A duplicated text keeps its
    first id in priority order, the one partition() takes."""

    def __init__(self, vocab: Vocab, ids: list[int]):
        self.texts: dict[str, int] = {}
        self.root: dict = {}
        for tid in ids:
            self.texts.setdefault(vocab.tokens[tid], tid)
            node = self.root
            for ch in vocab.tokens[tid]:
                node = node.setdefault(ch, {})
            node.setdefault(_END, tid)
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
        self._scanners: dict[bool, _Scanner | None] = {}
        self._chars_seen: dict[bool, int] = {}  # characters split so far, per parse mode

    def split(self, text: str, parse_special: bool) -> tuple[list[str], list[int]]:
        """(raws, ids), len(raws) == len(ids) + 1: the text, less the whitespace stripped around tokens,
        is raws[0] + ids[0] + raws[1] + ... + raws[-1]; raws may be empty strings."""
        seen = self._chars_seen[parse_special] = self._chars_seen.get(parse_special, 0) + len(text)
        worth_it = seen >= SCAN_CHARS_PER_TOKEN * len(self._trie(parse_special).texts)
        scanner = self._scanner(parse_special) if worth_it else None
        if scanner is not None:
            return scanner.split(text)
        return _alternate(text, self.partition(text, parse_special))

    def _scanner(self, parse_special: bool) -> _Scanner | None:
        if parse_special not in self._scanners:
            ids = [t for t in self.order if not self.vocab.attrs[t] & self._skip(parse_special)]
            self._scanners[parse_special] = _Scanner.build(self.vocab, ids)
        return self._scanners[parse_special]

    @staticmethod
    def _skip(parse_special: bool) -> int:
        return 0 if parse_special else CONTROL | UNKNOWN

    def _trie(self, parse_special: bool) -> _Trie:
        trie = self._tries.get(parse_special)
        if trie is None:
            ids = [t for t in self.order if not self.vocab.attrs[t] & self._skip(parse_special)]
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


def _alternate(text: str, frags: list) -> tuple[list[str], list[int]]:
    """partition()'s fragments as (raws, ids); two raw spans are never adjacent (a strip only
    consumes whitespace next to its token), so each gap between tokens is one span or empty."""
    raws, ids, raw = [], [], ""
    for frag in frags:
        if isinstance(frag, int):
            raws.append(raw)
            ids.append(frag)
            raw = ""
        else:
            raw = text[frag[0]:frag[1]]
    raws.append(raw)
    return raws, ids


class _Scanner:
    """The fast path of one parse mode: a regex over its tokens (longest match first) and text -> id."""

    def __init__(self, pattern: re.Pattern | None, ids: dict[str, int]):
        self.pattern, self.ids = pattern, ids

    @classmethod
    def build(cls, vocab: Vocab, order: list[int]) -> "_Scanner | None":
        """None when the fast path would not reproduce partition() for these tokens."""
        ids: dict[str, int] = {}
        for tid in order:  # priority order: a duplicated text keeps its first id, as partition() does
            ids.setdefault(vocab.tokens[tid], tid)
        texts = list(ids)
        if any(vocab.attrs[t] & (LSTRIP | RSTRIP) for t in order) or not _overlap_free(texts):
            return None
        if texts and max(map(len, texts)) > _MAX_FAST_LEN:
            return None
        return cls(re.compile("(" + _trie_regex(_trie_of(texts)) + ")") if texts else None, ids)

    def split(self, text: str) -> tuple[list[str], list[int]]:
        if self.pattern is None:
            return [text], []
        parts = self.pattern.split(text)  # raw, token text, raw, ..., raw
        return parts[0::2], list(map(self.ids.__getitem__, parts[1::2]))


def _is_run(text: str) -> bool:
    return text == text[0] * len(text)


def _overlap_free(texts: list[str]) -> bool:
    """`texts` in priority order. True when no proper suffix of a token is a proper prefix of a
    higher-priority token, except between two runs of the same character (in a run, the longest
    token that fits wins either way). Then an occurrence that starts before an overlapping one
    always has the higher priority, and the leftmost-longest scan takes what partition() takes."""
    best_all: dict[str, int] = {}  # proper prefix -> best rank of a token starting with it
    best_mixed: dict[str, int] = {}  # the same over tokens that are not runs
    for rank, text in enumerate(texts):
        mixed = not _is_run(text)
        for k in range(1, len(text)):
            best_all.setdefault(text[:k], rank)
            if mixed:
                best_mixed.setdefault(text[:k], rank)
    for rank, text in enumerate(texts):
        best = best_mixed if _is_run(text) else best_all
        if any(best.get(text[k:], rank) < rank for k in range(1, len(text))):
            return False
    return True


def _trie_of(texts: list[str]) -> dict:
    root: dict = {}
    for text in texts:
        node = root
        for ch in text:
            node = node.setdefault(ch, {})
        node[_END] = True
    return root


def _trie_regex(node: dict) -> str:
    """A pattern matching the longest text of the trie at a position (children tried before the end)."""
    kids = [re.escape(ch) + _trie_regex(sub) for ch, sub in node.items() if ch != _END]
    if not kids:
        return ""
    body = kids[0] if len(kids) == 1 else "(?:" + "|".join(kids) + ")"
    return f"(?:{body})?" if _END in node else body
