"""WordPiece (tokenizer.ggml.model "bert"): BERT normalisation, then greedy longest match.

GGUF BERT vocabularies mark word starts with U+2581 instead of marking continuations with "##".
ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_wpm_session)
"""
from __future__ import annotations

import unicodedata

from .bpe import encode_fragments
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


class WPMModel:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.t2i = vocab.token_to_id
        self.max_len = max(map(len, vocab.tokens))
        self.cache: dict[str, tuple[int, ...]] = {}

    def encode_parts(self, raws: list[str], ids: list[int]) -> list[int]:
        return encode_fragments(self.encode, raws, ids)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for word in self.words(text):
            ids = self.cache.get(word)
            if ids is None:
                ids = self.cache[word] = self._word(word)
            out.extend(ids)
        return out

    def words(self, text: str) -> list[str]:
        """Lowercase / strip accents per the normalizer flags, split on whitespace and punctuation."""
        v = self.vocab
        words, cur = [], []
        for ch in text:
            if v.strip_accents:
                ch = _first_nfd(ch)
            if ch in _WHITESPACE:
                _flush(words, cur)
                continue
            cat = unicodedata.category(ch)
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (cat[0] == "C" and cat != "Cn") or (v.strip_accents and cat[0] == "M"):
                continue
            if v.lowercase:
                ch = _lower(ch)
            if cat[0] == "P" or (cp < 0x7F and cat[0] == "S") or _is_cjk(cp):
                _flush(words, cur)
                words.append(ch)
            else:
                cur.append(ch)
        _flush(words, cur)
        return words

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


def _flush(words: list[str], cur: list[str]) -> None:
    if cur:
        words.append("".join(cur))
        cur.clear()
