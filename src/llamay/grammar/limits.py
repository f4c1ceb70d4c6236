"""Every limit on what a client's grammar may cost, in one place. A grammar over one is a GrammarError
naming it (the server answers 400 with that message).

Measured with llguidance 1.9.1 (x86-64, SmolLM2's 49k-token vocabulary). Its compiler recurses per rule,
group and schema level: ~3.1 KiB of stack per GBNF/Lark rule, ~3.9 KiB per JSON schema object. An 8 MiB
stack (the main thread's; a thread's by default) overflows at a chain of ~2,670 rules (`r0 ::= r1 | "x"`,
...: the 5,000-rule chain segfaults), at ~216 rules of 20 nested groups each (within the limits below),
and at ~1,080 levels of `{"type": "array", "items": {"$ref": next}}`; 64 MiB at ~21,100 rules and ~8,700
levels, 256 MiB at ~85,700 rules (linear). Its fuel does not bound the time spent on a repeated literal
(`a{100000}`: 0.3 s per mask, `a{10000}` 20 ms, a class `[a-z]{100000}` < 1 ms) nor on building a huge
alternation (100,000 strings: 40 s, then a panic at 65,525 grammar symbols)."""
from __future__ import annotations

import llguidance

# -- checked on the source before llguidance sees it (precheck.py, scan.py) -------------------------
MAX_SOURCE_BYTES = 256 * 1024  # canonical text (GBNF, Lark, regex, schema as compact JSON): scanned < 0.5 s
MAX_RULES = 1_000  # GBNF/Lark rule definitions (llguidance's GBNF converter is quadratic: 0.4 s at 1,000)
MAX_SYMBOLS = 5_000  # rules + groups, which bounds the compiler's recursion: 16 MiB of the worker's stack
MAX_NESTING = 24  # ( [ depth in GBNF / Lark / regex (llguidance's Lark parser stops at 28)
MAX_REPEAT = 10_000  # n and m in {n}, {m,n}, ~ n..m
MAX_REPEAT_PRODUCT = 10_000  # repetition bounds multiplied through nested groups and rule references
MAX_ALTERNATIVES = 10_000  # `|` branches in a grammar; enum / anyOf / oneOf / type entries in a schema
MAX_SCHEMA_DEPTH = 64  # nesting of objects and arrays in a JSON schema document (serde stops at 128)
MAX_SCHEMA_NODES = 10_000  # objects and arrays in JSON schema documents (a Lark grammar's %json ones too)

# -- the compile step (bounded.py, compiler.py) ------------------------------------------------------
COMPILE_STACK_BYTES = 256 * 1024 * 1024  # the worker's stack: 4x what the limits above allow at worst
COMPILE_TIMEOUT_S = 5.0  # convert + compile + probe; past it the caller gets a GrammarError
MAX_COMPILES = 2  # compile threads at once, ones still running past their time included
MAX_MASK_S = 0.25  # any mask during the probe (those of the grammars in the tests: under 2 ms)
N_PROBE_TOKENS = 4  # first tokens (spread over the allowed ones) each consumed on a copy, next mask computed
FAILED_TTL_S = 60.0  # a refused source is refused again from the cache for this long (not GrammarBusy)
N_FAILED_KEPT = 256  # refused sources remembered per tokenizer
MAX_ERROR_CHARS = 600  # an llguidance message is cut to this (it can quote the grammar)

# -- llguidance's own limits, at compile and for every mask: a step cannot stall the scheduler --------
STEP_LEXER_FUEL = 200_000  # lexer work per mask (~14k/ms): llguidance's default
STEP_MAX_ITEMS = 50_000  # Earley items per mask (~20k/ms): default
INITIAL_LEXER_FUEL = 1_000_000  # regex analysis when the lexer is built (~50k/ms): default
MAX_LEXER_STATES = 250_000  # ~1-2 KiB each: default
MAX_GRAMMAR_SIZE = 50_000  # symbols in productions (default 500,000; llguidance panics past 65,525)
MAX_ITEMS_IN_ROW = 12_000  # Earley items in one parser row, above MAX_ALTERNATIVES (default 2,000)


def parser_limits() -> llguidance.LLParserLimits:
    """llguidance's limits, with short error messages (no parser state or grammar quoted)."""
    return llguidance.LLParserLimits(
        max_items_in_row=MAX_ITEMS_IN_ROW, initial_lexer_fuel=INITIAL_LEXER_FUEL,
        step_lexer_fuel=STEP_LEXER_FUEL, step_max_items=STEP_MAX_ITEMS, max_lexer_states=MAX_LEXER_STATES,
        max_grammar_size=MAX_GRAMMAR_SIZE, verbose_errors=False)
