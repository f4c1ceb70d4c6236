"""A constrained generation cut off by max_tokens keeps its grammar position with the context: the next
generate continues under it, a fork copies it, a snapshot carries it (restored: the same continuation)."""
import json

import jsonschema
import pytest

import llamay
from llamay.grammar import Grammar, GrammarError
from llamay.kv.snapshot_format import SnapshotError, read_snapshot

pytestmark = pytest.mark.model

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}},
          "required": ["name", "age", "tags"], "additionalProperties": False}


@pytest.fixture(scope="module")
def llm(smollm_path):
    return llamay.load(smollm_path, threads=2, n_ctx=512)


@pytest.fixture(scope="module")
def grammar(llm):
    return Grammar.compile(llm.tokenizer, "json_schema", SCHEMA)


def _start(llm, grammar):
    ctx = llm.create_context(llm.tokenize("<|im_start|>user\nA person as JSON.<|im_end|>\n<|im_start|>assistant\n",
                                          parse_special=True))
    head = "".join(ctx.generate(max_tokens=6, grammar=grammar, temperature=0))
    assert llm.stats.finish_reason == "length"
    return ctx, head


def test_cut_off_generation_continues_under_its_grammar(llm, grammar):
    ctx, head = _start(llm, grammar)
    rest = "".join(ctx.generate(max_tokens=200, temperature=1.0, seed=4))
    jsonschema.validate(json.loads(head + rest), SCHEMA)
    assert llm.stats.finish_reason == "stop"
    assert llm.context_store._ctxs[ctx.id].matcher is None  # complete: nothing constrains what follows
    ctx.delete()


def test_forks_each_continue_under_a_copy(llm, grammar):
    ctx, head = _start(llm, grammar)
    outs = set()
    for seed, kid in enumerate(ctx.fork(3)):
        out = head + "".join(kid.generate(max_tokens=200, temperature=1.0, seed=seed))
        jsonschema.validate(json.loads(out), SCHEMA)
        outs.add(out)
        kid.delete()
    assert len(outs) > 1  # independent matchers: different samples, all valid
    ctx.delete()


def test_snapshot_carries_the_grammar_position(llm, grammar, tmp_path):
    ctx, head = _start(llm, grammar)
    ctx.save(tmp_path / "cut.llamayctx")
    meta = read_snapshot(tmp_path / "cut.llamayctx").header.meta
    assert meta["grammar"]["kind"] == "json_schema" and len(meta["grammar"]["tokens"]) == 6
    original = head + "".join(ctx.generate(max_tokens=200, temperature=0))
    restored = llm.restore_context(tmp_path / "cut.llamayctx")
    again = head + "".join(restored.generate(max_tokens=200, temperature=0))
    assert again == original
    jsonschema.validate(json.loads(again), SCHEMA)
    for c in (ctx, restored):
        c.delete()


def test_extend_or_a_finished_generation_drops_the_grammar(llm, grammar, tmp_path):
    ctx, _ = _start(llm, grammar)
    ctx.extend(" free text")
    ctx.save(tmp_path / "free.llamayctx")
    assert read_snapshot(tmp_path / "free.llamayctx").header.meta == {}
    ctx.delete()


def test_a_state_that_does_not_fit_is_refused(llm, grammar):
    state = grammar.matcher().state()
    with pytest.raises(GrammarError):
        Grammar.resume(llm.tokenizer, {**state, "tokens": [llm.tokenizer.eos_id, 5, 5]})
    with pytest.raises(GrammarError):
        Grammar.resume(llm.tokenizer, {"kind": "json_schema"})
    assert Grammar.resume(llm.tokenizer, state).state() == state


def test_snapshot_with_a_broken_grammar_state_is_refused(llm, grammar, tmp_path):
    ctx, _ = _start(llm, grammar)
    llm.context_store._ctxs[ctx.id].matcher.tokens[0] = 10**6  # recorded state that cannot be replayed
    ctx.save(tmp_path / "bad.llamayctx")
    with pytest.raises(SnapshotError, match="grammar state cannot be resumed"):
        llm.restore_context(tmp_path / "bad.llamayctx")
    ctx.delete()
