"""SentencePiece-style BPE over token scores (tokenizer.ggml.model "llama").

Spaces become U+2581; symbols are UTF-8 characters; the pair whose concatenation is the
highest-scoring token merges first; leftover characters fall back to <0xNN> byte tokens.
ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_spm_session)
"""
from __future__ import annotations

import re
import sys

import numpy as np
import regex

from .bpe import CACHE_LIMIT, cached_encode
from .merge import PairTable, merge_symbols
from .vocab import Vocab

SPACE = "\u2581"
# private-use marks around a special token's id in the marked text (see SPMModel.encode_parts)
OPEN, CLOSE = "\ue000", "\ue001"
_MARK = OPEN + "{}" + CLOSE
PAIR_TABLE_AFTER = 4096  # merged chunks after which the pair table (see _split_at_foreign_pairs) pays


def _chunk_regex(tokens: list[str], marked: bool) -> re.Pattern:
    """One chunk: a run of U+2581, then characters up to the next U+2581 that no token can join
    to its left neighbour (a "joiner" is a character some token has right before a U+2581).
    Merges never cross a chunk start, so chunks tokenize independently.
    `marked`: OPEN id CLOSE is a chunk of its own, and no other chunk crosses an OPEN.
    (`regex` finds the joiners faster; `re` runs the chunk pattern, free of Unicode classes, faster.)"""
    joiners = set(regex.findall("([^\u2581\x00])\u2581", "\x00".join(tokens))) - {OPEN}
    mark, other = (f"{OPEN}[0-9]+{CLOSE}|", f"[^\u2581{OPEN}]") if marked else ("", "[^\u2581]")
    if not joiners:
        return re.compile(f"{mark}\u2581*{other}+|\u2581+")
    cls = "".join(re.escape(c) for c in sorted(joiners))
    # = ▁*(?:[joiner]▁+|other)+ with its loop unrolled (classes scan faster than a per-character choice)
    return re.compile(f"{mark}\u2581*{other}+(?:(?<=[{cls}])\u2581+{other}*)*|\u2581+")


def _neg_scores(scores: np.ndarray) -> list[float]:
    """Merge keys: -score (lower merges first), kept finite so that INF still means "cannot merge"."""
    return np.minimum(-scores.astype(np.float64), sys.float_info.max).tolist()


def _adjacent_pairs(tokens: list[str]) -> set[str]:
    """Every two-character substring of the tokens (and some with NUL, harmless: a superset only
    cuts less). Vectorised: ~0.05 s for 262k tokens, so built only once many chunks were merged."""
    a = np.frombuffer("\x00".join(tokens).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    codes = (a[:-1].astype(np.uint64) << np.uint64(32)) | a[1:]
    codes.sort()
    codes = codes[np.concatenate(([True], codes[1:] != codes[:-1]))]
    both = np.empty((len(codes), 2), dtype=np.uint32)
    both[:, 0], both[:, 1] = codes >> np.uint64(32), codes & np.uint64(0xFFFFFFFF)
    s = both.tobytes().decode("utf-32-le", "surrogatepass")
    return {s[i:i + 2] for i in range(0, len(s), 2)}


class SPMModel:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.t2i = vocab.token_to_id
        self.pairs = PairTable(self.t2i, "", _neg_scores(vocab.scores))
        self._regexes: dict[bool, re.Pattern] = {}  # built on first use: they scan the vocabulary
        self._pairs: set[str] | None = None  # two-character strings found inside some token
        self._n_merged = 0
        self.cache: dict[str, tuple[int, ...]] = {}  # chunk of the marked text -> ids
        self.raw_cache: dict[str, tuple[int, ...]] = {}  # the same for text that holds an OPEN itself
        self.sub_cache: dict[str, tuple[int, ...]] = {}  # piece of a chunk (see _raw_chunk) -> ids

    def _chunks(self, marked: bool) -> re.Pattern:
        if marked not in self._regexes:
            self._regexes[marked] = _chunk_regex(self.vocab.tokens, marked)
        return self._regexes[marked]

    def encode_parts(self, raws: list[str], ids: list[int]) -> list[int]:
        """Raw fragments interleaved with special ids (SpecialMatcher.split). Each non-empty fragment
        follows a special token or starts the text, so each gets the space prefix when the vocabulary
        asks for one. All fragments are chunked by one regex pass over a marked text."""
        if self.vocab.add_space_prefix:
            raws = [" " + r if r else "" for r in raws]
        parts = [""] * (2 * len(ids) + 1)
        parts[0::2] = raws
        parts[1::2] = map(_MARK.format, ids)
        marked = "".join(parts).replace(" ", SPACE)  # marks hold no space
        if marked.count(OPEN) == len(ids):  # the raw text holds no OPEN of its own
            return cached_encode(self.cache, self._chunks(True).findall(marked), self._chunk)
        out = self._encode_text(raws[0])
        for tid, raw in zip(ids, raws[1:]):
            out.append(tid)
            out += self._encode_text(raw)
        return out

    def _encode_text(self, raw: str) -> list[int]:
        words = self._chunks(False).findall(raw.replace(" ", SPACE))
        return cached_encode(self.raw_cache, words, self._raw_chunk)

    def _chunk(self, text: str) -> tuple[int, ...]:
        if text[0] == OPEN:
            return (int(text[1:-1]),)
        return self._raw_chunk(text)

    def _raw_chunk(self, text: str) -> tuple[int, ...]:
        subs = self._split_at_foreign_pairs(text)
        if len(subs) == 1:
            return self._merge(text)
        out: list[int] = []
        for sub in subs:
            ids = self.sub_cache.get(sub)
            if ids is None:
                if len(self.sub_cache) >= CACHE_LIMIT:
                    self.sub_cache.clear()
                ids = self.sub_cache[sub] = self._merge(sub)
            out += ids
        return tuple(out)

    def _split_at_foreign_pairs(self, text: str) -> list[str]:
        """Cuts between two characters that are adjacent in no token: no merge can join them (every
        merged symbol is a token), so the pieces merge independently. [text] until the table exists."""
        pairs = self._pairs
        if pairs is None:
            if self._n_merged < PAIR_TABLE_AFTER:
                return [text]
            pairs = self._pairs = _adjacent_pairs(self.vocab.tokens)
        cuts = [i for i in range(1, len(text)) if text[i - 1:i + 1] not in pairs]
        if not cuts:
            return [text]
        bounds = [0, *cuts, len(text)]
        return [text[a:b] for a, b in zip(bounds, bounds[1:])]

    def _merge(self, text: str) -> tuple[int, ...]:
        self._n_merged += 1
        pieces = merge_symbols(list(text), self.pairs)
        ids = tuple(map(self.t2i.get, pieces))
        if None not in ids:
            return ids
        out: list[int] = []  # a piece that is no token is a single character: its bytes
        for piece, tid in zip(pieces, ids):
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
