"""Continuous batching on the real default model: sequences batched together compute what each computes
alone (the engine's batch invariance, seen from the scheduler), and every way a sequence ends leaves the
state engine's invariants holding with no page leaked."""
import threading
import time

import pytest

import llamay
from llamay.engine.sampling import SamplingParams
from llamay.engine.scheduler import Done, Job, Overloaded, Piece, Scheduler
from llamay.events import Progress

PROMPTS = ["The capital of France is", "Once upon a time, there was a", "def fibonacci(n):", "1, 2, 3, 4,",
           "The quick brown fox"]
GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def llm(smollm_path):
    return llamay.load(smollm_path, threads=2, n_ctx=1024)


class Collector:
    def __init__(self, n_jobs: int):
        self.tokens, self.text, self.done = {}, {}, {}
        self.all_done = threading.Event()
        self.n_jobs = n_jobs

    def sink(self, key):
        def put(ev):
            if isinstance(ev, Piece):
                if ev.token >= 0:
                    self.tokens.setdefault((key, ev.index), []).append(ev.token)
                self.text[(key, ev.index)] = self.text.get((key, ev.index), "") + ev.text
            else:
                assert isinstance(ev, Done)
                self.done[(key, ev.index)] = ev
                if len(self.done) == self.n_jobs:
                    self.all_done.set()
        return put


def _alone(llm, prompt, n=16):
    llm.reset()
    list(llm.generate(prompt, max_tokens=n, temperature=0))
    return llm.stats.token_ids


def _state_clean(sched):
    def check(store):
        store.check()
        return store.contexts()
    return sched.call(check).result(timeout=30)


@pytest.mark.model
def test_batched_sequences_compute_what_each_computes_alone(llm):
    alone = [_alone(llm, p) for p in PROMPTS]
    llm.reset()
    sched = Scheduler(lambda: llm.context_store, llm.tokenizer, llm.n_ctx, concurrency=3, batch=64)
    try:
        got = Collector(len(PROMPTS))
        for i, p in enumerate(PROMPTS):  # 5 jobs, 3 at a time: some queue, some prefill beside decodes
            sched.submit(Job(llm.tokenize(p), GREEDY, got.sink(i), max_tokens=16))
        assert got.all_done.wait(120)
        for i in range(len(PROMPTS)):
            assert got.tokens[(i, 0)] == alone[i]
            assert got.done[(i, 0)].reason == "length" and got.done[(i, 0)].completion_tokens == 16
        assert sched.steps < 5 * 16  # decode steps were shared
        assert _state_clean(sched) == []
    finally:
        sched.close()


@pytest.mark.model
def test_choices_fork_the_prompt_and_a_repeat_hits_the_prefix_cache(llm):
    llm.reset()
    sched = Scheduler(lambda: llm.context_store, llm.tokenizer, llm.n_ctx, concurrency=4)
    try:
        prompt = llm.tokenize("Write a short poem about the sea. " * 6)
        got = Collector(3)
        sched.submit(Job(prompt, SamplingParams(temperature=1.0, seed=7), got.sink("a"), max_tokens=12, n=3))
        assert got.all_done.wait(120)
        assert {got.done[("a", i)].cached_tokens for i in range(3)} == {0}
        assert len({tuple(got.tokens[("a", i)]) for i in range(3)}) > 1  # the choices are not copies
        again = Collector(1)
        sched.submit(Job(prompt, GREEDY, again.sink("b"), max_tokens=4))
        assert again.all_done.wait(60)
        assert again.done[("b", 0)].cached_tokens == len(prompt)  # its end's logits kept: nothing computed
        assert _state_clean(sched) == []
    finally:
        sched.close()


@pytest.mark.model
def test_a_job_that_asks_hears_its_prompt_computed_chunk_by_chunk(llm):
    """Job.progress (llama-server's return_progress): a Progress when admitted (processed == cached), one after
    each pass that computed part of the prompt (32 tokens a pass here), all before the first Piece; the
    tokens are those of a job that did not ask."""
    llm.reset()
    sched = Scheduler(lambda: llm.context_store, llm.tokenizer, llm.n_ctx, batch=32, start=False)
    prompt = llm.tokenize("the quick brown fox jumps over the lazy dog " * 8)
    plain = [ev.token for ev in sched.run(Job(prompt, GREEDY, None, max_tokens=4)) if isinstance(ev, Piece)]
    llm.reset()
    for cached in (0, len(prompt) - 1):  # the second time, all but the last token are in the prefix cache
        while llm.context_store.checkpoints.evict():  # (the logits at its end dropped: it recomputes that token)
            pass
        got = list(sched.run(Job(prompt, GREEDY, None, max_tokens=4, progress=True)))
        first_piece = next(i for i, ev in enumerate(got) if isinstance(ev, Piece))
        steps = [ev for ev in got if isinstance(ev, Progress)]
        assert all(isinstance(ev, Progress) for ev in got[:first_piece]) and len(steps) == first_piece
        assert {(ev.total, ev.cached) for ev in steps} == {(len(prompt), cached)}
        want = [cached] + [min(n, len(prompt)) for n in range(32, len(prompt) + 32, 32)] if not cached \
            else [cached, len(prompt)]
        assert [ev.processed for ev in steps] == want
        assert steps[0].prompt_ns == 0 and all(ev.prompt_ns > 0 for ev in steps[1:])
        assert [ev.token for ev in got if isinstance(ev, Piece)] == plain
    sched.close()


@pytest.mark.model
def test_cancel_and_overload_leave_no_pages_held(llm):
    llm.reset()
    sched = Scheduler(lambda: llm.context_store, llm.tokenizer, llm.n_ctx, concurrency=1, max_queue=1)
    try:
        got = Collector(2)
        first = Job(llm.tokenize(PROMPTS[0]), GREEDY, got.sink(0), max_tokens=400)
        second = Job(llm.tokenize(PROMPTS[1]), GREEDY, got.sink(1), max_tokens=400)
        sched.submit(first)
        while (0, 0) not in got.tokens:  # running, so the queue is empty again
            time.sleep(0.01)
        sched.submit(second)  # queued behind the first (concurrency 1)
        with pytest.raises(Overloaded):
            sched.submit(Job(llm.tokenize(PROMPTS[2]), GREEDY, lambda ev: None, max_tokens=4))
        first.cancel()
        second.cancel()
        assert got.all_done.wait(60)
        assert {d.reason for d in got.done.values()} == {"cancelled"}
        assert _state_clean(sched) == []  # with check(): only the prefix cache holds pages
    finally:
        sched.close()


@pytest.mark.model
def test_a_job_on_a_context_continues_it_like_the_python_api(llm):
    llm.reset()
    ctx = llm.create_context(PROMPTS[3])
    want = "".join(ctx.fork(1)[0].generate(max_tokens=10, temperature=0))
    sched = Scheduler(lambda: llm.context_store, llm.tokenizer, llm.n_ctx)
    try:
        got = Collector(1)
        sched.submit(Job([], GREEDY, got.sink(0), max_tokens=10, ctx=ctx.id))
        assert got.all_done.wait(60)
        assert got.text[(0, 0)] == want
        assert got.done[(0, 0)].ctx == ctx.id  # the context stays, holding the generated tokens
        assert len(ctx.tokens) == len(llm.tokenize(PROMPTS[3])) + 10
    finally:
        sched.close()


@pytest.mark.model
def test_running_out_of_pages_fails_one_sequence_cleanly(smollm_path):
    small = llamay.load(smollm_path, threads=2, n_ctx=256, kv_budget=1)  # the budget floor: one context
    sched = Scheduler(lambda: small.context_store, small.tokenizer, small.n_ctx, concurrency=2)
    try:
        got = Collector(2)
        for i in range(2):  # two sequences that each fill the context cannot both fit
            sched.submit(Job(small.tokenize(PROMPTS[i] + " a" * 100), GREEDY, got.sink(i), max_tokens=140))
        assert got.all_done.wait(120)
        reasons = sorted(d.reason for d in got.done.values())
        assert "error" in reasons and reasons != ["error", "error"]
        assert _state_clean(sched) == []
    finally:
        sched.close()


def test_only_the_scheduler_thread_changes_kv_once_it_runs(smollm_path):
    """A started scheduler owns the KV state: the Python API's calls go through it (same results), and a
    change made past it, from another thread, raises."""
    from llamay.kv import InvariantError
    llm = llamay.load(smollm_path, threads=1, n_ctx=256)
    ids = llm.tokenize("The capital of France is")
    want = "".join(llm.generate(ids, max_tokens=6, temperature=0))
    sched = llm.serve()
    try:
        assert "".join(llm.generate(ids, max_tokens=6, temperature=0)) == want
        ctx = llm.create_context(ids)
        assert "".join(ctx.generate(max_tokens=6, temperature=0)) == want
        with pytest.raises(InvariantError, match="not on its owner"):
            llm.context_store._kv.create(ids)
        ctx.delete()
    finally:
        sched.close()
    llm.context_store._kv.create(ids)  # a closed scheduler gave the state back


def test_idle_for_is_zero_while_a_request_runs_and_counts_from_its_last_step(smollm_path):
    """LLM.idle_for (the clock background work waits on, engine/idle.py): infinite before any request, 0 at
    every step of a running one (seen from its events while it is among the running), then the time since
    its last step."""
    llm = llamay.load(smollm_path, threads=2, n_ctx=256)
    assert llm.idle_for == float("inf")
    seen = []
    for _ in llm.generate("The quick brown fox", max_tokens=4, temperature=0):
        seen.append((bool(llm.scheduler.running), llm.idle_for))
    after = llm.idle_for
    time.sleep(0.05)
    assert any(running for running, _ in seen) and all(idle == 0.0 for running, idle in seen if running)
    assert 0 <= after < llm.idle_for
