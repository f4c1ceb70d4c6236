"""Speculative decoding changes nothing but the speed: with drafts on (n-gram lookup, the radix tree's other
branches, a draft model), every generation emits exactly the tokens it emits without them (==), greedy and
seeded, on tiny random models of three architectures and on SmolLM2, 1 and 2 threads, under a JSON schema
and a tool-call grammar, with stop strings, max_tokens and the context's end cutting inside a draft, named
contexts continued in parts, choices, concurrent sequences, a pass out of pages and a cancel mid-draft; the
state engine's invariants hold after each. And drafts are accepted where text repeats (accepted > 0), so a
speculation that silently never runs fails here."""
import random
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import llamay
from llamay.engine.draft import NgramDrafter, TreeDrafter, fit
from llamay.engine.draft_model import DraftMismatch
from llamay.engine.job import Done, Job, Piece
from llamay.engine.sampling import SamplingParams
from llamay.grammar import Grammar
from llamay.kv import OutOfPages
from llamay.toolcall.formats import FORMATS
from llamay.toolcall.grammar import tool_grammar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from fuzz_gguf import Geometry, tiny_decoder  # noqa: E402

GREEDY = SamplingParams(temperature=0)
ON = ("ngram", "tree", "draft")  # every mode that drafts
CODE = "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n    return a + b\n"


def chat(user: str, reply: str = "") -> str:
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{reply}"


REPEATING = [
    chat("Repeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog."),
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,",
    chat(f"Copy this function, renaming add to plus:\n```python\n{CODE}```", "```python\n"),
    chat("Text: Alice Smith lives at 12 Baker Street, London. She works at Acme Corp.\nWhat is Alice's address?"),
    "The capital of France is",
]
FREE = ["Once upon a time, there was a", chat("Write a haiku about autumn."), "The history of the Roman Empire"]


def run(llm, prompt, spec: str, **kw) -> tuple[list[int], str, object]:
    text = "".join(llm.generate(prompt, spec=spec, **kw))
    return list(llm.stats.token_ids), text, llm.stats


def both(llm, prompt, modes=ON, **kw):
    """-> (the plain run's ids, {mode: its run's stats}), asserting that each mode emitted what plain did.
    The tree mode runs after the others: their answers are branches the tree holds."""
    plain, plain_text, plain_stats = run(llm, prompt, "none", **kw)
    assert plain_stats.drafted_tokens == 0
    out = {}
    for mode in modes:
        spec, spec_text, stats = run(llm, prompt, mode, **kw)
        assert spec == plain and spec_text == plain_text, (mode, prompt, kw)
        assert stats.finish_reason == plain_stats.finish_reason
        assert 0 <= stats.accepted_tokens <= stats.drafted_tokens
        out[mode] = stats
    return plain, out


def accepted(stats: dict) -> int:
    return sum(s.accepted_tokens for s in stats.values())


def clean(llm):
    def check(store):
        store.check()
        return store.contexts()
    assert llm.scheduler.do(check) == []
    if llm.draft is not None:  # every sequence's draft context freed with it
        llm.draft.store.check()
        assert llm.draft.store.contexts() == []


# --- the drafter ------------------------------------------------------------------------------------------

def test_lookup_takes_the_longest_suffix_then_its_latest_occurrence():
    d = NgramDrafter()
    seq = [1, 2, 3, 9, 8, 5, 2, 3, 7, 6, 0, 1, 2, 3]
    d._extend(seq[:-1], seq[-1])
    assert d._lookup(2) == ([9, 8], 3)  # (1, 2, 3) beats the later (2, 3)
    d._extend(seq + [4, 2], 3)  # ... 4 2 3: only (2, 3) matches, latest first
    assert d._lookup(2) == ([4, 2], 2)
    d._extend(seq + [4, 2, 3], 42)
    assert d._lookup(2) == ([], 0)


def test_a_match_running_into_the_end_repeats_the_loop():
    d = NgramDrafter()
    d._extend([7, 5, 6, 5], 6)
    assert d._lookup(7) == ([5, 6, 5, 6, 5, 6, 5], 2)


def test_lookup_agrees_with_a_naive_scan():
    for seed in range(20):
        rng, d, seq = random.Random(seed), NgramDrafter(), []
        for _ in range(150):
            seq.append(rng.randrange(3))
            d._extend(seq[:-1], seq[-1])
            assert d._lookup(5) == _naive(seq, 3, 5), f"seed {seed}, {seq}"


def _naive(seq, n_max, k):
    for n in range(min(n_max, len(seq)), 0, -1):
        starts = [i for i in range(len(seq) - n) if seq[i:i + n] == seq[len(seq) - n:]]
        if starts:
            ext = list(seq)
            for m in range(k):
                ext.append(ext[starts[-1] + n + m])
            return ext[len(seq):], n
    return [], 0


def _follow(d, truth, start, steps):
    """Drafts along truth from start for up to steps passes, each accepted as far as it agrees -> (the
    draft lengths, where it got to)."""
    i, lengths = start, []
    while len(lengths) < steps and i < len(truth) - 1:
        draft = d.propose(truth[:i], truth[i], len(truth) - i - 2)
        agree = next((j for j, t in enumerate(draft) if t != truth[i + 1 + j]), len(draft))
        if draft:
            d.verified(len(draft), agree)
        lengths.append(len(draft))
        i += 1 + agree
    return lengths, i


def test_draft_length_follows_the_outcomes():
    loop = list(range(100, 120))
    truth = loop * 20 + list(range(200, 300)) + loop * 30
    lengths, _ = _follow(NgramDrafter(), truth, 20, 8)
    assert lengths[:2] == [0, 1] and lengths[-1] == 15  # a free guess first; then, all right: 15
    d = NgramDrafter()
    _follow(d, truth, 20, 8)
    lengths, _ = _follow(d, truth, 400, 40)  # new tokens: every guess wrong
    assert lengths[-30:] == [0] * 30  # nothing sent: guesses are only compared (free)
    assert _follow(d, truth, 500, 30)[0][-1] == 15  # repeating again: right guesses send drafts again


def test_the_draft_keeps_within_the_limit():
    d, truth = NgramDrafter(), list(range(10)) * 10
    _, i = _follow(d, truth, 10, 5)
    assert d.propose(truth[:i], truth[i], 0) == [] and len(d.propose(truth[:i + 1], truth[i + 1], 5)) == 3


def test_fit_makes_the_decode_tokens_a_power_of_two():
    assert [len(d) for d in fit([[1] * 5, [2] * 2, []], 3, 512)] == [3, 2, 0]  # 10 -> 8, longest first
    assert fit([[1]], 5, 512) == [[]]  # 6 tokens: 4 is not above the 5 decode rows, so no draft
    assert len(fit([[1] * 15], 1, 8)[0]) == 7  # the batch caps the step
    assert fit([[], []], 2, 512) == [[], []]


@pytest.mark.model
def test_tree_drafts_follow_the_latest_branch_and_skip_a_tree_that_did_not_grow():
    tree = {(1, 2, 3): [4, 5, 6]}
    calls, version = [], [0]

    def continuation(tokens, k):
        calls.append(list(tokens))
        return tree.get(tuple(tokens), [])[:k]
    d = TreeDrafter(continuation, lambda: version[0])
    assert d.propose([1, 2], 3, 5) == [4, 5, 6]  # the tree's prior pays at once
    assert d.propose([1, 2, 3, 4, 5], 9, 5) == [] and len(calls) == 2  # off the tree: n-gram lookup
    assert d.propose([1, 2, 3, 4, 5, 9], 1, 5) == [] and len(calls) == 2  # the tree did not grow: not asked
    version[0] += 1
    d.propose([1, 2, 3, 4, 5, 9, 1], 2, 5)
    assert len(calls) == 3


def test_an_unknown_mode_is_refused(smollm_path, llm):
    with pytest.raises(ValueError, match="spec must be one of"):
        llamay.load(smollm_path, n_ctx=64, spec="fast")
    with pytest.raises(ValueError, match="spec must be one of"):
        list(llm.generate("Hi", max_tokens=2, spec="fast"))
    with pytest.raises(ValueError, match="spec draft needs a draft model"):
        llamay.load(smollm_path, n_ctx=64, spec="draft")
    clean(llm)


def test_a_draft_model_of_another_vocabulary_is_refused(smollm_path, tiny_paths):
    with pytest.raises(DraftMismatch, match="draft model llama.gguf has 272 tokens, the model 49152"):
        llamay.load(smollm_path, n_ctx=64, draft_model=tiny_paths[0])


# --- tiny random models: many prompts, 1 and 2 threads ---------------------------------------------------

GEOMETRIES = [Geometry(), Geometry(arch="qwen2"), Geometry(arch="gemma3", n_layer=3, window=8)]


@pytest.fixture(scope="module")
def tiny_paths(tmp_path_factory):
    out = []
    for g in GEOMETRIES:
        path = tmp_path_factory.mktemp("tiny") / f"{g.arch}.gguf"
        path.write_bytes(tiny_decoder(g, seed=1).to_bytes())
        out.append(path)
    return out


def _tiny_params(rng: random.Random, i: int) -> dict:
    """Greedy and seeded sampling, with penalties over the history (each position's own) half the time."""
    kw = dict(temperature=0) if i % 2 else dict(temperature=0.5, top_k=3, seed=rng.randrange(1000))
    if i % 4 < 2:
        kw.update(repeat_penalty=1.3, repeat_last_n=8, presence_penalty=0.2)
    return kw


@pytest.fixture(scope="module")
def tiny_draft(tmp_path_factory):
    """A one-layer llama of the tiny models' vocabulary and other weights: its drafts are often wrong."""
    path = tmp_path_factory.mktemp("tiny") / "draft.gguf"
    path.write_bytes(tiny_decoder(Geometry(n_layer=1), seed=2).to_bytes())
    return path


def tiny_llm(path, draft, threads: int = 2, cost: float = 0.1):
    llm = llamay.load(path, threads=threads, n_ctx=128, draft_model=draft, spec="ngram")
    llm.draft.cost = cost  # tiny files: their sizes' ratio is no measure of their speed
    return llm


@pytest.mark.parametrize("threads", [1, 2])
def test_tiny_models_emit_the_same_tokens(tiny_paths, tiny_draft, threads):
    for path in tiny_paths:
        llm = tiny_llm(path, tiny_draft, threads)
        rng, sent, right = random.Random(threads), {(m, s): 0 for m in ON for s in (True, False)}, {True: 0, False: 0}
        for i in range(24):
            head = [rng.randrange(256) for _ in range(rng.randrange(1, 24))]
            prompt = head + head[:rng.randrange(len(head) + 1)]
            kw = _tiny_params(rng, i)
            _, stats = both(llm, prompt, max_tokens=rng.choice([1, 2, 5, 40, 200]), **kw)  # 200: the context's end
            for mode, st in stats.items():
                sent[mode, "seed" in kw] += st.drafted_tokens
                right["seed" in kw] += st.accepted_tokens
        assert all(sent.values()) and all(right.values()), (path.name, sent, right)
        clean(llm)


def test_a_draft_model_drafting_for_itself_is_always_right_under_greedy(tiny_paths):
    llm = tiny_llm(tiny_paths[1], tiny_paths[1])
    for prompt in ([3, 4, 5], [100, 7, 9, 100, 7], list(range(20, 40))):
        _, stats = both(llm, prompt, modes=("draft",), max_tokens=60, temperature=0)
        assert stats["draft"].accepted_tokens == stats["draft"].drafted_tokens > 20
    clean(llm)


def test_every_max_tokens_cut_emits_the_same(tiny_paths, tiny_draft):
    llm = tiny_llm(tiny_paths[2], tiny_draft)
    prompt = [5, 9, 13, 5, 9, 13, 5, 9]
    full, stats = both(llm, prompt, max_tokens=60, temperature=0)
    assert stats["ngram"].accepted_tokens > 20 and stats["tree"].accepted_tokens > 20
    for n in range(1, 60):
        for mode in ON:
            assert run(llm, prompt, mode, max_tokens=n, temperature=0)[0] == full[:n], (mode, n)
    clean(llm)


# --- SmolLM2 ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llm(smollm_path):
    """SmolLM2, its own draft model (always right under greedy, so acceptance shows the plumbing's)."""
    llm = llamay.load(smollm_path, threads=2, n_ctx=1024, draft_model=smollm_path, spec="ngram")
    llm.draft.cost = 0.25
    return llm


@pytest.mark.model
def test_greedy_output_is_the_same_and_repeats_are_drafted(llm):
    ngram = total = 0
    for prompt in REPEATING + FREE:
        stats = both(llm, prompt, max_tokens=40, temperature=0)[1]
        ngram += stats["ngram"].accepted_tokens * (prompt in REPEATING)
        total += accepted(stats)
        tree = stats["tree"]  # the plain run's answer, drafted from the tree: right to its end
        assert tree.accepted_tokens == tree.drafted_tokens >= tree.generated_tokens // 2
        assert stats["draft"].accepted_tokens == stats["draft"].drafted_tokens
    assert ngram > 40
    assert llm.scheduler.accepted_tokens >= total and llm.scheduler.draft_steps > 0
    ids = llm.tokenize(REPEATING[1])
    out = run(llm, ids, "ngram", max_tokens=40, temperature=0)[0]
    prefilled = llm.logits(ids + out[:-1])[len(ids) - 1:]  # one prefill, no scheduler: the argmax at each
    assert [int(np.argmax(row)) for row in prefilled] == out
    clean(llm)


@pytest.mark.model
def test_one_thread_emits_the_same(smollm_path):
    one = llamay.load(smollm_path, threads=1, n_ctx=512)
    assert sum(accepted(both(one, p, ("ngram", "tree"), max_tokens=32, temperature=0)[1]) for p in REPEATING[:2]) > 0
    clean(one)


@pytest.mark.model
def test_seeded_sampling_is_the_same_with_and_without_drafts(llm):
    """One random draw per emitted token either way, so a seed gives the same output."""
    got = {mode: 0 for mode in ON}
    for prompt in REPEATING[1:4]:
        for seed in (1, 2):
            for mode, st in both(llm, prompt, max_tokens=32, seed=seed, repeat_penalty=1.1)[1].items():
                got[mode] += st.accepted_tokens
    assert all(got.values()), got
    clean(llm)


@pytest.mark.model
def test_grammars_mask_every_verified_position(llm):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "street": {"type": "string"},
                                               "city": {"type": "string"}}, "required": ["name", "street", "city"]}
    json_grammar = Grammar.compile(llm.tokenizer, "json_schema", schema)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 24}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}}
    call = Grammar.compile(llm.tokenizer, "lark", tool_grammar(FORMATS["hermes"], [weather], "required", True,
                                                               llm.tokenizer))
    cases = [(chat("Text: Alice Smith lives at 12 Baker Street, London.\nExtract name, street and city as JSON."),
              json_grammar), (chat('Call get_weather for "San Francisco de Macoris" over 3 days.'), call)]
    got = {mode: 0 for mode in ON}
    for prompt, grammar in cases:
        for kw in (dict(temperature=0), dict(seed=3)):
            for mode, st in both(llm, prompt, max_tokens=48, grammar=grammar, **kw)[1].items():
                got[mode] += st.accepted_tokens
    assert all(got.values()), got
    clean(llm)


def _by_step(llm, job: Job) -> tuple[list[list[int]], Done]:
    """The job run on the caller's thread -> (its token ids grouped by the pass that emitted them, Done)."""
    groups, done = {}, None
    for ev in llm.scheduler.run(job):
        if isinstance(ev, Piece) and ev.token >= 0:
            groups.setdefault(llm.scheduler.steps, []).append(ev.token)
        elif isinstance(ev, Done):
            done = ev
    return list(groups.values()), done


@pytest.mark.model
def test_a_stop_string_or_max_tokens_inside_an_accepted_draft(llm):
    """Both cut at a token the speculative run emits mid-pass. A stop string is found inside the draft (the
    rest of it cut); max_tokens never lets a draft run past it, so there the last pass's draft is shorter."""
    prompt = llm.tokenize(REPEATING[1])
    groups, _ = _by_step(llm, Job(prompt, GREEDY, None, max_tokens=48, spec="ngram"))
    ids = [t for g in groups for t in g]
    at = next(len([t for g in groups[:i] for t in g]) + len(g) // 2 for i, g in enumerate(groups) if len(g) >= 3)
    for stop, limit in ((_first_stop(llm, ids[:at + 1]), 48), (None, at + 1)):
        job = dict(max_tokens=limit, stops=[stop] if stop else [])
        want, plain = _by_step(llm, Job(prompt, GREEDY, None, spec="none", **job))
        got, done = _by_step(llm, Job(prompt, GREEDY, None, spec="ngram", **job))
        assert [t for g in got for t in g] == [t for g in want for t in g] == ids[:at + 1]
        assert (done.reason, done.stop_sequence, done.tokens) == (plain.reason, plain.stop_sequence, plain.tokens)
        assert done.accepted_tokens > 0 and (len(got[-1]) >= 2 or not stop)  # the stop: found mid-pass
    clean(llm)


def _first_stop(llm, ids: list[int]) -> str:
    """The shortest end of ids' text found nowhere earlier in it: a stop string that cuts at the last id."""
    text = llm.detokenize(ids)
    return next(text[-n:] for n in range(1, len(text) + 1) if text.find(text[-n:]) == len(text) - n)


@pytest.mark.model
def test_named_contexts_continue_alike_in_parts(llm):
    """Cut by max_tokens (a token left pending), by the end of generation (continued from the last logits),
    extended, continued, forked: the same tokens, pending tokens and last logits either way."""
    prompt = chat("Say OK.") + "OK<|im_end|>\n" + chat("Say OK.")
    plain, spec = llm.create_context(prompt), llm.create_context(prompt)
    accepted = llm.scheduler.accepted_tokens
    for part in (1, 6, 40, 40, "\n" + REPEATING[1], 40, 3):
        if isinstance(part, str):
            plain.extend(part)
            spec.extend(part)
            continue
        assert run_ctx(spec, "ngram", part) == run_ctx(plain, "none", part)
        assert spec.tokens == plain.tokens
        ours, theirs = llm.context_store._ctxs[spec.id], llm.context_store._ctxs[plain.id]
        assert ours.pending == theirs.pending and np.array_equal(ours.last_logits, theirs.last_logits)
    assert run_ctx(spec.fork(1)[0], "ngram", 20) == run_ctx(plain.fork(1)[0], "none", 20)
    assert llm.scheduler.accepted_tokens > accepted
    for ctx in llm.contexts():
        ctx.delete()
    clean(llm)


def run_ctx(ctx, spec: str, n: int) -> tuple[list[int], str]:
    "".join(ctx.generate(max_tokens=n, temperature=0, spec=spec))
    return list(ctx.llm.stats.token_ids), ctx.llm.stats.finish_reason


@pytest.mark.model
def test_a_pass_out_of_pages_runs_again_without_its_drafts(llm, monkeypatch):
    prompt = llm.tokenize(REPEATING[1])
    want = run(llm, prompt, "none", max_tokens=24, temperature=0)[0]
    store = llm.context_store
    forward = store.compute

    def short_of_pages(items, rows):  # a decode pass holding a draft needs pages there are not
        if any(len(tokens) > 1 and store.n_tokens(ctx) >= len(prompt) for ctx, tokens in items):
            raise OutOfPages("no room for the draft")
        return forward(items, rows)
    monkeypatch.setattr(store, "compute", short_of_pages)
    got, _, stats = run(llm, prompt, "ngram", max_tokens=24, temperature=0)
    assert got == want and stats.finish_reason == "length" and stats.accepted_tokens == 0
    clean(llm)


@pytest.mark.model
def test_a_draft_model_out_of_pages_drafts_nothing_and_changes_nothing(llm, monkeypatch):
    prompt = llm.tokenize(REPEATING[2])
    want = run(llm, prompt, "none", max_tokens=24, temperature=0)[0]
    store = llm.draft.store

    def no_pages(items, rows):
        raise OutOfPages("the draft model's pool is full")
    monkeypatch.setattr(store, "compute", no_pages)
    got, _, stats = run(llm, prompt, "draft", max_tokens=24, temperature=0)
    assert got == want and stats.drafted_tokens == 0
    monkeypatch.undo()
    got, _, stats = run(llm, prompt, "draft", max_tokens=24, temperature=0)
    assert got == want and stats.accepted_tokens == stats.drafted_tokens > 0
    clean(llm)


@pytest.fixture(scope="module")
def served(smollm_path):
    """SmolLM2 with its scheduler started, as a server runs it (its own draft model)."""
    llm = llamay.load(smollm_path, threads=2, n_ctx=512, draft_model=smollm_path, spec="ngram")
    llm.draft.cost = 0.25
    sched = llm.serve(concurrency=4)
    yield llm
    sched.close()


@pytest.mark.model
def test_choices_and_concurrent_sequences_through_a_started_scheduler(served):
    jobs = [(REPEATING[0], GREEDY, 1), (REPEATING[1], SamplingParams(seed=5), 2), (REPEATING[2], GREEDY, 1),
            (FREE[0], SamplingParams(seed=9), 1)]
    want = _concurrently(served, jobs, "none")
    before = 0
    for mode in ON:  # the draft model's drafts of every sequence decoded in one batch per position
        got = _concurrently(served, jobs, mode)
        assert {k: d.tokens for k, d in got.items()} == {k: d.tokens for k, d in want.items()}, mode
        n = sum(d.accepted_tokens for d in got.values())
        assert n > 0 and served.scheduler.accepted_tokens == before + n
        before += n
    clean(served)


def _concurrently(llm, jobs, spec: str) -> dict:
    done, lock, finished = {}, threading.Lock(), threading.Event()
    n_done = sum(n for _, _, n in jobs)

    def sink(i):
        def put(ev):
            if isinstance(ev, Done):
                with lock:
                    done[(i, ev.index)] = ev
                    if len(done) == n_done:
                        finished.set()
        return put
    for i, (prompt, params, n) in enumerate(jobs):
        llm.scheduler.submit(Job(llm.tokenize(prompt), params, sink(i), max_tokens=32, n=n, spec=spec))
    assert finished.wait(120)
    assert {d.reason for d in done.values()} <= {"length", "stop"}
    return done


@pytest.mark.model
def test_a_cancel_mid_draft_ends_the_sequence_at_the_next_step(llm, served):
    prompt = llm.tokenize(REPEATING[1])
    groups, _ = _by_step(llm, Job(prompt, GREEDY, None, max_tokens=40, spec="ngram"))
    ids = [t for g in groups for t in g]
    at = next(len([t for g in groups[:i] for t in g]) + 2 for i, g in enumerate(groups) if len(g) >= 3)
    pieces, done, finished = [], [], threading.Event()
    job = Job(prompt, GREEDY, None, max_tokens=40, spec="ngram")

    def sink(ev):  # on the scheduler thread, inside the verification of a pass's draft
        if isinstance(ev, Piece) and ev.token >= 0:
            pieces.append(ev.token)
            if len(pieces) == at:
                job.cancel()
        elif isinstance(ev, Done):
            done.append(ev)
            finished.set()
    job.sink = sink
    served.scheduler.submit(job)
    assert finished.wait(60)
    assert done[0].reason == "cancelled" and pieces == ids[:at] and done[0].tokens == prompt + ids[:at]
    clean(served)
    assert run(served, prompt, "ngram", max_tokens=40, temperature=0)[0] == ids  # the cached prefix is sound
