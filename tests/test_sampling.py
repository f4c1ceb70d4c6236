"""Sampling: each filter keeps exactly the set its definition names; draws follow the softmax."""
import dataclasses
import math

import numpy as np
import pytest

from llamay.engine import Sampler, SamplingParams, apply_penalties, filter_candidates

# Upper 0.1% points of the chi-square distribution (NIST/SEMATECH e-Handbook, table 1.3.6.7.4)
CHI2_CRITICAL_001 = {2: 13.816, 5: 20.515, 7: 24.322}
ONLY = dict(top_k=0, top_p=1.0, min_p=0.0)  # all filters off; a test switches one back on

# Hand-made distribution: probabilities placed at shuffled ids, logits = log(prob) + an offset
PROBS = {4: 0.40, 0: 0.22, 6: 0.15, 2: 0.10, 7: 0.06, 1: 0.04, 3: 0.02, 5: 0.01}
LOGITS = np.array([math.log(PROBS[i]) + 3.0 for i in range(8)], dtype=np.float32)


def _params(**kwargs) -> SamplingParams:
    return SamplingParams(**{**ONLY, **kwargs})


def _softmax(values: list[float]) -> list[float]:
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    return [e / sum(exps) for e in exps]


def _expected_top_p(probs: dict[int, float], p: float) -> set[int]:
    """Smallest set of most likely tokens whose probability sums to at least p (Holtzman et al. 2020)."""
    kept, total = set(), 0.0
    for token, prob in sorted(probs.items(), key=lambda kv: -kv[1]):
        kept.add(token)
        total += prob
        if total >= p:
            break
    return kept


def _kept(logits: np.ndarray, **kwargs) -> set[int]:
    return {int(i) for i in filter_candidates(logits, _params(**kwargs))}


def test_defaults_are_llama_cpp_defaults():
    # ref: llama.cpp common/common.h, struct common_params_sampling
    assert SamplingParams() == SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                                              repeat_penalty=1.0, presence_penalty=0.0,
                                              frequency_penalty=0.0, repeat_last_n=64, seed=None,
                                              logit_bias=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        SamplingParams().temperature = 1.0


@pytest.mark.parametrize("seed", range(5))
def test_greedy_is_argmax(seed):
    logits = np.random.default_rng(seed).standard_normal(1000).astype(np.float32)
    sampler = Sampler(SamplingParams(temperature=0.0, seed=seed))
    assert sampler.sample(logits, []) == int(np.argmax(logits))


def test_greedy_takes_first_of_tied_maxima():
    logits = np.array([0.0, 2.0, 1.0, 2.0, 2.0], dtype=np.float32)
    assert Sampler(SamplingParams(temperature=-1.0)).sample(logits, []) == 1


@pytest.mark.parametrize("seed", range(5))
def test_top_k_one_is_greedy(seed):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal(262_144).astype(np.float32)
    logits[rng.integers(0, logits.size, 3)] = logits.max()  # tied maxima: first id wins, as argmax
    sampler = Sampler(SamplingParams(top_k=1, seed=seed))
    assert sampler.sample(logits, []) == int(np.argmax(logits))


def test_same_seed_same_choices_other_seed_differs():
    logits = np.zeros(50, dtype=np.float32)
    first, again, other = (Sampler(_params(seed=s)) for s in (7, 7, 8))
    seq = [first.sample(logits, []) for _ in range(100)]
    assert seq == [again.sample(logits, []) for _ in range(100)]
    assert seq != [other.sample(logits, []) for _ in range(100)]
    assert len(set(seq)) > 20


def test_sample_leaves_input_untouched():
    logits = LOGITS.copy()
    Sampler(SamplingParams(repeat_penalty=1.5, logit_bias={4: -5.0}, seed=0)).sample(logits, [4, 0, 0])
    assert np.array_equal(logits, LOGITS)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 20])
def test_top_k_keeps_k_largest(k):
    expected = {int(i) for i in np.argsort(-LOGITS)[:k]}
    assert _kept(LOGITS, top_k=k) == expected


@pytest.mark.parametrize("p", [0.3, 0.5, 0.65, 0.8, 0.9, 0.95, 0.975, 0.995, 1.0])
def test_top_p_keeps_smallest_prefix_reaching_p(p):
    assert _kept(LOGITS, top_p=p) == (_expected_top_p(PROBS, p) if p < 1.0 else set(PROBS))


@pytest.mark.parametrize("p", [0.5, 0.7, 0.9])
def test_top_p_renormalises_over_top_k_survivors(p):
    # llama.cpp applies top-k first and top-p over the softmax of what is left
    top3 = {t: PROBS[t] for t in (4, 0, 6)}
    renormalised = {t: q / sum(top3.values()) for t, q in top3.items()}
    assert _kept(LOGITS, top_k=3, top_p=p) == _expected_top_p(renormalised, p)


@pytest.mark.parametrize("min_p", [0.02, 0.12, 0.2, 0.3, 0.45, 0.6, 1.0])  # none on a boundary
def test_min_p_keeps_tokens_above_fraction_of_max(min_p):
    expected = {t for t, q in PROBS.items() if q >= min_p * max(PROBS.values())}
    assert _kept(LOGITS, min_p=min_p) == expected


def test_filters_compose_as_the_shortest_prefix():
    expected = _expected_top_p(PROBS, 0.9) & {t for t, q in PROBS.items() if q >= 0.2 * 0.40}
    assert _kept(LOGITS, top_k=6, top_p=0.9, min_p=0.2) == expected


@pytest.mark.parametrize("seed", range(3))
def test_whole_vocabulary_filters_match_definition(seed):
    # top_k off: the sampler searches a partial sort of a large vocabulary
    logits = (np.random.default_rng(seed).standard_normal(20_000) * 4).astype(np.float32)
    probs = np.exp(logits.astype(np.float64) - logits.max())
    probs /= probs.sum()
    for p in (0.5, 0.9, 0.99):
        order = np.argsort(-probs, kind="stable")
        n_keep = int(np.argmax(np.cumsum(probs[order]) >= p)) + 1
        assert _kept(logits, top_p=p) == {int(i) for i in order[:n_keep]}
    assert _kept(logits, min_p=0.01) == {int(i) for i in np.flatnonzero(probs >= 0.01 * probs.max())}


def test_filter_order_is_logit_descending():
    ids = filter_candidates(LOGITS, _params(top_k=5))
    assert [int(i) for i in ids] == sorted(PROBS, key=lambda t: -PROBS[t])[:5]


@pytest.mark.parametrize("k", [1, 37, 500, 0])
def test_ties_order_by_lower_id(k):
    # a total order (logit descending, then id) makes every cut reproducible, like argmax's first max
    logits = np.random.default_rng(11).integers(0, 10, 1000).astype(np.float32)
    expected = sorted(range(1000), key=lambda i: (-logits[i], i))[: k or 1000]
    params = _params(top_k=k, min_p=1e-9)  # min_p on: the whole-vocabulary path sorts too
    assert [int(i) for i in filter_candidates(logits, params)] == expected


def test_penalties_follow_definition():
    logits = np.array([2.0, -1.0, 0.5, 0.0, -3.0, 4.0, 1.5], dtype=np.float32)
    history = [5, 0, 1, 1, 2, 1, 3, 6]  # window of 7 drops the first token (5)
    params = SamplingParams(repeat_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.25,
                            repeat_last_n=7)
    expected = logits.astype(np.float64).tolist()
    window = history[-7:]
    for token in set(window):
        count = window.count(token)
        value = expected[token]
        value = value * 1.3 if value <= 0 else value / 1.3  # ref: llama.cpp penalties sampler
        expected[token] = value - count * 0.25 - 0.4  # ref: OpenAI API, frequency/presence penalties
    apply_penalties(logits, history, params)
    np.testing.assert_allclose(logits, expected, rtol=1e-6)
    assert logits[5] == np.float32(4.0)


@pytest.mark.parametrize("n_last, penalised", [(0, set()), (-1, {0, 1, 2}), (2, {1, 2})])
def test_penalty_window(n_last, penalised):
    logits = np.full(4, 2.0, dtype=np.float32)
    apply_penalties(logits, [0, 1, 2], SamplingParams(repeat_penalty=2.0, repeat_last_n=n_last))
    assert {i for i in range(4) if logits[i] == np.float32(1.0)} == penalised
    assert all(logits[i] == np.float32(2.0) for i in range(4) if i not in penalised)


def test_penalties_and_bias_move_greedy_choice():
    logits = np.array([1.0, 3.0, 2.9, 0.0], dtype=np.float32)
    assert Sampler(SamplingParams(temperature=0.0, repeat_penalty=1.1)).sample(logits, [1]) == 2
    assert Sampler(SamplingParams(temperature=0.0, logit_bias={1: -math.inf})).sample(logits, []) == 2
    assert Sampler(SamplingParams(temperature=0.0, logit_bias={3: 3.5})).sample(logits, []) == 3


def _chi_square(counts: np.ndarray, probs: list[float]) -> float:
    expected = np.asarray(probs) * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_draws_follow_softmax_with_temperature(temperature):
    logits = np.array([1.0, 0.2, -0.5, 2.0, 0.9, -1.5], dtype=np.float32)
    sampler = Sampler(_params(temperature=temperature, seed=1234))
    counts = np.bincount([sampler.sample(logits, []) for _ in range(10_000)], minlength=6)
    probs = _softmax([float(v) / temperature for v in logits])
    assert _chi_square(counts, probs) < CHI2_CRITICAL_001[5]


def test_draws_after_top_k_follow_renormalised_softmax():
    logits = np.array([1.0, 0.2, -0.5, 2.0, 0.9, -1.5], dtype=np.float32)
    sampler = Sampler(_params(top_k=3, temperature=0.8, seed=99))
    counts = np.bincount([sampler.sample(logits, []) for _ in range(10_000)], minlength=6)
    kept = [3, 0, 4]
    assert counts.sum() == counts[kept].sum()
    assert _chi_square(counts[kept], _softmax([float(logits[i]) / 0.8 for i in kept])) < CHI2_CRITICAL_001[2]


def test_draws_across_many_blocks_follow_softmax():
    # 3000 tokens span several of the draw's partial-sum blocks; compare mass per id range
    logits = (np.random.default_rng(5).standard_normal(3000) * 1.5).astype(np.float32)
    sampler = Sampler(_params(temperature=1.0, seed=2024))
    draws = np.array([sampler.sample(logits, []) for _ in range(10_000)])
    edges = np.linspace(0, 3000, 9).astype(int)
    counts = np.histogram(draws, bins=edges)[0]
    token_probs = _softmax([float(v) for v in logits])
    probs = [sum(token_probs[a:b]) for a, b in zip(edges[:-1], edges[1:])]
    assert _chi_square(counts, probs) < CHI2_CRITICAL_001[7]


def test_never_draws_masked_tokens():
    logits = np.full(2000, -math.inf, dtype=np.float32)
    allowed = [3, 700, 1999]
    logits[allowed] = 0.0
    sampler = Sampler(_params(seed=3))
    assert {sampler.sample(logits, []) for _ in range(3000)} == set(allowed)


@pytest.mark.parametrize("kwargs", [dict(top_k=5), dict(top_p=0.9), dict(min_p=0.1), dict(), dict(top_k=3, top_p=0.5)])
def test_drawn_logprobs_are_the_distribution_drawn_from(kwargs):
    """post_sampling_probs: after every filter and the temperature, the survivors' softmax, likeliest first."""
    sampler = Sampler(_params(temperature=0.7, seed=3, **kwargs))
    tok = sampler.sample(LOGITS, [])
    kept = [int(i) for i in filter_candidates(LOGITS.copy(), sampler.params)]
    probs = dict(zip(kept, _softmax([float(LOGITS[i]) / 0.7 for i in kept])))
    logprob, top = sampler.drawn_logprobs(tok, 4)
    assert tok in probs and math.exp(logprob) == pytest.approx(probs[tok])
    want = sorted(probs, key=lambda i: (-probs[i], i))[:4]
    assert [i for i, _ in top] == want
    assert [math.exp(lp) for _, lp in top] == pytest.approx([probs[i] for i in want])
    if len(kept) <= 4:
        assert sum(math.exp(lp) for _, lp in top) == pytest.approx(1.0)


def test_drawn_logprobs_of_greedy_are_the_choice_alone():
    sampler = Sampler(_params(temperature=0))
    tok = sampler.sample(LOGITS, [])
    assert sampler.drawn_logprobs(tok, 10) == (0.0, [(4, 0.0)])
