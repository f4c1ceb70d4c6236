"""One sequence's failure is its own: the scheduler ends that sequence with an error and every other
sequence in the batch runs on, producing exactly what it produces alone."""
import pytest

import llamay
from llamay.engine.sampling import SamplingParams
from llamay.engine.scheduler import Job, Scheduler

from test_scheduler import GREEDY, Collector, _alone, _state_clean

PROMPTS = ["The capital of France is", "Once upon a time, there was a", "1, 2, 3, 4,"]


@pytest.fixture(scope="module")
def llm(smollm_path):
    return llamay.load(smollm_path, threads=2, n_ctx=512)


class _FailingMatcher:
    """A grammar matcher that gives out after `after` tokens (as a broken grammar would, mid-generation)."""

    def __init__(self, after: int):
        self.left = after

    def apply(self, logits):
        if self.left == 0:
            raise RuntimeError("the grammar broke")

    def advance(self, tok):
        self.left -= 1

    def is_done(self):
        return False

    def clone(self):
        return _FailingMatcher(self.left)


class _FailingGrammar:
    def __init__(self, after: int):
        self.after = after

    def matcher(self):
        return _FailingMatcher(self.after)


def _bad_job(kind: str, n_vocab: int, sink):
    if kind == "logit_bias":  # an id past the vocabulary, as an unchecked request would send it
        params = SamplingParams(temperature=0, logit_bias={n_vocab + 7: 1.0})
        return Job([1, 2, 3], params, sink, max_tokens=8)
    return Job([1, 2, 3], GREEDY, sink, max_tokens=8, n=2, grammar=_FailingGrammar(after=3))


@pytest.mark.model
@pytest.mark.parametrize("kind", ["logit_bias", "grammar"])
def test_a_failing_sequence_ends_alone_and_the_others_run_on(llm, kind):
    alone = [_alone(llm, p) for p in PROMPTS]
    llm.reset()
    sched = Scheduler(lambda: llm.context_store, llm.tokenizer, llm.n_ctx, concurrency=6, batch=64)
    try:
        n_bad = 1 if kind == "logit_bias" else 2
        got = Collector(len(PROMPTS) + n_bad)
        sched.submit(Job(llm.tokenize(PROMPTS[0]), GREEDY, got.sink(0), max_tokens=16))
        sched.submit(_bad_job(kind, llm.n_vocab, got.sink("bad")))
        for i, p in enumerate(PROMPTS[1:], start=1):
            sched.submit(Job(llm.tokenize(p), GREEDY, got.sink(i), max_tokens=16))
        assert got.all_done.wait(120)
        for i in range(n_bad):
            done = got.done[("bad", i)]
            assert done.reason == "error" and done.error is not None
        for i in range(len(PROMPTS)):
            assert got.done[(i, 0)].reason == "length"
            assert got.tokens[(i, 0)] == alone[i]
        assert _state_clean(sched) == []
    finally:
        sched.close()


def test_sampling_params_refuse_what_no_sampler_can_use():
    for bad in ({"temperature": float("nan")}, {"top_p": float("inf")}, {"min_p": float("nan")},
                {"repeat_penalty": 0.0}, {"presence_penalty": float("nan")}, {"top_k": -1},
                {"logit_bias": {100: 1.0}}, {"logit_bias": {-1: 1.0}}, {"logit_bias": {5: float("nan")}},
                {"seed": 2**70}):
        with pytest.raises(ValueError):
            SamplingParams(**bad).check(100)
    SamplingParams(temperature=0.5, logit_bias={99: -100.0}, seed=2**63).check(100)


def test_a_temperature_too_small_for_float32_samples_greedily():
    import numpy as np

    from llamay.engine.sampling import Sampler
    logits = np.random.default_rng(0).standard_normal(1000).astype(np.float32) * 10
    for t in (1e-308, 1e-40, 1e-30):
        assert Sampler(SamplingParams(temperature=t, seed=1)).sample(logits, []) == int(np.argmax(logits))
