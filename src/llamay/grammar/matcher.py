"""Grammar (compiled once, cached) and Matcher (one per sequence) over llguidance.

A Matcher's mask allows exactly the tokens that keep the output a prefix of the grammar's language;
EOS / end-of-generation tokens are allowed exactly when the output so far is complete (accepting)."""
from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections import OrderedDict

import llguidance
import numpy as np

from .tokenizer import eos_ids, ll_tokenizer

KINDS = ("json_schema", "json_object", "gbnf", "regex", "lark")
# Fixed separators, no free whitespace: a model cannot ramble in whitespace between JSON tokens.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_CACHE_SIZE = 64  # compiled grammars kept per tokenizer (least recently used dropped)
_CACHE: weakref.WeakKeyDictionary[object, OrderedDict] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class GrammarError(ValueError):
    """A grammar the compiler rejects (message from llguidance), or a token the grammar does not allow."""


class Grammar:
    """A compiled grammar for one tokenizer; `matcher()` starts a sequence."""

    def __init__(self, tokenizer, kind: str, ll_grammar: str, source: str = ""):
        self.kind = kind
        self.source = source  # the canonical source text it was compiled from
        self.n_vocab = tokenizer.n_vocab
        self.eos_ids = np.asarray(eos_ids(tokenizer), dtype=np.int64)
        self._ll_tokenizer = ll_tokenizer(tokenizer)
        self._ll_grammar = ll_grammar

    @classmethod
    def compile(cls, tokenizer, kind: str, source=None) -> Grammar:
        """kind: json_schema (dict or JSON text), json_object (source ignored), gbnf, regex, lark (text).
        Cached per (tokenizer, kind, sha256 of the canonical source). Raises GrammarError."""
        text = canonical_source(kind, source)
        key = (kind, hashlib.sha256(text.encode()).hexdigest())
        with _LOCK:
            per_tokenizer = _CACHE.setdefault(tokenizer, OrderedDict())
            found = per_tokenizer.get(key)
            if found is not None:
                per_tokenizer.move_to_end(key)
                return found
        grammar = cls(tokenizer, kind, _check(ll_tokenizer(tokenizer), _to_llguidance(kind, text)), text)
        with _LOCK:
            per_tokenizer[key] = grammar
            while len(per_tokenizer) > _CACHE_SIZE:
                per_tokenizer.popitem(last=False)
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
        ll = llguidance.LLMatcher(self._ll_tokenizer, self._ll_grammar, log_level=0)
        if ll.is_error():
            raise GrammarError(ll.get_error())
        return Matcher(self, ll)

    def __repr__(self):
        return f"Grammar({self.kind}, n_vocab={self.n_vocab})"


def canonical_source(kind: str, source) -> str:
    """The text a grammar is compiled from and hashed by: JSON schemas as compact JSON, key order kept
    (property order is generation order)."""
    if kind not in KINDS:
        raise GrammarError(f"unknown grammar kind {kind!r} (expected one of {', '.join(KINDS)})")
    if kind == "json_object":
        return '{"type":"object"}'
    if kind == "json_schema":
        if isinstance(source, (str, bytes)):
            try:
                source = json.loads(source)
            except ValueError as e:
                raise GrammarError(f"JSON schema is not valid JSON: {e}") from None
        if not isinstance(source, (dict, bool)):
            raise GrammarError(f"JSON schema must be an object, got {type(source).__name__}")
        return json.dumps(source, separators=(",", ":"), ensure_ascii=False)
    if not isinstance(source, str):
        raise GrammarError(f"{kind} grammar must be text, got {type(source).__name__}")
    return source


def _to_llguidance(kind: str, text: str) -> str:
    """llguidance's grammar definition (a JSON string) for canonical source text."""
    try:
        if kind in ("json_schema", "json_object"):
            return llguidance.LLMatcher.grammar_from_json_schema(text, defaults=JSON_OPTIONS)
        if kind == "gbnf":
            return llguidance.grammar_from("gbnf", text)
        if kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(text)
        return llguidance.LLMatcher.grammar_from_lark(text)
    except ValueError as e:
        raise GrammarError(str(e)) from None


def _check(ll_tok: llguidance.LLTokenizer, ll_grammar: str) -> str:
    """Unsupported features and syntax errors are errors, never ignored."""
    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(ll_grammar, ll_tok)
    if is_error:
        raise GrammarError("; ".join(messages))
    return ll_grammar


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
            self._ll.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            self._raise_if_error()
            bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self.grammar.n_vocab]
            mask = bits.view(np.bool_)
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
        if not self._ll.consume_token(token):
            self._raise_if_error()
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

    def _raise_if_error(self):
        if self._ll.is_error():
            raise GrammarError(self._ll.get_error())
