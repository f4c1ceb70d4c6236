"""LLAMAY_KERNELS=auto picks the kernel path by measurement (kernels/pathpick.py); the bits do not depend on it."""
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


@needs_two
def test_the_measurement_times_every_path_on_the_models_types(auto):
    score = pathpick.measure(FAST, ["Q4_0", "Q4_K"])
    assert set(score) == set(FAST)
    assert all(math.isfinite(s) and s >= 0 for s in score.values())
    # each (type, tokens) has a fastest path, whose log ratio is 0: some path is 0 on at least one
    assert min(score.values()) < max(math.log(2), max(score.values()))


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
