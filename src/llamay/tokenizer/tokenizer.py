"""Tokenizer: text <-> token ids exactly as llama.cpp's llama_tokenize / llama_token_to_piece.

ref: llama.cpp src/llama-vocab.cpp (llama_vocab::impl::tokenize, token_to_piece)
"""
from __future__ import annotations

import functools

from .bpe import UNICODE_TO_BYTE, BPEModel
from .special import SpecialMatcher
from .spm import SPMModel
from .vocab import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED, Vocab, VocabError, load_vocab
from .wpm import WPMModel

_MODELS = {"llama": SPMModel, "gpt2": BPEModel, "gemma4": BPEModel, "bert": WPMModel}


class Tokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.model = _MODELS[vocab.model](vocab)
        self.special = SpecialMatcher(vocab)
        self._pieces: list[bytes | None] = [None] * vocab.n_vocab

    @classmethod
    def from_gguf(cls, source) -> "Tokenizer":
        """`source`: a GGUFReader, or its metadata dict."""
        metadata = getattr(source, "metadata", source)
        try:  # the file is untrusted: metadata of the wrong shape is one VocabError, whatever it hit
            return cls(load_vocab(metadata))
        except VocabError:
            raise
        except (TypeError, ValueError, KeyError, IndexError, OverflowError, AttributeError) as e:
            raise VocabError(f"tokenizer metadata: {e}") from None

    # -- vocabulary ------------------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def bos_id(self) -> int | None:
        return self.vocab.bos_id

    @property
    def eos_id(self) -> int | None:
        return self.vocab.eos_id

    @property
    def add_bos_token(self) -> bool:
        return self.vocab.add_bos

    @property
    def add_eos_token(self) -> bool:
        return self.vocab.add_eos

    @property
    def eog_ids(self) -> set[int]:
        return self.vocab.eog_ids

    def __getattr__(self, name: str):
        # tokens, scores, token_type, merges, pre, *_id, add_* flags come from the vocabulary
        if name.startswith("_") or name in ("vocab", "model", "special"):
            raise AttributeError(name)
        return getattr(self.vocab, name)

    def is_special(self, tid: int) -> bool:
        return bool(self.vocab.attrs[tid] & (CONTROL | UNKNOWN | USER_DEFINED))

    def is_control(self, tid: int) -> bool:
        """Control tokens (BOS, EOS, turn markers): never text. User-defined ones (<think>, <tool_call>)
        stand for their text."""
        return bool(self.vocab.attrs[tid] & (CONTROL | UNKNOWN))

    # -- text -> ids -----------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        v = self.vocab
        raws, ids = self.special.split(text, parse_special)
        out: list[int] = []
        if add_special and v.bos_id is not None and (v.add_bos or v.model == "bert"):
            out.append(v.bos_id)
        out += self.model.encode_parts(raws, ids)
        self._append_end(out, add_special)
        return out

    def _append_end(self, out: list[int], add_special: bool) -> None:
        v = self.vocab
        if not add_special:
            return
        if v.model == "bert":
            if v.sep_id is not None:
                out.append(v.sep_id)
        elif v.add_eos and v.eos_id is not None:
            out.append(v.eos_id)

    # -- ids -> text -----------------------------------------------------------------------------
    @functools.cached_property
    def max_piece_bytes(self) -> int:
        """The most text bytes one token stands for: text of B bytes needs at least B / this many tokens."""
        return max(1, max(len(self.piece(t)) for t in range(self.n_vocab)))

    def piece(self, tid: int) -> bytes:
        """llama_token_to_piece(special=True): the bytes this token stands for."""
        cached = self._pieces[tid]
        if cached is None:
            cached = self._pieces[tid] = self._make_piece(tid)
        return cached

    def _make_piece(self, tid: int) -> bytes:
        v, text, attr = self.vocab, self.vocab.tokens[tid], self.vocab.attrs[tid]
        raw = text.encode("utf-8", "surrogateescape")
        if attr & (CONTROL | UNKNOWN | USER_DEFINED):
            return raw
        if attr & NORMAL:
            if v.model == "gpt2":
                return _byte_decode(text)
            return text.replace("\u2581", " ").encode("utf-8", "surrogateescape")
        if attr & BYTE:
            return bytes([int(text[3:5], 16)])
        return b""  # unused / undefined tokens render as nothing

    def decode_bytes(self, ids) -> bytes:
        return b"".join(self.piece(t) for t in ids)

    def decode(self, ids) -> str:
        return self.decode_bytes(ids).decode("utf-8", "replace")


def _byte_decode(text: str) -> bytes:
    """Byte-level BPE text back to bytes; unmapped characters as llama.cpp's [UNK_BYTE_0x..] marker."""
    out = bytearray()
    for ch in text:
        b = UNICODE_TO_BYTE.get(ch)
        if b is not None:
            out.append(b)
        else:
            utf8 = ch.encode("utf-8", "surrogateescape")
            out += b"[UNK_BYTE_0x" + utf8.hex().encode() + text.encode("utf-8", "surrogateescape") + b"]"
    return bytes(out)
