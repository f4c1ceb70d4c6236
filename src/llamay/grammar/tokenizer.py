"""The llguidance view of a llamay Tokenizer: built once per tokenizer (a weak-keyed cache).

Token bytes are llama_token_to_piece's; control tokens are flagged special so a grammar never matches them
as text (a grammar names them as <[id]>); user-defined tokens (<think>, <tool_call>) match as the text they
stand for, as llama.cpp renders them. Every end-of-generation id counts as EOS."""
from __future__ import annotations

import threading
import weakref

import llguidance

_CACHE: weakref.WeakKeyDictionary[object, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def eos_ids(tokenizer) -> list[int]:
    """tokenizer.eos_id plus every eog id, sorted."""
    ids = set(tokenizer.eog_ids)
    if tokenizer.eos_id is not None:
        ids.add(tokenizer.eos_id)
    return sorted(ids)


def ll_tokenizer(tokenizer) -> llguidance.LLTokenizer:
    """The cached LLTokenizer of a llamay Tokenizer (n_vocab, piece, encode, eos_id, eog_ids, is_special)."""
    with _LOCK:
        found = _CACHE.get(tokenizer)
        if found is None:
            found = _CACHE[tokenizer] = _build(tokenizer)
        return found


def _build(tokenizer) -> llguidance.LLTokenizer:
    eos = eos_ids(tokenizer)
    if not eos:
        raise ValueError("a grammar needs a tokenizer with an EOS token")
    wrapper = llguidance.TokenizerWrapper(_Source(tokenizer, eos[0]))
    return llguidance.LLTokenizer(wrapper, n_vocab=tokenizer.n_vocab, eos_token=eos)


class _Source:
    """The duck-typed tokenizer llguidance.TokenizerWrapper reads (tokens, ids, a text -> ids call)."""

    def __init__(self, tokenizer, eos_id: int):
        n_vocab = tokenizer.n_vocab
        self.eos_token_id = eos_id
        self.bos_token_id = tokenizer.bos_id
        self.tokens = [tokenizer.piece(i) for i in range(n_vocab)]
        self.special_token_ids = [i for i in range(n_vocab) if tokenizer.is_control(i)]
        self._encode = weakref.WeakMethod(tokenizer.encode)

    def __call__(self, text: bytes | str) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return self._encode()(text, add_special=False, parse_special=False)
