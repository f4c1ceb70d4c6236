"""Grammar (checked, compiled and probed once, cached) and Matcher (one per sequence) over llguidance.

A Matcher's mask allows exactly the tokens that keep the output a prefix of the grammar's language;
EOS / end-of-generation tokens are allowed exactly when the output so far is complete (accepting)."""
from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import llguidance
import numpy as np

from . import limits
from .bounded import run_bounded
from .compiler import build, canonical_source, consume, fill_mask, unpack
from .errors import GrammarBusy, GrammarError
from .precheck import check_source
from .tokenizer import eos_ids, ll_tokenizer

_CACHE_SIZE = 64  # compiled grammars kept per tokenizer (least recently used dropped)
_CACHE: weakref.WeakKeyDictionary[object, OrderedDict] = weakref.WeakKeyDictionary()
_FAILED: weakref.WeakKeyDictionary[object, OrderedDict] = weakref.WeakKeyDictionary()  # key -> (until, message)
_PENDING: dict[tuple, Future] = {}  # (id(tokenizer), key) -> the compile in flight, shared by its callers
_LOCK = threading.Lock()


class Grammar:
    """A compiled grammar for one tokenizer; `matcher()` starts a sequence (a copy of a checked template:
    nothing is compiled on the scheduler thread)."""

    def __init__(self, tokenizer, kind: str, template: llguidance.LLMatcher, source: str = ""):
        self.kind = kind
        self.source = source  # the canonical source text it was compiled from
        self.n_vocab = tokenizer.n_vocab
        self.eos_ids = np.asarray(eos_ids(tokenizer), dtype=np.int64)
        self._template = template  # compiled and probed at its start; never advanced

    @classmethod
    def compile(cls, tokenizer, kind: str, source=None) -> Grammar:
        """kind: json_schema (dict or JSON text), json_object (source ignored), gbnf, regex, lark (text).
        Checked against limits.py, compiled and probed in a bounded worker (bounded.py); cached per
        (tokenizer, kind, sha256 of the canonical source), a refusal for FAILED_TTL_S. Raises GrammarError
        (GrammarBusy when no compile slot is free)."""
        text = canonical_source(kind, source)
        key = (kind, hashlib.sha256(text.encode()).hexdigest())
        found, pending, owner = _claim(tokenizer, key)
        if found is not None:
            return found
        if not owner:  # the same compile already runs for another caller
            return _wait(pending)
        try:
            grammar = cls._compile_new(tokenizer, kind, text, key)
        except BaseException as e:
            pending.set_exception(e)
            raise
        finally:
            with _LOCK:
                _PENDING.pop((id(tokenizer), key), None)
        pending.set_result(grammar)
        return grammar

    @classmethod
    def _compile_new(cls, tokenizer, kind: str, text: str, key: tuple) -> Grammar:
        try:
            check_source(kind, text)
            ll_tok, eos = ll_tokenizer(tokenizer), eos_ids(tokenizer)
            template = run_bounded(lambda: build(ll_tok, tokenizer.n_vocab, eos, kind, text))
        except GrammarBusy:
            raise
        except GrammarError as e:
            _remember(_FAILED, tokenizer, key, (time.monotonic() + limits.FAILED_TTL_S, str(e)),
                      limits.N_FAILED_KEPT)
            raise
        grammar = cls(tokenizer, kind, template, text)
        _remember(_CACHE, tokenizer, key, grammar, _CACHE_SIZE)
        return grammar

    @classmethod
    def resume(cls, tokenizer, state) -> Matcher:
        """A matcher at a saved position (Matcher.state()): the grammar compiled again (or found in the
        cache) and its tokens consumed again. GrammarError if the state does not fit this tokenizer."""
        if not isinstance(state, dict) or not isinstance(state.get("tokens"), list) or \
                not isinstance(state.get("source"), str):
            raise GrammarError(f"a saved grammar state needs kind, source and tokens, got {state!r:.100}")
        matcher = cls.compile(tokenizer, state.get("kind"), state["source"]).matcher()
        for tok in state["tokens"]:
            if not isinstance(tok, int):
                raise GrammarError(f"saved grammar tokens must be integers, got {tok!r}")
            matcher.advance(tok)
        return matcher

    def matcher(self) -> Matcher:
        return Matcher(self, self._template.deep_copy())

    def __repr__(self):
        return f"Grammar({self.kind}, n_vocab={self.n_vocab})"


def _claim(tokenizer, key: tuple) -> tuple[Grammar | None, Future | None, bool]:
    """(cached grammar, None, False); or (None, the compile in flight, False); or (None, a new pending
    compile, True): the caller compiles. A cached refusal is raised again."""
    with _LOCK:
        found = _lookup(tokenizer, key)
        if found is not None:
            return found, None, False
        pending = _PENDING.get((id(tokenizer), key))
        if pending is not None:
            return None, pending, False
        pending = _PENDING[(id(tokenizer), key)] = Future()
        return None, pending, True


def _lookup(tokenizer, key: tuple) -> Grammar | None:
    """The cached grammar, None, or the cached refusal raised again (caller holds _LOCK)."""
    per_tokenizer = _CACHE.get(tokenizer)
    if per_tokenizer is not None and key in per_tokenizer:
        per_tokenizer.move_to_end(key)
        return per_tokenizer[key]
    failed = _FAILED.get(tokenizer)
    if failed is not None and key in failed:
        until, text = failed[key]
        if time.monotonic() < until:
            raise GrammarError(text)
        del failed[key]
    return None


def _remember(table: weakref.WeakKeyDictionary, tokenizer, key: tuple, value, size: int) -> None:
    with _LOCK:
        per_tokenizer = table.setdefault(tokenizer, OrderedDict())
        per_tokenizer[key] = value
        per_tokenizer.move_to_end(key)
        while len(per_tokenizer) > size:
            per_tokenizer.popitem(last=False)


def _wait(pending: Future) -> Grammar:
    """The result of the same compile started by another caller (its error raised anew here)."""
    try:
        return pending.result(timeout=2 * limits.COMPILE_TIMEOUT_S + 1)  # a slot wait, then a compile
    except FutureTimeout:
        raise GrammarBusy("the same grammar is still compiling for another request; try again later") from None
    except GrammarError as e:
        raise type(e)(str(e)) from None


class Matcher:
    """One sequence's position in a grammar. The mask is computed once per state (lazily)."""

    def __init__(self, grammar: Grammar, ll: llguidance.LLMatcher):
        self.grammar = grammar
        self._ll = ll
        self._bits = np.empty((grammar.n_vocab + 31) // 32, dtype=np.int32)  # 1 bit per token
        self._mask: np.ndarray | None = None  # bool [n_vocab] for the current state
        self.tokens: list[int] = []  # consumed so far: with the grammar's source, the whole state

    def allowed(self) -> np.ndarray:
        """bool [n_vocab]: True for the tokens that may come next (read-only view; do not modify)."""
        if self._mask is None:
            fill_mask(self._ll, self._bits)  # bounded by llguidance's step limits (limits.py)
            mask = unpack(self._bits, self.grammar.n_vocab)
            mask[self.grammar.eos_ids] = self._ll.is_accepting()
            mask.flags.writeable = False
            self._mask = mask
        return self._mask

    def apply(self, logits: np.ndarray) -> None:
        """Set disallowed logits to -inf in place. logits: float [n >= n_vocab]; ids >= n_vocab (padding
        rows of the output matrix) are never allowed."""
        mask = self.allowed()
        n_vocab = mask.size
        if logits.shape[-1] < n_vocab:
            raise ValueError(f"logits have {logits.shape[-1]} entries, the grammar's vocabulary {n_vocab}")
        np.copyto(logits[..., :n_vocab], -np.inf, where=~mask)
        logits[..., n_vocab:] = -np.inf

    def advance(self, token: int) -> None:
        """Consume one sampled token; GrammarError if the grammar did not allow it (the matcher is then
        unusable)."""
        token = int(token)
        if not 0 <= token < self.grammar.n_vocab or not self.allowed()[token]:
            raise GrammarError(f"token {token} is not allowed by the grammar here")
        self._mask = None
        consume(self._ll, token)
        self.tokens.append(token)

    def is_accepting(self) -> bool:
        """The output so far is a complete sentence of the grammar (EOS allowed)."""
        return self._ll.is_accepting()

    def is_done(self) -> bool:
        """Nothing more may follow: accepted EOS, or accepting with no possible extension, or error."""
        return self._ll.is_stopped()

    def clone(self) -> Matcher:
        """An independent copy at the same position (for a forked context)."""
        twin = Matcher(self.grammar, self._ll.deep_copy())
        twin._mask, twin.tokens = self._mask, list(self.tokens)
        return twin

    def state(self) -> dict:
        """What Grammar.resume needs to rebuild this position (JSON-serialisable)."""
        return {"kind": self.grammar.kind, "source": self.grammar.source, "tokens": list(self.tokens)}
