"""Decoder embeddings (Embedder.for_llm): final normed hidden states pooled; batched == one at a time,
the KV cache untouched, and a tiny random transformers Llama written as GGUF as the reference."""
import sys
from pathlib import Path

import numpy as np
import pytest

import llamay
from llamay.engine.embed import Embedder

sys.path.insert(0, str(Path(__file__).parent))
from arch_models import CASES, convert  # noqa: E402
from conftest import CACHE  # noqa: E402

TEXTS = ["Hello there, how are you?", "The capital of France is Paris.", "short", "def f(x): return x * 2"]


@pytest.fixture(scope="module")
def smollm(smollm_path):
    return llamay.load(smollm_path, threads=2, n_ctx=256)


@pytest.mark.model
@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_batched_equals_one_at_a_time(smollm, pooling):
    e = Embedder.for_llm(smollm, pooling=pooling)
    assert e.n_embd == smollm.spec.n_embd and e.pooling == pooling
    n_prefilled, contexts = smollm.context_store.n_prefilled, smollm.context_store.contexts()
    batched = e.embed(TEXTS)
    for text, b in zip(TEXTS, batched):
        assert np.array_equal(e.embed([text])[0], b)
        assert abs(np.linalg.norm(b) - 1.0) < 1e-5
    assert smollm.context_store.n_prefilled == n_prefilled and smollm.context_store.contexts() == contexts
    with pytest.raises(ValueError, match="257 tokens.*256"):
        e.embed([[1] * 257])


@pytest.mark.model
def test_default_pooling_is_last_for_a_decoder(smollm):
    e = Embedder.for_llm(smollm)
    assert e.pooling == "last"
    tokens = e.embed(TEXTS[:2], pooling="none", normalize=False)
    last = e.embed(TEXTS[:2], normalize=False)
    for t, v in zip(tokens, last):
        assert np.array_equal(t[-1], v)


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_tiny_llama_matches_transformers(tmp_path, pooling):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                                   num_hidden_layers=2, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # redraw: HF's init leaves norms at 1, which would hide a wrong norm
        for name, p in model.named_parameters():
            p.copy_(torch.rand(p.shape, generator=g) + 0.5 if name.endswith("norm.weight")
                    else torch.randn(p.shape, generator=g) * 0.15)
    model.eval()
    path = convert({"llama": (CASES["llama"], model)}, tmp_path, CACHE)["llama"]  # llama.cpp's converter
    e = Embedder.for_llm(llamay.load(path, threads=1), pooling=pooling)
    rng = np.random.default_rng(3)
    inputs = [rng.integers(0, 300, n).tolist() for n in (5, 17, 40)]
    for ids, v in zip(inputs, e.embed(inputs, normalize=False)):
        with torch.no_grad():
            h = model.model(torch.tensor([ids])).last_hidden_state[0].numpy()
        want = h.mean(0) if pooling == "mean" else h[-1]
        np.testing.assert_allclose(v, want, atol=1e-4)  # F32 weights and KV: float32 rounding only
