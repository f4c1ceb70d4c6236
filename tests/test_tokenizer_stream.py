"""Incremental detokenizer: streamed pieces concatenate to decode(ids), and none holds half a character."""
import pytest

from llamay.gguf import GGUFReader
from llamay.tokenizer import IncrementalDecoder, Tokenizer

TEXTS = ["안녕하세요, 세계! 오늘 날씨가 정말 좋네요.",
         "Family: 👨‍👩‍👧‍👦, flags 🇰🇷🇫🇷, llama 🦙 and 🚀 rockets",
         "mixed 漢字 and Ελληνικά and हिन्दी text ✅"]


def _stream(tok: Tokenizer, ids: list[int]) -> list[str]:
    dec = IncrementalDecoder(tok)
    return [dec.add(t) for t in ids] + [dec.flush()]


def _check(tok: Tokenizer, text: str) -> bool:
    """Asserts the stream properties; returns whether some token held only part of a character."""
    ids = tok.encode(text, add_special=False)
    streamed = _stream(tok, ids)
    assert "".join(streamed) == tok.decode(ids)
    assert tok.decode(ids).lstrip(" ") == text  # SPM vocabularies prepend one space
    assert all("\ufffd" not in s for s in streamed)
    return any(_incomplete(tok.piece(t)) for t in ids)


def _incomplete(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


@pytest.mark.parametrize("name", ["llama-spm", "gpt-2", "qwen2", "gemma-4"])
def test_stream_on_fixture_vocabularies(fixtures_dir, name):
    tok = Tokenizer.from_gguf(GGUFReader(fixtures_dir / "vocab" / f"ggml-vocab-{name}.gguf"))
    split = [_check(tok, text) for text in TEXTS]
    assert any(split), "the texts should split some character across tokens"


@pytest.mark.model
def test_stream_on_model_vocabularies(smollm_path, gemma_path):
    for path in (smollm_path, gemma_path):
        tok = Tokenizer.from_gguf(GGUFReader(path))
        split = [_check(tok, text) for text in TEXTS]
        assert any(split), path.name


def test_dangling_bytes_flush_like_decode(fixtures_dir):
    tok = Tokenizer.from_gguf(GGUFReader(fixtures_dir / "vocab" / "ggml-vocab-gpt-2.gguf"))
    ids = tok.encode("🦙", add_special=False)[:-1]  # drop the last byte of the emoji
    streamed = _stream(tok, ids)
    assert streamed[:-1] == [""] * len(ids)  # nothing is emitted while the character is incomplete
    assert "".join(streamed) == tok.decode(ids) == "\ufffd"
