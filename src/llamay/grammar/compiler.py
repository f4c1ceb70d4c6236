"""Source text -> a checked llguidance matcher (the template each sequence's matcher copies).

`build` runs inside run_bounded (bounded.py): convert, compile, then compute the first mask and, for a
few allowed first tokens, the mask after each, so a grammar that fails at its first token (a rule or
$ref that only refers to itself, a forced expansion past llguidance's limits) or whose masks are slow is
refused here, never on the scheduler thread."""
from __future__ import annotations

import json
import time

import llguidance
import numpy as np

from . import limits
from .errors import GrammarError, over

KINDS = ("json_schema", "json_object", "gbnf", "regex", "lark")
# Fixed separators, no free whitespace: a model cannot ramble in whitespace between JSON tokens.
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def canonical_source(kind: str, source) -> str:
    """The text a grammar is compiled from and hashed by: JSON schemas as compact JSON, key order kept
    (property order is generation order)."""
    if kind not in KINDS:
        raise GrammarError(f"unknown grammar kind {kind!r} (expected one of {', '.join(KINDS)})")
    if kind == "json_object":
        return '{"type":"object"}'
    if kind == "json_schema":
        try:
            if isinstance(source, (str, bytes)):
                source = json.loads(source)
            if not isinstance(source, (dict, bool)):
                raise GrammarError(f"JSON schema must be an object, got {type(source).__name__}")
            return json.dumps(source, separators=(",", ":"), ensure_ascii=False)
        except RecursionError:
            raise over("JSON schema nesting depth", limits.MAX_SCHEMA_DEPTH + 1, "MAX_SCHEMA_DEPTH",
                       counting=True) from None
        except ValueError as e:
            if isinstance(e, GrammarError):
                raise
            raise GrammarError(f"JSON schema is not valid JSON: {e}") from None
    if not isinstance(source, str):
        raise GrammarError(f"{kind} grammar must be text, got {type(source).__name__}")
    return source


def build(ll_tok: llguidance.LLTokenizer, n_vocab: int, eos_ids, kind: str, text: str) -> llguidance.LLMatcher:
    """The compiled, probed template matcher (never advanced: copy it). Raises GrammarError."""
    template = llguidance.LLMatcher(ll_tok, _to_llguidance(kind, text), log_level=0,
                                    limits=limits.parser_limits())
    if template.is_error():
        raise GrammarError(message(template.get_error()))
    _probe(template, n_vocab, eos_ids)
    return template


def fill_mask(ll: llguidance.LLMatcher, bits: np.ndarray) -> None:
    """The next token mask into bits (int32 [(n_vocab + 31) // 32], 1 bit per token); GrammarError on any
    llguidance failure, the matcher then unusable."""
    try:
        ll.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
    except Exception as e:  # API-level failure: the grammar cannot go on either way
        raise GrammarError(f"computing the token mask failed: {message(str(e))}") from None
    if ll.is_error():
        raise GrammarError(message(ll.get_error()))


def consume(ll: llguidance.LLMatcher, token: int) -> None:
    """Advance past token; GrammarError on any llguidance failure."""
    try:
        ok = ll.consume_token(token)
    except Exception as e:
        raise GrammarError(f"consuming token {token} failed: {message(str(e))}") from None
    if not ok or ll.is_error():
        raise GrammarError(message(ll.get_error()) or f"token {token} was refused by the grammar")


def message(text: str) -> str:
    """An llguidance message, short (non-verbose marker dropped, cut at MAX_ERROR_CHARS)."""
    text = text.replace("<non-verbose/>", "").strip()
    if "NoExtensionBias" in text:
        text += " (no output is possible: a rule or $ref refers only to itself?)"
    cut = limits.MAX_ERROR_CHARS
    return text if len(text) <= cut else text[:cut] + "..."


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
    except (ValueError, RecursionError) as e:
        raise GrammarError(message(str(e))) from None


def _probe(template: llguidance.LLMatcher, n_vocab: int, eos_ids) -> None:
    """The first mask allows something, and after each of N_PROBE_TOKENS first tokens (spread over the
    allowed ones) the next mask computes; every mask within MAX_MASK_S."""
    first = template.deep_copy()
    try:
        allowed = _timed_mask(first, n_vocab)
    except GrammarError as e:
        raise GrammarError(f"the grammar fails on its first token: {e}") from None
    tokens = np.setdiff1d(np.flatnonzero(allowed), eos_ids)
    if not tokens.size and not first.is_accepting():
        raise GrammarError("the grammar allows no first token (it cannot produce any output)")
    spread = np.linspace(0, tokens.size - 1, min(tokens.size, limits.N_PROBE_TOKENS)).astype(int)
    for token in np.unique(tokens[spread]).tolist():
        twin = first.deep_copy()
        try:
            consume(twin, token)
            _timed_mask(twin, n_vocab)
        except GrammarError as e:
            raise GrammarError(f"the grammar fails after its first token ({token}): {e}") from None


def _timed_mask(ll: llguidance.LLMatcher, n_vocab: int) -> np.ndarray:
    """bool [n_vocab] mask; GrammarError past MAX_MASK_S."""
    bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
    start = time.perf_counter()
    fill_mask(ll, bits)
    took = time.perf_counter() - start
    if took > limits.MAX_MASK_S:
        raise GrammarError(f"a token mask took {took:.2f} s, over the limit of {limits.MAX_MASK_S:g} s "
                           "(MAX_MASK_S)")
    return unpack(bits, n_vocab)


def unpack(bits: np.ndarray, n_vocab: int) -> np.ndarray:
    """bool [n_vocab] from a 1-bit-per-token mask (llguidance's layout: little-endian bits)."""
    return np.unpackbits(bits.view(np.uint8), bitorder="little")[:n_vocab].view(np.bool_)
