"""BPE pre-tokenizers: the regex chain llama.cpp applies per `tokenizer.ggml.pre`.

Each regex of a chain splits every segment the previous one produced; text between matches stays a
segment of its own (as llama.cpp's unicode_regex_split does). Patterns are llama.cpp's, written for
the `regex` package: `$` becomes `\\Z`, since llama.cpp's ECMAScript `$` only matches at the end.
ref: llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe), src/unicode.cpp (unicode_regex_split)
"""
from __future__ import annotations

from itertools import chain

import regex

_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Kimi K2's (tokenization_kimi.py's tiktoken pattern; its set intersections "[...&&[^\p{Han}]]" as a lookahead
# before the class: the regex package reads "&&" only in its V1 mode)
_NOT_HAN_UPPER = r"(?:(?!\p{Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])"
_NOT_HAN_LOWER = r"(?:(?!\p{Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])"
_CONTRACTION_OPT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
KIMI_K2 = (r"\p{Han}+|[^\r\n\p{L}\p{N}]?" + _NOT_HAN_UPPER + "*" + _NOT_HAN_LOWER + "+" + _CONTRACTION_OPT
           + r"|[^\r\n\p{L}\p{N}]?" + _NOT_HAN_UPPER + "+" + _NOT_HAN_LOWER + "*" + _CONTRACTION_OPT
           + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LETTERS = ("\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295"
                     "-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-"
                     "\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5"
                     "\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-"
                     "\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-"
                     "\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-"
                     "\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-"
                     "\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e"
                     "\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-"
                     "\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17"
                     "\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-"
                     "\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-"
                     "\U0001e943]+")
_DEEPSEEK_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"

# starcoder's chain [\p{N}, GPT2] as one regex: digits are words of their own, no other alternative
# consumes a digit, and a digit ends a whitespace run as the end of its segment did (`(?!\S)`)
STARCODER_FUSED = (r"\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?![^\s\p{N}])")

# pre-tokenizer name -> regex chain
_CHAINS = {
    "llama3": [LLAMA3],
    "deepseek-llm": ["[\r\n]", _DEEPSEEK_LETTERS, _DEEPSEEK_PUNCT, r"\s+\Z", _CJK, r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
    "starcoder": [STARCODER_FUSED],  # = [r"\p{N}", GPT2]
    "gpt-2": [GPT2],
    "qwen2": [QWEN2],
    "qwen35": [QWEN35],
    "kimi-k2": [KIMI_K2],  # Kimi K2, Kimi-Linear
    "bloom": [_BLOOM],
    "viking": [_BLOOM, r"\p{N}"],
    "gemma4": ["[^\n]+|[\n]+"],
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
}
_ALIASES = {
    "llama3": ("llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx",
               "smaug-bpe", "glm4", "chatglm-bpe"),
    "starcoder": ("refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"),
    "gpt-2": ("phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
              "modern-bert", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
              "jina-v1-en", "jina-v2-code", "roberta-bpe"),
    "qwen2": ("deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez", "solar-open"),
    "bloom": ("poro-chat", "gpt3-finnish"),
}
for _name, _aliases in _ALIASES.items():
    for _alias in _aliases:
        _CHAINS[_alias] = _CHAINS[_name]


class PreTokenizer:
    """Splits text into words with the regex chain of one pre-tokenizer type."""

    def __init__(self, pre: str):
        if pre not in _CHAINS:
            raise ValueError(f"unknown BPE pre-tokenizer {pre!r} (tokenizer.ggml.pre)")
        self.pre = pre
        patterns = _CHAINS[pre]
        # one regex: a findall that also yields the gaps; a chain: splits that keep the matches
        self.covering = _covering(patterns[0]) if len(patterns) == 1 else None
        self.splitters = [_splitter(p) for p in patterns]

    def split(self, text: str) -> list[str]:
        if self.covering is not None:
            return self.covering.findall(text)
        words = [text]
        for pat in self.splitters:
            words = list(filter(None, chain.from_iterable(map(pat.split, words))))
        return words


def _covering(pattern: str) -> regex.Pattern:
    """`pattern`, plus an alternative for a maximal run of characters where no match of it starts: the
    matches then cover the text, and one findall (in C) yields matches and the gaps between them in order.
    Contract: `pattern` has no capturing group and never matches the empty string."""
    pat = regex.compile(f"(?:{pattern})|(?:(?!(?:{pattern}))[\\s\\S])+")
    assert pat.groups == 0, pattern
    return pat


def _splitter(pattern: str) -> regex.Pattern:
    """split() of this gives gap, match, gap, ..., gap (empty gaps included). Same contract."""
    pat = regex.compile(f"({pattern})")
    assert pat.groups == 1, pattern
    return pat
