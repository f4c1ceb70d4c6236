"""LLAMAY_KERNELS=auto picks the kernel path by measurement (kernels/pathpick.py); the bits do not depend on it."""
import itertools
import math

import pytest

from llamay.kernels import _lib, pathpick

FAST = [p for p in _lib.available() if p != "portable"]
needs_two = pytest.mark.skipif(len(FAST) < 2, reason="this CPU runs fewer than two SIMD paths")


@pytest.fixture
def auto():
    """The path set by 'auto' as at import (not yet measured); the previous path and choice after."""
    old, old_choice = _lib.current(), pathpick._choice
    _lib.set_path("auto")
    yield
    _lib.set_path(old)
    pathpick._choice = old_choice


@needs_two
def test_the_measured_fastest_path_is_used_not_the_widest(auto):
    slow_widest = {p: (1.0 if p == FAST[-1] else 0.1 * i) for i, p in enumerate(FAST)}
    got = pathpick.choose({"Q4_K": 10, "Q6_K": 5}, lambda paths, types: slow_widest)
    assert got == _lib.current() == FAST[0] != FAST[-1]
    assert pathpick.choice()["path"] == FAST[0] and pathpick.choice()["types"] == ["Q4_K", "Q6_K"]
    assert not _lib.auto_pending()  # measured once: a second model load keeps it
    assert pathpick.choose({"Q4_K": 1}, lambda *a: pytest.fail("measured twice")) == FAST[0]


@needs_two
def test_a_path_set_by_name_is_never_replaced(auto):
    _lib.set_path(FAST[0])
    assert pathpick.choose({"Q4_0": 1}, lambda *a: pytest.fail("measured a named path")) == FAST[0]


def test_the_score_is_the_mean_log_time_against_each_keys_fastest():
    got = pathpick.score({"a": {"x": 1.0, "y": 4.0}, "b": {"x": 2.0, "y": 1.0}})
    assert got == pytest.approx({"a": math.log(4) / 2, "b": math.log(2) / 2})


@needs_two
def test_the_measurement_takes_each_keys_best_of_its_rounds_under_its_path(auto):
    seen = []

    def timer(path, types):  # the path's calls take 3, 1, 2, 3, ... s (times its rank): each key's best is 1
        times = itertools.islice(itertools.cycle([3.0, 1.0, 2.0]), FAST.index(path), None)  # each path its phase

        def run():
            seen.append((path, _lib.current()))
            return next(times) * (1 + FAST.index(path))
        return {(t, n): run for t in types for n in pathpick.TOKENS}
    got = pathpick.measure(FAST, ["Q4_0", "Q4_K", "IQ2_XS"], timer)
    assert got == pytest.approx({p: math.log(1 + i) for i, p in enumerate(FAST)})
    assert all(path == running for path, running in seen)  # each timed under its own path
    assert len(seen) == len(FAST) * 2 * len(pathpick.TOKENS) * pathpick.REPS  # IQ2_XS is not quantizable here


@needs_two
def test_the_real_measurement_times_every_path(auto):
    score = pathpick.measure(FAST, ["Q4_0", "Q4_K"])
    assert set(score) == set(FAST)
    assert all(math.isfinite(s) and s >= 0 for s in score.values())


@needs_two
def test_a_model_load_under_auto_measures_and_keeps_the_bits(auto, smollm_path):
    import numpy as np
    import llamay
    llm = llamay.load(smollm_path, threads=1)
    chosen = pathpick.choice()
    assert chosen is not None and chosen["path"] == _lib.current() in FAST
    first = llm.create_context(llm.tokenize("The sky is")).logits.copy()
    other = next(p for p in FAST if p != chosen["path"])
    with _lib.using(other):
        again = llamay.load(smollm_path, threads=1).create_context(llm.tokenize("The sky is")).logits
    assert np.array_equal(first, again)
