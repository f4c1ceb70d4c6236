"""No grammar a client sends can kill, block or stall the process: each hostile grammar is a GrammarError
naming the limit (limits.py) or the failure, raised by Grammar.compile within a bounded time, before any
sequence starts; grammars within the limits give exactly llguidance's own masks."""
import subprocess
import sys
import threading
import time
from pathlib import Path

import llguidance
import numpy as np
import pytest
from test_grammar import ARITH_GBNF, JSON_GBNF, SCHEMAS

from llamay.grammar import Grammar, GrammarBusy, GrammarError, bounded, compiler, limits, matcher
from llamay.grammar.tokenizer import ll_tokenizer

FAST_S = 2.0  # every refusal below takes milliseconds; this leaves room for a loaded 2-core machine


@pytest.fixture(scope="module")
def tok(smollm_path):
    from llamay.gguf import GGUFReader
    from llamay.tokenizer import Tokenizer
    return Tokenizer.from_gguf(GGUFReader(smollm_path))


def chain(n: int) -> str:
    """r0 ::= r1 | "x", ..., r{n-1} ::= "x": llguidance recurses once per rule (5,000 segfault it)."""
    return "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} | "x"\n' for i in range(n - 1)) + f'r{n - 1} ::= "x"\n'


def nested_chain(n: int, depth: int = 20) -> str:
    """n Lark rules of `depth` nested groups each: within every limit, yet past 8 MiB of llguidance stack
    at n >= ~216 (measured: 213 compile on the main thread, 216 segfault)."""
    body = "".join(f"r{i}: {'(' * depth}\"a\" r{i + 1}{')' * depth} | \"x\"\n" for i in range(n - 1))
    return f"start: r0\n{body}r{n - 1}: \"x\"\n"


def refused(tok, kind, source) -> tuple[str, float]:
    start = time.perf_counter()
    with pytest.raises(GrammarError) as err:
        Grammar.compile(tok, kind, source)
    return str(err.value), time.perf_counter() - start


ATTACKS = [  # (kind, source, what the message names)
    ("gbnf", "root ::= root", "fails on its first token"),
    ("gbnf", "root ::= x\nx ::= y\ny ::= x", "fails on its first token"),
    # its second mask runs llguidance out of fuel, after ~0.2 s when idle: a loaded machine may pass MAX_MASK_S first
    ("gbnf", 'root ::= "a" root', ("fails after its first token", "MAX_MASK_S")),
    ("json_schema", {"$ref": "#"}, "$ref cycle"),
    ("json_schema", {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "$ref cycle"),
    ("json_schema", {"allOf": [{"$ref": "#"}]}, "$ref cycle"),
    ("json_schema", {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
     "fails after its first token"),
    ("gbnf", 'root ::= "a"{1000000}', "MAX_REPEAT"),
    ("gbnf", 'root ::= ("a"{1000}){1000}', "MAX_REPEAT_PRODUCT"),
    ("gbnf", 'root ::= x{100}\nx ::= y{100}\ny ::= "ab"{100}', "MAX_REPEAT_PRODUCT"),
    ("lark", 'start: x{100}\nx: y~100\ny: "ab"{2}', "MAX_REPEAT_PRODUCT"),
    ("regex", "a{100000}", "MAX_REPEAT"),
    ("regex", "((a{10}){10}){10}{10}{10}", "MAX_REPEAT_PRODUCT"),
    ("json_schema", {"type": "string", "pattern": "^(a{100}){1000}$"}, "MAX_REPEAT_PRODUCT"),
    ("gbnf", "root ::= " + " | ".join(f'"s{i}"' for i in range(100_000)), "MAX_SOURCE_BYTES"),
    ("gbnf", "root ::= " + "|".join(f'"{i}"' for i in range(20_000)), "MAX_ALTERNATIVES"),
    ("json_schema", {"enum": list(range(20_000))}, "MAX_ALTERNATIVES"),
    ("lark", "start: " + "(" * 30 + '"x"' + ")" * 30, "MAX_NESTING"),
    ("gbnf", nested_chain(300).replace(":", " ::=").replace("start ::=", "root ::="), "MAX_SYMBOLS"),
    ("gbnf", chain(5_000), "MAX_RULES"),
    ("json_schema", '{"type":"array","items":' * 70 + '{"type":"string"}' + "}" * 70, "MAX_SCHEMA_DEPTH"),
    ("json_schema", "[" * 100_000, "MAX_SCHEMA_DEPTH"),
    ("json_schema", {"allOf": [{}] * 11_000}, "MAX_SCHEMA_NODES"),
    ("json_schema", {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(11_000)}},
     "MAX_SOURCE_BYTES"),
    ("lark", "start: %json " + '{"type":"array","items":' * 70 + "{}" + "}" * 70, "MAX_SCHEMA_DEPTH"),
]


@pytest.mark.parametrize("kind, source, names", ATTACKS, ids=[f"{a[0]}-{i}" for i, a in enumerate(ATTACKS)])
def test_hostile_grammar_is_refused_quickly_naming_why(tok, kind, source, names):
    message, took = refused(tok, kind, source)
    assert any(n in message for n in ((names,) if isinstance(names, str) else names)), message
    assert took < FAST_S, f"{took:.2f} s: {message}"
    assert len(message) <= limits.MAX_ERROR_CHARS + 150  # never the whole grammar quoted back


def test_limit_breaches_never_reach_llguidance(tok, monkeypatch):
    def no_compile(fn):
        raise AssertionError("llguidance was asked to compile a grammar over the limits")
    monkeypatch.setattr(matcher, "run_bounded", no_compile)
    for kind, source, names in ATTACKS:
        if isinstance(names, str) and names.startswith("MAX_"):
            assert names in refused(tok, kind, source)[0]
    assert "MAX_SOURCE_BYTES" in refused(tok, "gbnf", chain(50_000))[0]


_SURVIVOR = r"""
import sys
from llamay.gguf import GGUFReader
from llamay.tokenizer import Tokenizer
from llamay.grammar import Grammar, GrammarError
sys.path.insert(0, sys.argv[2])
from test_attack_grammar import chain, nested_chain
tok = Tokenizer.from_gguf(GGUFReader(sys.argv[1]))
for n in (5_000, 50_000):
    try:
        Grammar.compile(tok, "gbnf", chain(n))
    except GrammarError as e:
        print("refused", n, e)
matcher = Grammar.compile(tok, "lark", nested_chain(235)).matcher()
for token in tok.encode("a" * 234 + "x", add_special=False):
    matcher.advance(token)
print("deep grammar accepted", matcher.is_accepting())
"""


def test_the_process_survives_chains_and_a_stack_deep_grammar(smollm_path):
    """In a child process with an 8 MiB main-thread stack (a segfault fails the test, not the runner)."""
    shell = 'ulimit -s 8192 2>/dev/null; exec "$0" "$@"'
    run = subprocess.run(["sh", "-c", shell, sys.executable, "-c", _SURVIVOR, str(smollm_path),
                          str(Path(__file__).parent)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    lines = run.stdout.splitlines()
    assert lines[0].startswith("refused 5000") and "MAX_RULES" in lines[0], lines
    assert lines[1].startswith("refused 50000") and "MAX_SOURCE_BYTES" in lines[1], lines
    assert lines[2] == "deep grammar accepted True", lines


def test_refusals_are_cached_briefly_and_busy_is_not(tok, monkeypatch):
    source = 'root ::= "b" root'  # reaches llguidance: refused by the first-token probe
    first = refused(tok, "gbnf", source)[0]
    monkeypatch.setattr(matcher, "run_bounded", lambda fn: pytest.fail("a cached refusal was compiled again"))
    again, took = refused(tok, "gbnf", source)
    assert again == first and took < 0.05
    monkeypatch.undo()
    monkeypatch.setattr(limits, "FAILED_TTL_S", 0.0)  # refused, but remembered for no time
    refused(tok, "gbnf", source + " ")
    calls = []
    monkeypatch.setattr(matcher, "run_bounded", lambda fn: calls.append(1) or bounded.run_bounded(fn))
    refused(tok, "gbnf", source + " ")
    assert calls == [1]


def test_a_compile_past_its_time_is_an_error_and_keeps_its_slot(tok, monkeypatch):
    slow = "root ::= " + " | ".join(f'"w{i}"' for i in range(9_000))  # ~0.3 s: compiled fine by default
    monkeypatch.setattr(bounded, "_SLOTS", threading.BoundedSemaphore(1))
    monkeypatch.setattr(limits, "COMPILE_TIMEOUT_S", 0.02)
    message, took = refused(tok, "gbnf", slow)
    assert "took longer than 0.02 s (COMPILE_TIMEOUT_S)" in message and took < FAST_S
    with pytest.raises(GrammarBusy, match="MAX_COMPILES"):  # the timed-out compile still holds the slot
        Grammar.compile(tok, "gbnf", 'root ::= "busy"')
    assert bounded._SLOTS.acquire(timeout=30)  # it ends and gives the slot back
    bounded._SLOTS.release()
    monkeypatch.setattr(limits, "COMPILE_TIMEOUT_S", 5.0)
    assert Grammar.compile(tok, "gbnf", 'root ::= "busy"').matcher().allowed().any()  # busy: not cached
    assert refused(tok, "gbnf", slow)[0] == message  # timed out: cached as refused


def test_a_slow_mask_is_refused_at_compile(tok, monkeypatch):
    monkeypatch.setattr(limits, "MAX_MASK_S", 0.0)  # every mask is too slow now
    message, took = refused(tok, "regex", "[a-c]{2,7}")
    assert "(MAX_MASK_S)" in message and "first token" in message and took < FAST_S


def test_one_compile_for_concurrent_callers_of_the_same_grammar(tok, monkeypatch):
    builds, results = [], []

    def slow_build(*args):
        builds.append(1)
        time.sleep(0.2)  # the other callers arrive while it runs
        return compiler.build(*args)
    monkeypatch.setattr(matcher, "build", slow_build)
    source = {"type": "object", "properties": {"concurrent": {"type": "integer"}}}
    threads = [threading.Thread(target=lambda: results.append(Grammar.compile(tok, "json_schema", source)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(builds) == 1 and len(results) == 4 and all(g is results[0] for g in results)


def test_a_failure_mid_generation_is_a_grammar_error_within_a_step(tok):
    """Past the probed first tokens (three tokens in), a rule that only extends itself fails: a
    GrammarError from advance / allowed (llguidance's per-step item limit), within a step."""
    m = Grammar.compile(tok, "gbnf", 'root ::= "q" [0-9] [0-9] x | "z"\nx ::= "c" x').matcher()
    for token in tok.encode("q12", add_special=False):
        m.advance(token)
    start = time.perf_counter()
    with pytest.raises(GrammarError):
        for _ in range(8):
            m.advance(int(np.flatnonzero(m.allowed())[0]))  # the one forced token
    assert time.perf_counter() - start < FAST_S


LLAMA_CPP_JSON_GBNF = r'''
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws # escapes
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
'''


def _equal_masks_along_a_walk(tok, kind, source, seed: int) -> int:
    """Our matcher's masks == a plain llguidance matcher's (default limits) along a random walk."""
    grammar = Grammar.compile(tok, kind, source)
    ours, plain = grammar.matcher(), llguidance.LLMatcher(
        ll_tokenizer(tok), compiler._to_llguidance(kind, compiler.canonical_source(kind, source)), log_level=0)
    rng, bits, steps = np.random.default_rng(seed), np.zeros((tok.n_vocab + 31) // 32, np.int32), 0
    for steps in range(24):
        plain.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
        expected = np.unpackbits(bits.view(np.uint8), bitorder="little")[:tok.n_vocab].astype(bool)
        expected[grammar.eos_ids] = plain.is_accepting()
        assert np.array_equal(ours.allowed(), expected), (source, steps)
        choices = np.setdiff1d(np.flatnonzero(expected), grammar.eos_ids)
        if not choices.size:
            break
        token = int(rng.choice(choices))
        ours.advance(token)
        assert plain.consume_token(token)
    return steps


def test_real_grammars_compile_to_the_same_masks(tok):
    sources = [("json_schema", s) for s in SCHEMAS] + [("gbnf", g) for g in (ARITH_GBNF, JSON_GBNF,
                                                                          LLAMA_CPP_JSON_GBNF)]
    sources += [("regex", r"[A-Z]{3}-[0-9]{2,4}( [a-z]+)*"), ("json_object", None)]
    steps = [_equal_masks_along_a_walk(tok, kind, source, seed) for seed, (kind, source) in enumerate(sources)]
    assert sum(steps) > 10 * len(sources)  # the walks went somewhere


def test_tool_call_grammars_pass_the_limits(tok):
    from llamay.toolcall.formats import FORMATS
    from llamay.toolcall.grammar import tool_grammar
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]}}}
        for i in range(20)]
    for name in FORMATS:
        for choice in ("auto", "required"):
            lark = tool_grammar(FORMATS[name], tools, choice, True, tok)
            assert Grammar.compile(tok, "lark", lark).matcher().allowed().any(), (name, choice)
