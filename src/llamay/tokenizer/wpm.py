"""WordPiece (tokenizer.ggml.model "bert"): BERT normalisation, then greedy longest match.

GGUF BERT vocabularies mark word starts with U+2581 instead of marking continuations with "##".
ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_wpm_session)
"""
from __future__ import annotations

import unicodedata

from .bpe import cached_encode, encode_fragments
from .vocab import Vocab

_WHITESPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
                        "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _first_nfd(ch: str) -> str:
    """llama.cpp's NFD table keeps only the first code point of a decomposition."""
    return unicodedata.normalize("NFD", ch)[0]


def _lower(ch: str) -> str:
    low = ch.lower()
    return low if len(low) == 1 else ch


class _Normalizer(dict):
    """str.translate table: code point -> its normalised text, built on first sight of a character.
    " " marks a word boundary: whitespace becomes one, and a punctuation, ASCII symbol or CJK
    character becomes a word of its own between two; dropped characters map to ""."""

    def __init__(self, lowercase: bool, strip_accents: bool):
        super().__init__()
        self.lowercase, self.strip_accents = lowercase, strip_accents

    def __missing__(self, cp: int) -> str:
        self[cp] = out = self._normalise(chr(cp))
        return out

    def _normalise(self, ch: str) -> str:
        if self.strip_accents:
            ch = _first_nfd(ch)
        if ch in _WHITESPACE:
            return " "
        cat, cp = unicodedata.category(ch), ord(ch)
        if cp == 0 or cp == 0xFFFD or (cat[0] == "C" and cat != "Cn") or (self.strip_accents and cat[0] == "M"):
            return ""
        if self.lowercase:
            ch = _lower(ch)
        if cat[0] == "P" or (cp < 0x7F and cat[0] == "S") or _is_cjk(cp):
            return f" {ch} "
        return ch


class WPMModel:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.t2i = vocab.token_to_id
        self.max_len = max(map(len, vocab.tokens))
        self.normalizer = _Normalizer(vocab.lowercase, vocab.strip_accents)
        self.cache: dict[str, tuple[int, ...]] = {}

    def encode_parts(self, raws: list[str], ids: list[int]) -> list[int]:
        return encode_fragments(self.encode, raws, ids)

    def encode(self, text: str) -> list[int]:
        return cached_encode(self.cache, self.words(text), self._word)

    def words(self, text: str) -> list[str]:
        """Lowercase / strip accents per the normalizer flags, split on whitespace and punctuation.
        A normalised character is never " " itself (a space is whitespace, lowercasing keeps it)."""
        return list(filter(None, text.translate(self.normalizer).split(" ")))

    def _word(self, word: str) -> tuple[int, ...]:
        t2i, w = self.t2i, "\u2581" + word
        n, out, i = len(w), [], 0
        while i < n:
            for j in range(min(n, i + self.max_len + 1), i, -1):
                tid = t2i.get(w[i:j])
                if tid is not None:
                    out.append(tid)
                    i = j
                    break
            else:
                return (self.vocab.unk_id,)  # no piece fits: the whole word is unknown
        return tuple(out)
