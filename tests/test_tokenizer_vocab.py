"""llama.cpp's tokenizer test vectors (test-tokenizer-0 convention): every .inp/.out pair must match.

Convention (llama.cpp tests/test-tokenizer-0.cpp): texts are separated by "\\n__ggml_vocab_test__\\n",
the .out file has one line of space-separated ids per text, and tokenization runs with
add_special=false, parse_special=false.
"""
from pathlib import Path

import pytest

from llamay.gguf import GGUFReader
from llamay.tokenizer import Tokenizer

SEP = "\n__ggml_vocab_test__\n"
VOCABS = ["bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
          "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"]


def read_vectors(path: Path) -> list[tuple[str, list[int]]]:
    raw = Path(str(path) + ".inp").read_bytes().decode("utf-8")
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    lines = Path(str(path) + ".out").read_text(encoding="utf-8").split("\n")
    assert len(lines) >= len(texts)
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


@pytest.fixture(scope="module")
def vocab_dir(fixtures_dir) -> Path:
    return fixtures_dir / "vocab"


def test_all_fixture_vocabularies_are_listed(vocab_dir):
    found = sorted(p.name[len("ggml-vocab-"):-len(".gguf")] for p in vocab_dir.glob("ggml-vocab-*.gguf"))
    assert found == sorted(VOCABS)


@pytest.mark.parametrize("name", VOCABS)
def test_vocab_vectors(vocab_dir, name):
    path = vocab_dir / f"ggml-vocab-{name}.gguf"
    tok = Tokenizer.from_gguf(GGUFReader(path))
    vectors = read_vectors(path)
    results = [(text, tok.encode(text, add_special=False), ids) for text, ids in vectors]
    failures = [r for r in results if r[1] != r[2]]
    assert not failures, (f"{name}: {len(vectors) - len(failures)}/{len(vectors)} vectors pass; "
                          f"first failure {failures[0]!r}")
    assert len(vectors) >= 46


@pytest.mark.parametrize("name", ["llama-spm", "gpt-2", "qwen2", "gemma-4", "deepseek-llm"])
def test_decode_roundtrip_on_vectors(vocab_dir, name):
    """The expected ids' pieces, concatenated, give the text back."""
    path = vocab_dir / f"ggml-vocab-{name}.gguf"
    tok = Tokenizer.from_gguf(GGUFReader(path))
    for text, ids in read_vectors(path):
        decoded = tok.decode(ids)
        if name == "llama-spm":  # the space prefix SPM adds in front of the first word
            decoded = decoded[1:] if text and decoded.startswith(" ") else decoded
        assert decoded == text, (name, text)


def test_bpe_without_merges_is_refused_by_name(tmp_path):
    """An empty merges array (it reads back as an empty numpy array) is the missing-merges error."""
    import numpy as np

    from llamay.gguf import GGUFWriter
    from llamay.tokenizer.vocab import VocabError
    w = GGUFWriter()
    w.add("general.architecture", "llama")
    w.add("tokenizer.ggml.model", "gpt2")
    w.add("tokenizer.ggml.tokens", ["a", "b", "<|endoftext|>"])
    w.add("tokenizer.ggml.token_type", np.array([1, 1, 3], np.int32))
    w.add("tokenizer.ggml.merges", [])
    w.write(tmp_path / "v.gguf")
    with pytest.raises(VocabError, match="needs tokenizer.ggml.merges"):
        Tokenizer.from_gguf(GGUFReader(tmp_path / "v.gguf"))
