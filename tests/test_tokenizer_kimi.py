"""Kimi K2's pre-tokenizer (tokenizer.ggml.pre "kimi-k2": Kimi K2, Kimi-Linear) against tiktoken, the library
Kimi's own tokenizer (tokenization_kimi.py) runs, with that file's pattern. No Kimi vocabulary is at hand: both
run Qwen2's byte-level BPE (a tiktoken-born vocabulary: its ranks are its ids, so merges and ranks agree; the
first test checks that on Qwen2's own pattern), so the tokens differ exactly where the splits differ."""
from functools import cache
from pathlib import Path

import pytest

from llamay.gguf import GGUFReader
from llamay.tokenizer import Tokenizer
from test_tokenizer_vocab import read_vectors

tiktoken = pytest.importorskip("tiktoken")

# tokenization_kimi.py's pat_str, as it is written there (tiktoken's regex engine reads its "&&")
KIMI_PATTERN = "|".join([
    r"""[\p{Han}]+""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+"""])
QWEN2_PATTERN = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
MORE = ["HelloWorld CamelCaseWords iPhone XMLHttpRequest MyHTTPServer", "I'M HERE, you'RE there. It's 12345678 o'clock",
        "中文English混合测试abc日本語のテキスト한국어", "ǅemal Ǆ ǈ x̃ỹ e\u0301t\u00e9", "tabs\t\tand  spaces \n\n end  "]


@cache
def qwen2_vocab(fixtures_dir: Path) -> tuple[dict, dict]:
    """(metadata, tiktoken's mergeable ranks: each normal token's bytes -> its id)."""
    meta = dict(GGUFReader(fixtures_dir / "vocab" / "ggml-vocab-qwen2.gguf").metadata)
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    byte_of = {chr(b): b for b in printable} | {chr(256 + i): b for i, b in enumerate(others)}  # GPT-2's map
    ranks = {bytes(byte_of[ch] for ch in tok): i for i, (tok, kind) in
             enumerate(zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"])) if int(kind) == 1}
    return meta, ranks


def texts(fixtures_dir: Path) -> list[str]:
    return [t for f in sorted((fixtures_dir / "vocab").glob("*.gguf")) for t, _ in read_vectors(f)] + MORE


@pytest.mark.parametrize("pre, pattern", [("qwen2", QWEN2_PATTERN), ("kimi-k2", KIMI_PATTERN)])
def test_tokens_match_tiktoken(fixtures_dir, pre, pattern):
    meta, ranks = qwen2_vocab(fixtures_dir)
    ref = tiktoken.Encoding(f"qwen2-vocab-{pre}", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    tok = Tokenizer.from_gguf({**meta, "tokenizer.ggml.pre": pre})
    cases = texts(fixtures_dir)
    bad = [t for t in cases if tok.encode(t, add_special=False) != ref.encode_ordinary(t)]
    assert not bad, f"{pre}: {len(bad)} of {len(cases)} differ, first {bad[0]!r}"
    assert len(cases) > 600


def test_kimi_splits_words_where_qwen2_does_not(fixtures_dir):
    """Kimi's pattern splits a word where an upper-case letter follows a lower-case one (HelloWorld); Qwen2's
    does not, and the tokens differ: the test above sees which pattern ran."""
    meta, _ = qwen2_vocab(fixtures_dir)
    kimi, qwen2 = (Tokenizer.from_gguf({**meta, "tokenizer.ggml.pre": p}) for p in ("kimi-k2", "qwen2"))
    assert kimi.encode(MORE[0], add_special=False) != qwen2.encode(MORE[0], add_special=False)
