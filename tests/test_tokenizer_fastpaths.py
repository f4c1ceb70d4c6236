"""The tokenizer's fast paths against its plain ones (equivalence between execution paths):
special-token regex scan vs llama.cpp's token-by-token partition, the fused starcoder pre-tokenizer
regex vs its two-regex chain, the heap merge vs the list scan, SPM chunks cut at foreign character
pairs vs whole, and the marked one-pass SPM encoding vs fragment by fragment. The plain paths are the
ones the llama.cpp fixtures check (test_tokenizer_vocab.py); here they are the reference."""
import random

import numpy as np
import pytest
import regex

from llamay.gguf import GGUFReader
from llamay.tokenizer import Tokenizer, merge, pretokenize, special, spm
from llamay.tokenizer.special import SpecialMatcher, _alternate
from llamay.tokenizer.vocab import load_vocab

from test_tokenizer_vocab import read_vectors


def _special_matcher(specials: list[str]) -> SpecialMatcher:
    tokens = ["x", "y"] + specials  # specials as user-defined tokens, always parsed
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.merges": ["x y"],
          "tokenizer.ggml.token_type": np.array([1, 1] + [4] * len(specials), dtype=np.int32)}
    return SpecialMatcher(load_vocab(md))


@pytest.fixture
def scan_always(monkeypatch):
    monkeypatch.setattr(special, "SCAN_CHARS_PER_TOKEN", 0)


def test_special_scan_equals_partition_on_random_token_sets(scan_always):
    rnd, n_fast = random.Random(1234), 0
    for _ in range(1500):
        alpha = rnd.choice(["ab", "ab\n", "\n ", "abc"])
        specials = {"".join(rnd.choice(alpha) for _ in range(rnd.randint(1, 4))) for _ in range(rnd.randint(1, 6))}
        if rnd.random() < 0.5:  # a family of runs of one character, as Gemma's whitespace tokens
            c = rnd.choice(alpha)
            specials |= {c * n for n in range(1, rnd.randint(2, 6))}
        specials = sorted(specials)
        rnd.shuffle(specials)
        sm = _special_matcher(specials)
        for _ in range(8):
            text = "".join(rnd.choice(alpha) for _ in range(rnd.randint(0, 30)))
            assert sm.split(text, False) == _alternate(text, sm.partition(text, False)), (specials, text)
        n_fast += sm._scanners[False] is not None
    assert 300 < n_fast < 1200  # both paths were exercised


def test_special_scan_refuses_a_lower_token_overlapping_a_higher_one(scan_always):
    # "bc" (id 2) outranks "ab" (id 3) at equal length; in "abc" partition takes "bc", a scan would take "ab"
    sm = _special_matcher(["bc", "ab"])
    raws, ids = sm.split("abc", False)
    assert sm._scanners[False] is None
    assert (raws, ids) == (["a", ""], [2])


def test_fused_starcoder_regex_equals_its_chain():
    chain = [regex.compile(f"({p})") for p in (r"\p{N}", pretokenize.GPT2)]

    def by_chain(text: str) -> list[str]:
        words = [text]
        for pat in chain:
            words = [w for seg in words for w in pat.split(seg) if w]
        return words

    pre = pretokenize.PreTokenizer("starcoder")
    rnd = random.Random(7)
    alpha = list(" \t\n\r\xa0\u3000aZé漢٣5０²'sdtmlrv.,!?-_$") + ["'re", "'ll", "  ", "\n\n"]
    texts = ["".join(rnd.choice(alpha) for _ in range(rnd.randint(0, 30))) for _ in range(3000)]
    for text in texts:
        assert pre.split(text) == by_chain(text), text


@pytest.mark.parametrize("name", ["llama-spm", "gpt-2", "llama-bpe"])
def test_heap_merge_and_pair_cuts_match_fixtures(fixtures_dir, monkeypatch, name):
    """Every word through the heap merge, and SPM chunks cut at foreign pairs from the first one."""
    monkeypatch.setattr(merge, "SHORT", 1)
    monkeypatch.setattr(spm, "PAIR_TABLE_AFTER", 0)
    path = fixtures_dir / "vocab" / f"ggml-vocab-{name}.gguf"
    tok = Tokenizer.from_gguf(GGUFReader(path))
    for text, ids in read_vectors(path):
        assert tok.encode(text, add_special=False) == ids, text


@pytest.mark.model
def test_gemma_pair_cuts_and_heap_agree_with_plain_merge(gemma_path, monkeypatch):
    meta = GGUFReader(gemma_path).metadata
    rnd = random.Random(3)
    words = ["tokenizer", "▁self.assertEqual(", "def", "(x):", "naïve", "漢字テスト", "🦙🦙", "==", "0x1F"]
    texts = [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 12))) for _ in range(300)]
    plain = Tokenizer.from_gguf(meta)
    expected = [plain.encode(t) for t in texts]
    monkeypatch.setattr(merge, "SHORT", 1)
    monkeypatch.setattr(spm, "PAIR_TABLE_AFTER", 0)
    fast = Tokenizer.from_gguf(meta)
    assert [fast.encode(t) for t in texts] == expected


def _by_fragment(tok: Tokenizer, raws: list[str], ids: list[int]) -> list[int]:
    """SPM encoding one raw fragment at a time, each with the space prefix (llama-spm asks for it)."""
    def one(raw: str) -> list[int]:
        return tok.model._encode_text(" " + raw) if raw else []
    out = one(raws[0])
    for tid, raw in zip(ids, raws[1:]):
        out += [tid] + one(raw)
    return out


def test_spm_marked_pass_equals_fragment_by_fragment(fixtures_dir, scan_always):
    tok = Tokenizer.from_gguf(GGUFReader(fixtures_dir / "vocab" / "ggml-vocab-llama-spm.gguf"))
    text = "<s>Hello</s> world <s><s> again\n</s>  x"
    raws, ids = tok.special.split(text, True)
    assert len(ids) == 5
    assert tok.encode(text, add_special=False, parse_special=True) == _by_fragment(tok, raws, ids)
    # raw text holding the private-use marks itself goes fragment by fragment: no id comes from a mark
    odd = text + spm.OPEN + "12" + spm.CLOSE
    raws, ids = tok.special.split(odd, True)
    got = tok.encode(odd, add_special=False, parse_special=True)
    assert got == _by_fragment(tok, raws, ids) and 12 not in got
