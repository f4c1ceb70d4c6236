"""The Python API on the default model, and the determinism invariants asserted with ==:
prefill == token-by-token decode, prefix reuse == cold prefill, 1 thread == 2 threads, every kernel path."""
import numpy as np
import pytest

import llamay
from llamay.engine import SamplingParams
from llamay.kernels import _lib

pytestmark = pytest.mark.model
TEXT = "The quick brown fox jumps over the lazy dog. 1, 2, 3"


@pytest.fixture(scope="module")
def llm(smollm_path):
    return llamay.load(smollm_path, threads=2, n_ctx=256)


def test_metadata_and_sizes(llm):
    assert llm.metadata["general.architecture"] == "llama"
    assert llm.n_vocab == 49152 and llm.n_ctx_train == 8192


def test_tokenize_detokenize_round_trip(llm):
    ids = llm.tokenize(TEXT)
    assert llm.detokenize(ids) == TEXT
    assert llm.tokenize("<|im_start|>", parse_special=True) == [1]
    assert llm.tokenize("<|im_start|>", parse_special=False) != [1]


def test_logits_shape_and_type(llm):
    ids = llm.tokenize(TEXT)
    out = llm.logits(ids)
    assert out.dtype == np.float32 and out.shape == (len(ids), llm.n_vocab)
    assert np.isfinite(out).all()


def test_prefill_equals_token_by_token_decode(llm):
    ids = llm.tokenize(TEXT)
    batched = llm.logits(ids)
    llm.reset()
    for i in range(1, len(ids) + 1):
        assert np.array_equal(llm.eval_last(ids[:i]), batched[i - 1]), i


def test_prefix_reuse_equals_cold_prefill(llm):
    ids = llm.tokenize(TEXT)
    cold = llm.logits(ids)[-1]
    llm.reset()
    llm.eval_last(ids[:7])  # leaves 7 tokens cached
    warm = llm.eval_last(ids)
    assert llm.stats.cached_tokens == 7
    assert np.array_equal(warm, cold)


def test_threads_and_kernel_paths_agree(llm, smollm_path):
    ids = llm.tokenize(TEXT)
    two = llm.logits(ids)
    one = llamay.load(smollm_path, threads=1, n_ctx=256).logits(ids)
    assert np.array_equal(one, two)
    for path, logits in _lib.each_path(lambda: llm.logits(ids)).items():
        assert np.array_equal(logits, two), path


def test_greedy_generation_is_argmax_and_stops(llm):
    ids = llm.tokenize("The capital of France is")
    text = "".join(llm.generate(ids, max_tokens=6, temperature=0))
    assert llm.stats.generated_tokens == 6 and llm.stats.finish_reason == "length"
    want = []
    for _ in range(6):
        want.append(int(llm.logits(ids + want)[-1].argmax()))
    assert llm.stats.token_ids == want
    assert text == llm.detokenize(want)


def test_seed_reproduces_and_stop_string_ends(llm):
    a = "".join(llm.generate("Once upon a time", max_tokens=12, seed=42, temperature=1.0))
    b = "".join(llm.generate("Once upon a time", max_tokens=12, seed=42, temperature=1.0))
    assert a == b
    word = a.split()[1] if len(a.split()) > 1 else a.strip()
    c = "".join(llm.generate("Once upon a time", max_tokens=12, seed=42, temperature=1.0, stop=[word]))
    assert c == a[:a.index(word)] and llm.stats.finish_reason == "stop"
    params = SamplingParams(temperature=1.0, seed=42)
    assert "".join(llm.generate("Once upon a time", max_tokens=12, params=params)) == a
    # keywords replace fields of the given params
    assert "".join(llm.generate("Once upon a time", max_tokens=12, params=SamplingParams(seed=1), seed=42,
                                temperature=1.0)) == a
    with pytest.raises(TypeError):
        llm.generate("Once upon a time", temprature=1.0)


def test_prompt_longer_than_context_is_an_error(llm):
    with pytest.raises(llamay.ContextOverflow):
        list(llm.generate([5] * 300, max_tokens=1))
    with pytest.raises(ValueError):
        llm.logits([llm.n_vocab + 5])
