"""Tokenizers from GGUF metadata (SPM, byte-level BPE, WordPiece) matching llama.cpp's ids exactly,
and an incremental, UTF-8-safe detokenizer for streaming."""
from .stream import IncrementalDecoder
from .tokenizer import Tokenizer
from .vocab import Vocab, VocabError, load_vocab

__all__ = ["Tokenizer", "IncrementalDecoder", "Vocab", "VocabError", "load_vocab"]
