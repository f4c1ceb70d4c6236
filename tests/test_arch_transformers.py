"""Per-architecture logits against HF transformers on tiny random models converted as llama.cpp would.

Tolerances (relative to max |logit|). The engine stores K and V in float16 (kv/pool.py), all else float32.
- Against transformers with K/V rounded to float16 after RoPE (what the pool holds), what is left is
  float32 summation order, ~1e-6 relative, but it matters through the rounding: an element that lands on
  the other side of a float16 rounding boundary moves by 2^-11. Transformers against itself with 1e-6
  relative noise on K/V before the rounding differs by 3e-5 .. 3.3e-4 on these models; the engine
  measures 3e-5 .. 2.9e-4. Bound: 1e-3.
- Against plain float32 transformers the float16 K/V rounding (unit roundoff 2^-11 = 4.9e-4 per element)
  dominates: measured 7.7e-4 .. 1.5e-3. Bound: 5e-3.
What each gemma3 feature changes (sliding window, its size +-1, local RoPE base, final softcap) moves the
logits by 0.6 .. 1.6, far above either bound: test_gemma3_features_are_exercised keeps that true.
"""
import dataclasses
import re

import numpy as np
import pytest
import torch
from transformers import (AttentionInterface, Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                          GemmaConfig, GemmaForCausalLM, GraniteConfig, GraniteForCausalLM, LlamaConfig,
                          LlamaForCausalLM, Olmo2Config, Olmo2ForCausalLM, PhiConfig, PhiForCausalLM,
                          Qwen2Config, Starcoder2Config,
                          Starcoder2ForCausalLM,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, SmolLM3Config, SmolLM3ForCausalLM)
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as softcap_eager

import hf_to_gguf
import llamay
from llamay.gguf import GGUFWriter
from llamay.models import ModelFileError, UnsupportedModel

TIGHT, LOOSE = 1e-3, 5e-3
N_TOKENS = 24
COMMON = dict(vocab_size=300, hidden_size=64, intermediate_size=128, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=256, attn_implementation="eager")


LLAMA3 = dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=64)
GEMMA3_LINEAR = dict(full_attention=dict(rope_type="linear", factor=8.0, rope_theta=1e6),
                     sliding_attention=dict(rope_type="default", rope_theta=10000.0))


@dataclasses.dataclass(frozen=True)
class Case:
    arch: str
    model: type
    config: type
    extra: dict


CASES = {
    "llama": Case("llama", LlamaForCausalLM, LlamaConfig, dict(num_hidden_layers=3, tie_word_embeddings=False)),
    "qwen2": Case("qwen2", Qwen2ForCausalLM, Qwen2Config, dict(num_hidden_layers=3, tie_word_embeddings=True)),
    # Qwen3: per-head RMSNorm of q and k before RoPE, no biases; head_dim 32 != hidden / heads (as in Qwen3)
    "qwen3": Case("qwen3", Qwen3ForCausalLM, Qwen3Config,
                  dict(num_hidden_layers=3, head_dim=32, tie_word_embeddings=True)),
    # 7 layers: llama.cpp (and llamay) fix Gemma 3's pattern at 5 sliding layers per global one, so layer 5
    # is global and layer 6 slides again; head_dim 32 != hidden / heads, as in Gemma 3 270M
    "gemma3": Case("gemma3", Gemma3ForCausalLM, Gemma3TextConfig,
                   dict(num_hidden_layers=7, head_dim=32, query_pre_attn_scalar=32, sliding_window=8)),
    # RoPE scaling: Llama 3.1's per-pair factors (original context 64: the 8 pairs of head_dim 16 fall in
    # all three of its bands), linear scaling; Gemma 3's linear scaling of its global layers only
    "llama3-rope": Case("llama", LlamaForCausalLM, LlamaConfig, dict(num_hidden_layers=3, rope_parameters=LLAMA3)),
    "llama-linear": Case("llama", LlamaForCausalLM, LlamaConfig,
                         dict(num_hidden_layers=3, rope_parameters=dict(rope_type="linear", factor=4.0,
                                                                      rope_theta=10000.0))),
    # a sliding-layer RoPE base other than Gemma 3's 10000, as rope.freq_base_swa
    "gemma3-swa-base": Case("gemma3", Gemma3ForCausalLM, Gemma3TextConfig,
                            dict(num_hidden_layers=7, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                                 rope_parameters=dict(full_attention=dict(rope_type="default", rope_theta=1e6),
                                                      sliding_attention=dict(rope_type="default",
                                                                             rope_theta=100.0)))),
    "gemma3-linear": Case("gemma3", Gemma3ForCausalLM, Gemma3TextConfig,
                          dict(num_hidden_layers=7, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                               rope_parameters=GEMMA3_LINEAR)),
    # SmolLM3: no RoPE on every fourth layer (5 layers: layer 3 has none)
    "smollm3": Case("smollm3", SmolLM3ForCausalLM, SmolLM3Config,
                    dict(num_hidden_layers=5, tie_word_embeddings=True, pad_token_id=None, bos_token_id=None,
                         eos_token_id=None)),
    "gemma": Case("gemma", GemmaForCausalLM, GemmaConfig, dict(num_hidden_layers=3, head_dim=32)),
    # Granite's four multipliers, none of them 1
    "granite": Case("granite", GraniteForCausalLM, GraniteConfig,
                    dict(num_hidden_layers=3, tie_word_embeddings=True, embedding_multiplier=3.0,
                         attention_multiplier=0.2, residual_multiplier=0.6, logits_scaling=2.5)),
    # StarCoder 2: LayerNorm with bias, biases on every projection, a plain GELU MLP
    "starcoder2": Case("starcoder2", Starcoder2ForCausalLM, Starcoder2Config,
                       dict(num_hidden_layers=3, pad_token_id=None, bos_token_id=None, eos_token_id=None)),
    # Phi-2: attention and MLP in parallel from one LayerNorm, half the head dims rotated, lm_head bias
    "phi2": Case("phi2", PhiForCausalLM, PhiConfig, dict(num_hidden_layers=3, intermediate_size=256,
                                                        num_key_value_heads=4, pad_token_id=None,
                                                        bos_token_id=None, eos_token_id=None)),
    # OLMo 2: norms after each block only, q/k normed over the whole projection
    "olmo2": Case("olmo2", Olmo2ForCausalLM, Olmo2Config, dict(num_hidden_layers=3, tie_word_embeddings=True,
                                                              pad_token_id=None, bos_token_id=None,
                                                              eos_token_id=None)),
    # Gemma 2: even layers slide, logits of attention and output softcapped (small caps, so they bite)
    "gemma2": Case("gemma2", Gemma2ForCausalLM, Gemma2Config,
                   dict(num_hidden_layers=4, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                        attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    # Gemma 2 scales every layer, sliding ones too (unlike Gemma 3)
    "gemma2-linear": Case("gemma2", Gemma2ForCausalLM, Gemma2Config,
                          dict(num_hidden_layers=4, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                               rope_parameters=dict(rope_type="linear", factor=4.0, rope_theta=10000.0))),
    "gemma3-softcap": Case("gemma3", Gemma3ForCausalLM, Gemma3TextConfig,
                           dict(num_hidden_layers=7, head_dim=32, query_pre_attn_scalar=32, sliding_window=8,
                                final_logit_softcapping=3.0)),
}


def _f16_kv_sdpa(module, query, key, value, *args, **kwargs):
    """SDPA on K/V rounded to float16, as llamay's page pool stores them."""
    return sdpa_attention_forward(module, query, key.half().float(), value.half().float(), *args, **kwargs)


# one torch thread (and one llamay thread below): torch's OpenMP pool and llamay's spin against each other
# on 2 cores, which made each tiny op ~30x slower; llamay's results do not depend on its thread count
torch.set_num_threads(1)
def _f16_kv_eager(module, query, key, value, *args, **kwargs):
    """Gemma 2's eager attention (SDPA has no logit softcap) on K/V rounded to float16."""
    return softcap_eager(module, query, key.half().float(), value.half().float(), *args, **kwargs)


AttentionInterface.register("llamay_f16_kv", _f16_kv_sdpa)
AttentionMaskInterface.register("llamay_f16_kv", sdpa_mask)
AttentionInterface.register("llamay_f16_kv_softcap", _f16_kv_eager)
AttentionMaskInterface.register("llamay_f16_kv_softcap", eager_mask)


def build(case: Case, **overrides):
    """A seeded random model. Every parameter is redrawn: HF's init leaves norms at 1 (0 for Gemma) and
    biases at 0, which would hide a wrong norm or bias; scale 0.15 gives attention far from uniform."""
    torch.manual_seed(0)
    model = case.model(case.config(**{**COMMON, **case.extra, **overrides}))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # HF Gemma*RMSNorm scales by (1 + w): same range for all
                p.copy_(torch.rand(p.shape, generator=g) + (-0.5 if case.arch.startswith("gemma") else 0.5))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * (0.1 if p.ndim == 1 else 0.15))
    return model.eval()


def hf_logits(model, ids, attn: str = "eager") -> np.ndarray:
    model.set_attn_implementation(attn)
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def token_ids(n_vocab: int) -> list[int]:
    return np.random.default_rng(2).integers(0, n_vocab, N_TOKENS).tolist()


def write_gguf(tmp_path, arch, model, edit=None):
    metadata, tensors = hf_to_gguf.convert(arch, model)
    if edit:
        edit(metadata, tensors)
    path = tmp_path / f"{arch}.gguf"
    hf_to_gguf.write(path, metadata, tensors)
    return path


@pytest.fixture(scope="module", params=list(CASES))
def converted(request, tmp_path_factory):
    case = CASES[request.param]
    model = build(case)
    path = write_gguf(tmp_path_factory.mktemp(request.param), case.arch, model)
    ids = token_ids(model.config.vocab_size)
    return request.param, model, llamay.load(path, threads=1).logits(ids), ids, path


def rel_diff(got: np.ndarray, ref: np.ndarray) -> float:
    assert got.shape == ref.shape and np.isfinite(got).all()
    return float(np.abs(got - ref).max() / np.abs(ref).max())


def test_logits_match_transformers_with_f16_kv(converted):
    name, model, got, ids, _ = converted
    softcap = getattr(model.config, "attn_logit_softcapping", None)
    diff = rel_diff(got, hf_logits(model, ids, "llamay_f16_kv_softcap" if softcap else "llamay_f16_kv"))
    assert diff < TIGHT, f"{name}: max |diff| / max |logit| = {diff:.2e}"


def test_every_way_of_computing_gives_the_same_bits(converted, tmp_path):
    """Per architecture, with ==: 1 thread (the fixture's logits) == 2 threads; prefill == token by token;
    batched with another sequence == alone; a fork, and a snapshot restored, continued == continuous."""
    name, _, want, ids, path = converted
    llm = llamay.load(path, threads=2)
    assert np.array_equal(llm.logits(ids), want), name
    ctx = llm.create_context(ids[:1])
    steps = np.stack([ctx.logits] + [ctx.extend([t]) for t in ids[1:]])
    assert np.array_equal(steps, want), name
    llm.reset()
    half = len(ids) // 2
    a, b = llm.create_context(ids[:half]), llm.create_context(ids[half:][::-1])

    def batched(runner):  # the rest of a beside the whole of b's reversed text, in one pass
        return runner.forward_batch([(a.id, ids[half:]), (b.id, ids[:half])], None)
    assert np.array_equal(llm.scheduler.do(batched)[:len(ids) - half], want[half:]), name
    c = llm.create_context(ids[:half])
    assert np.array_equal(c.fork(1)[0].extend(ids[half:]), want[-1]), name
    c.save(tmp_path / "c.llamayctx")
    assert np.array_equal(llm.restore_context(tmp_path / "c.llamayctx").extend(ids[half:]), want[-1]), name


def test_logits_match_transformers_f32(converted):
    name, model, got, ids, _ = converted
    diff = rel_diff(got, hf_logits(model, ids))
    assert diff < LOOSE, f"{name}: max |diff| / max |logit| = {diff:.2e}"


@pytest.mark.parametrize("change", [dict(sliding_window=1000), dict(sliding_window=7), dict(sliding_window=9),
                                    dict(rope_parameters={t: dict(rope_type="default", rope_theta=1e6) for t in
                                                         ("sliding_attention", "full_attention")}),
                                    dict(final_logit_softcapping=None)])
def test_gemma3_features_are_exercised(change):
    """Each gemma3 feature changes the reference by far more than the tolerance the engine meets."""
    case = CASES["gemma3-softcap"]
    ids = token_ids(COMMON["vocab_size"])
    ref = hf_logits(build(case), ids)
    assert rel_diff(hf_logits(build(case, **change), ids), ref) > 10 * LOOSE


@pytest.mark.parametrize("name, change", [("gemma2", dict(attn_logit_softcapping=None)),
                                          ("gemma2", dict(final_logit_softcapping=None)),
                                          ("gemma2", dict(sliding_window=1000)),
                                          ("smollm3", dict(no_rope_layer_interval=1000)),
                                          ("granite", dict(embedding_multiplier=1.0)),
                                          ("granite", dict(attention_multiplier=0.25)),
                                          ("granite", dict(residual_multiplier=1.0)),
                                          ("granite", dict(logits_scaling=1.0))])
def test_family_features_are_exercised(name, change):
    """Gemma 2's softcaps and window and SmolLM3's layers without RoPE each move the reference by far
    more than the tolerance the engine meets."""
    case, ids = CASES[name], token_ids(COMMON["vocab_size"])
    assert rel_diff(hf_logits(build(case, **change), ids), hf_logits(build(case), ids)) > 10 * LOOSE


@pytest.mark.parametrize("name", ["llama3-rope", "llama-linear", "gemma3-linear", "gemma2-linear"])
def test_rope_scaling_is_exercised(name):
    """Each RoPE scaling case moves the reference by far more than the tolerance the engine meets, and
    the band factors of Llama 3 are neither all 1 nor all `factor`."""
    ids = token_ids(COMMON["vocab_size"])
    case = CASES[name]
    unscaled = dataclasses.replace(case, extra={k: v for k, v in case.extra.items() if k != "rope_parameters"})
    assert rel_diff(hf_logits(build(case), ids), hf_logits(build(unscaled), ids)) > 10 * LOOSE
    factors = hf_to_gguf.llama3_factors(build(CASES["llama3-rope"]).config)
    assert factors.min() == 1.0 and factors.max() == 8.0 and ((factors > 1) & (factors < 8)).any()


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_rope_factors_out_of_range_refused(tmp_path, bad):
    def spoil(meta, tensors):
        tensors["rope_freqs.weight"][3] = bad
    path = write_gguf(tmp_path, "llama", build(CASES["llama3-rope"]), spoil)
    with pytest.raises(ModelFileError, match="rope_freqs.weight must hold finite factors > 0"):
        llamay.load(path)


@pytest.mark.parametrize("arch", ["mamba", "rwkv6", "deepseek2", "qwen35", "qwen3next", "lfm2", "falcon-h1",
                                  "not-an-arch"])
def test_unsupported_architecture_refused(tmp_path, arch):
    w = GGUFWriter()
    w.add("general.architecture", arch)
    for key, (value, vtype) in hf_to_gguf.gpt2_vocab(300).items():
        w.add(key, value, vtype=vtype)
    w.write(tmp_path / "m.gguf")
    with pytest.raises(UnsupportedModel, match=f"architecture '{arch}' is not supported"):
        llamay.load(tmp_path / "m.gguf")


@pytest.fixture(scope="module")
def small_models():
    return {arch: build(dataclasses.replace(CASES[arch], extra={**CASES[arch].extra, "num_hidden_layers": 2}))
            for arch in ("llama", "qwen2")}


@pytest.mark.parametrize("arch, name", [("llama", "blk.1.ffn_up.weight"), ("llama", "output_norm.weight"),
                                        ("qwen2", "blk.0.attn_k.bias")])
def test_missing_tensor_refused(tmp_path, small_models, arch, name):
    path = write_gguf(tmp_path, arch, small_models[arch], lambda meta, t: t.pop(name))
    with pytest.raises(UnsupportedModel, match=f"missing tensors.*'{re.escape(name)}'"):
        llamay.load(path)


@pytest.mark.parametrize("arch, name", [("llama", "blk.0.attn_q_norm.weight"), ("llama", "blk.1.attn_q.bias"),
                                        ("qwen2", "blk.2.attn_norm.weight")])
def test_unexpected_tensor_refused(tmp_path, small_models, arch, name):
    def add(meta, tensors):
        tensors[name] = np.ones(64, np.float32)
    path = write_gguf(tmp_path, arch, small_models[arch], add)
    with pytest.raises(UnsupportedModel, match=f"unexpected tensors.*'{re.escape(name)}'"):
        llamay.load(path)
