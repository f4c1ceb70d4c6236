"""Per-architecture logits against HF transformers on tiny random models (arch_models.py), each converted to
GGUF by llama.cpp's own convert_hf_to_gguf.py, so our reading of a family's tensor names, permutations,
fused layouts and norm conventions is checked against llama.cpp's writer.

Tolerances (relative to max |logit|), 1e-3 both ways:
- With K/V in float32 (kv="f32") against float32 transformers only summation order is left: ~1e-6.
- With the default float16 K/V, against transformers whose K/V are rounded to float16 after RoPE (what the
  pool holds), float32 summation order still matters through the rounding: an element that lands on the
  other side of a float16 rounding boundary moves by 2^-11. Transformers against itself with 1e-6 relative
  noise on K/V before the rounding differs by 3e-5 .. 3.3e-4 on these models; the engine measures
  3e-5 .. 2.9e-4.
What each family feature changes moves the logits by far more (test_*_are_exercised keep that true).
"""
import dataclasses
import re

import numpy as np
import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask
from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as softcap_eager
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward as sinks_eager

import llamay
from arch_models import (CASES, COMMON, build, check_every_way, convert, float64_logits, hf_logits, rel_diff,
                         rewrite, sha256, token_ids)
from conftest import CACHE, ROOT
from llamay.gguf import GGUFReader
from llamay.models import ModelFileError, UnsupportedModel

TIGHT = 1e-3
N_CTX = 64  # as llama.cpp ran (scripts/llamacpp_arch_logits.py); a case's own n_ctx where it runs longer
FLOOR = 2e-6  # float32 summation order: below it, nearer or further than llama.cpp is noise
LLAMACPP = ROOT / "tests" / "fixtures" / "llamacpp_arch_logits.npz"  # scripts/llamacpp_arch_logits.py made it
MOVES = 5e-2  # what each family feature must move the reference by: 50x the tolerance


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
def _f16_kv_sinks(module, query, key, value, *args, **kwargs):
    """gpt-oss's eager attention (SDPA has no sinks) on K/V rounded to float16."""
    return sinks_eager(module, query, key.half().float(), value.half().float(), *args, **kwargs)


AttentionInterface.register("llamay_f16_kv_softcap", _f16_kv_eager)
AttentionInterface.register("llamay_f16_kv_sinks", _f16_kv_sinks)
AttentionMaskInterface.register("llamay_f16_kv_sinks", eager_mask)
AttentionMaskInterface.register("llamay_f16_kv_softcap", eager_mask)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Every case's GGUF file, written by llama.cpp's convert_hf_to_gguf.py (one process for all)."""
    models = {name: (case, build(case)) for name, case in CASES.items()}
    models["llama-2l"] = (CASES["llama"], build(CASES["llama"], num_hidden_layers=2))
    models["qwen2-2l"] = (CASES["qwen2"], build(CASES["qwen2"], num_hidden_layers=2))
    return convert(models, tmp_path_factory.mktemp("llamacpp-converted"), CACHE)


@pytest.fixture(scope="module", params=list(CASES))
def converted(request, files):
    case = CASES[request.param]
    model = build(case)
    ids = token_ids(model.config.vocab_size, case.n_tokens)
    path = files[request.param]
    return request.param, model, llamay.load(path, threads=1, n_ctx=case.n_ctx).logits(ids), ids, path


def test_logits_match_transformers_with_f16_kv(converted):
    name, model, got, ids, _ = converted
    eager = ("llamay_f16_kv_softcap" if getattr(model.config, "attn_logit_softcapping", None)
             else "llamay_f16_kv_sinks" if model.config.model_type == "gpt_oss" else None)
    diff = rel_diff(got, hf_logits(model, ids, eager or "llamay_f16_kv"))
    assert diff < TIGHT, f"{name}: max |diff| / max |logit| = {diff:.2e}"


def test_every_way_of_computing_gives_the_same_bits(converted, tmp_path):
    """Per architecture, with ==: 1 thread (the fixture's logits) == 2 threads; prefill == token by token;
    batched with another sequence == alone; a fork, and a snapshot restored, continued == continuous."""
    name, _, want, ids, path = converted
    llm = llamay.load(path, threads=2, n_ctx=CASES[name].n_ctx)
    check_every_way(llm, ids, want, name)
    half = len(ids) // 2
    c = llm.create_context(ids[:half])
    assert np.array_equal(c.fork(1)[0].extend(ids[half:]), want[-1]), name
    c.save(tmp_path / "c.llamayctx")
    assert np.array_equal(llm.restore_context(tmp_path / "c.llamayctx").extend(ids[half:]), want[-1]), name


def test_logits_match_transformers_f32(converted):
    """With K/V kept in float32 too: within 1e-3 of max |logit| and the same argmax at every position."""
    name, model, _, ids, path = converted
    got, want = llamay.load(path, threads=1, kv="f32", n_ctx=CASES[name].n_ctx).logits(ids), hf_logits(model, ids)
    diff = rel_diff(got, want)
    assert diff < TIGHT, f"{name}: max |diff| / max |logit| = {diff:.2e}"
    assert (got.argmax(1) == want.argmax(1)).all(), name


@pytest.fixture(scope="module")
def llamacpp():
    return np.load(LLAMACPP)


@pytest.mark.parametrize("kv", ["f16", "f32"])
def test_no_further_from_float64_than_llamacpp(converted, llamacpp, kv):
    """On the same file, llamay's logits are no further from float64 transformers than llama.cpp's
    (recorded by llama-cpp-python with the same K/V type), or within float32 rounding of it."""
    name, model, got, ids, path = converted
    assert sha256(path) == str(llamacpp[f"{name}/sha256"]), \
        f"{name}: not the file llama.cpp ran; rerun scripts/llamacpp_arch_logits.py"
    exact = float64_logits(model, ids)
    ours = got if kv == "f16" else llamay.load(path, threads=1, kv="f32", n_ctx=CASES[name].n_ctx).logits(ids)
    d_ours = np.abs(ours - exact).max() / np.abs(exact).max()
    d_llamacpp = np.abs(llamacpp[f"{name}/{kv}kv"] - exact).max() / np.abs(exact).max()
    assert d_ours <= max(d_llamacpp, FLOOR), f"{name} {kv} K/V: llamay {d_ours:.2e}, llama.cpp {d_llamacpp:.2e}"


@pytest.mark.parametrize("change", [dict(sliding_window=1000), dict(sliding_window=7), dict(sliding_window=9),
                                    dict(rope_parameters={t: dict(rope_type="default", rope_theta=1e6) for t in
                                                         ("sliding_attention", "full_attention")}),
                                    dict(final_logit_softcapping=None)])
def test_gemma3_features_are_exercised(change):
    """Each gemma3 feature changes the reference by far more than the tolerance the engine meets."""
    case = CASES["gemma3-softcap"]
    ids = token_ids(COMMON["vocab_size"])
    ref = hf_logits(build(case), ids)
    assert rel_diff(hf_logits(build(case, **change), ids), ref) > MOVES


@pytest.mark.parametrize("name, change", [("gemma2", dict(attn_logit_softcapping=None)),
                                          ("gemma2", dict(final_logit_softcapping=None)),
                                          ("gemma2", dict(sliding_window=1000)),
                                          ("smollm3", dict(no_rope_layer_interval=1000)),
                                          ("granite", dict(embedding_multiplier=1.0)),
                                          ("granite", dict(attention_multiplier=0.25)),
                                          ("granite", dict(residual_multiplier=1.0)),
                                          ("granite", dict(logits_scaling=1.0)),
                                          ("qwen3moe", dict(num_experts_per_tok=1)),
                                          ("qwen3moe", dict(norm_topk_prob=False)),
                                          ("granitemoe", dict(num_experts_per_tok=2)),
                                          ("gpt-oss", dict(sliding_window=1000)),
                                          ("olmo3", dict(sliding_window=1000)),
                                          ("qwen2moe", dict(shared_expert_intermediate_size=16)),
                                          ("exaone4-swa", dict(sliding_window=1000)),
                                          ("cohere2", dict(sliding_window=1000)),
                                          ("cohere2", dict(logit_scale=1.0)),
                                          ("mistral3", dict(rope_parameters={
                                              **CASES["mistral3"].extra["rope_parameters"], "llama_4_scaling_beta": 0.0})),
                                          ("mistral3", dict(rope_parameters={
                                              **CASES["mistral3"].extra["rope_parameters"], "mscale_all_dim": 1.0})),
                                          ("gpt-oss", dict(num_experts_per_tok=3)),
                                          ("gemma4", dict(sliding_window=1000)),
                                          ("gemma4", dict(final_logit_softcapping=None)),
                                          ("gemma4-moe", dict(top_k_experts=1)),
                                          ("gpt-oss", dict(rope_parameters={**CASES["gpt-oss"].extra["rope_parameters"],
                                                                            "truncate": True})),
                                          ("gpt-oss-long", dict(sliding_window=1000)),
                                          ("gpt-oss-long", dict(num_experts_per_tok=2))])
def test_family_features_are_exercised(name, change):
    """Gemma 2's softcaps and window and SmolLM3's layers without RoPE each move the reference by far
    more than the tolerance the engine meets."""
    case = CASES[name]
    ids = token_ids(COMMON["vocab_size"], case.n_tokens)
    assert rel_diff(hf_logits(build(case, **change), ids), hf_logits(build(case), ids)) > MOVES


@pytest.mark.parametrize("name", ["llama3-rope", "llama-linear", "gemma3-linear", "gemma2-linear", "phi3", "gpt-oss",
                                  "gpt-oss-long", "qwen3-yarn", "olmo3-yarn", "mistral3"])
def test_rope_scaling_is_exercised(name):
    """Each RoPE scaling case moves the reference by far more than the tolerance the engine meets, and
    the band factors of Llama 3 are neither all 1 nor all `factor`."""
    case = CASES[name]
    ids = token_ids(COMMON["vocab_size"], case.n_tokens)
    unscaled = dataclasses.replace(case, extra={k: v for k, v in case.extra.items() if k != "rope_parameters"})
    assert rel_diff(hf_logits(build(case), ids), hf_logits(build(unscaled), ids)) > MOVES


@pytest.mark.parametrize("name, part", [("gemma4", "per_layer_projection"), ("gemma4", "layer_scalar"),
                                        ("gemma4-moe", "per_expert_scale"), ("gemma4-moe", "layer_scalar")])
def test_gemma4_parts_are_exercised(name, part):
    """Each part of Gemma 4 moves the reference far when it is neutralised: per-layer inputs (their
    projections zeroed), the layer scalars and the experts' scales (set to 1)."""
    case, ids = CASES[name], token_ids(COMMON["vocab_size"])
    model = build(case)
    ref = hf_logits(model, ids)
    with torch.no_grad():
        for n, t in list(model.named_parameters()) + list(model.named_buffers()):
            if part in n:
                t.fill_(0.0 if part == "per_layer_projection" else 1.0)
    assert rel_diff(hf_logits(model, ids), ref) > MOVES


def test_attention_sinks_are_exercised():
    """gpt-oss's sinks take a share of every softmax: sinks at -1e4 (no share) move the reference far."""
    case, ids = CASES["gpt-oss"], token_ids(COMMON["vocab_size"])
    model = build(case)
    ref = hf_logits(model, ids)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
    assert rel_diff(hf_logits(model, ids), ref) > MOVES


def test_gpt_oss_with_mxfp4_experts(files, tmp_path):
    """gpt-oss's experts in MXFP4 (gguf-py's quantizer, as the released files hold them) against
    transformers given the same, dequantized, expert weights."""
    from gguf import GGMLQuantizationType, quants
    model, deq = build(CASES["gpt-oss"]), {}

    def to_mxfp4(meta, tensors):
        for name in [n for n in tensors if n.endswith("_exps.weight")]:
            w = tensors[name]  # [n_expert, rows, k]
            raw = quants.quantize(w.reshape(-1, w.shape[-1]), GGMLQuantizationType.MXFP4)
            deq[name] = quants.dequantize(raw, GGMLQuantizationType.MXFP4).reshape(w.shape)
            tensors[name] = (raw.reshape(-1), "MXFP4", tuple(reversed(w.shape)))
    rewrite(files["gpt-oss"], tmp_path / "mxfp4.gguf", to_mxfp4)
    with torch.no_grad():  # the HF layout: gate_up_proj [E, d, 2 ff] with gate and up interleaved, down [E, ff, d]
        for i, layer in enumerate(model.model.layers):
            ex = layer.mlp.experts
            ex.gate_up_proj[..., ::2] = torch.from_numpy(deq[f"blk.{i}.ffn_gate_exps.weight"]).transpose(1, 2)
            ex.gate_up_proj[..., 1::2] = torch.from_numpy(deq[f"blk.{i}.ffn_up_exps.weight"]).transpose(1, 2)
            ex.down_proj[:] = torch.from_numpy(deq[f"blk.{i}.ffn_down_exps.weight"]).transpose(1, 2)
    ids = token_ids(300)
    llm = llamay.load(tmp_path / "mxfp4.gguf", threads=1, kv="f32", n_ctx=N_CTX)
    assert llm.decoder.layers[0].up_exps.qtype.name == "MXFP4"
    got, want = llm.logits(ids), hf_logits(model, ids)
    # The MXFP4 matmuls read 8-bit activations (as llama.cpp's do): ~1% per position on this model, and
    # where that flips a router's choice (position 1 here) far more, so the median is the measure
    per_position = np.abs(got - want).max(1) / np.abs(want).max()
    assert np.median(per_position) < 2e-2, np.round(per_position, 4)
    assert np.array_equal(llamay.load(tmp_path / "mxfp4.gguf", threads=2, kv="f32", n_ctx=N_CTX).logits(ids), got)
    ctx = llm.create_context(ids[:1])
    assert np.array_equal(np.stack([ctx.logits] + [ctx.extend([t]) for t in ids[1:]]), got)


def test_longrope_short_factors_within_the_original_context(files):
    """A context no longer than the original 16 takes LongRoPE's short factors, as transformers does for a
    sequence no longer than that; the long ones (the case's 24 tokens) would be far off there."""
    model, ids = build(CASES["phi3"]), token_ids(300)
    want = hf_logits(model, ids[:16])
    diff = rel_diff(llamay.load(files["phi3"], threads=1, kv="f32", n_ctx=16).logits(ids[:16]), want)
    assert diff < TIGHT, f"max |diff| / max |logit| = {diff:.2e}"
    assert rel_diff(hf_logits(model, ids)[:16], want) > MOVES


def test_a_snapshot_keeps_its_longrope_factors(files, tmp_path):
    """Keys rotated with LongRoPE's short factors are refused by a model running the long ones."""
    short = llamay.load(files["phi3"], threads=1, n_ctx=16)
    short.create_context(token_ids(300)[:8]).save(tmp_path / "s.llamayctx")
    assert np.array_equal(short.restore_context(tmp_path / "s.llamayctx").extend([5]),
                          short.create_context(token_ids(300)[:8] + [5]).logits)
    with pytest.raises(llamay.engine.SnapshotError, match="LongRoPE's short factors"):
        llamay.load(files["phi3"], threads=1, n_ctx=64).restore_context(tmp_path / "s.llamayctx")


def test_llama3_band_factors_are_exercised(files):
    """llama.cpp's converter wrote Llama 3's per-pair factors: neither all 1 nor all `factor`."""
    factors = GGUFReader(files["llama3-rope"]).array("rope_freqs.weight")
    assert factors.min() == 1.0 and factors.max() == 8.0 and ((factors > 1) & (factors < 8)).any()


def _edited(files, tmp_path, name, edit):
    rewrite(files[name], tmp_path / "edited.gguf", edit)
    return tmp_path / "edited.gguf"


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_rope_factors_out_of_range_refused(files, tmp_path, bad):
    def spoil(meta, tensors):
        tensors["rope_freqs.weight"][3] = bad
    with pytest.raises(ModelFileError, match="rope_freqs.weight must hold finite factors > 0"):
        llamay.load(_edited(files, tmp_path, "llama3-rope", spoil))


@pytest.mark.parametrize("arch", ["rwkv6", "deepseek2", "minimax-01", "plamo2", "not-an-arch"])
def test_unsupported_architecture_refused(files, tmp_path, arch):
    def rename(meta, tensors):
        meta["general.architecture"] = (arch, *meta["general.architecture"][1:])
    with pytest.raises(UnsupportedModel, match=f"architecture '{arch}' is not supported"):
        llamay.load(_edited(files, tmp_path, "llama-2l", rename))


@pytest.mark.parametrize("arch, name", [("llama", "blk.1.ffn_up.weight"), ("llama", "output_norm.weight"),
                                        ("qwen2", "blk.0.attn_k.bias")])
def test_missing_tensor_refused(files, tmp_path, arch, name):
    path = _edited(files, tmp_path, f"{arch}-2l", lambda meta, t: t.pop(name))
    with pytest.raises(UnsupportedModel, match=f"missing tensors.*'{re.escape(name)}'"):
        llamay.load(path)


@pytest.mark.parametrize("arch, name", [("llama", "blk.0.attn_q_norm.weight"), ("llama", "blk.1.attn_q.bias"),
                                        ("qwen2", "blk.2.attn_norm.weight")])
def test_unexpected_tensor_refused(files, tmp_path, arch, name):
    def add(meta, tensors):
        tensors[name] = np.ones(64, np.float32)
    with pytest.raises(UnsupportedModel, match=f"unexpected tensors.*'{re.escape(name)}'"):
        llamay.load(_edited(files, tmp_path, f"{arch}-2l", add))


@pytest.mark.parametrize("key, value, match", [
    ("gemma4.attention.shared_kv_layers", 7, "shared_kv_layers"),  # every layer: none would write K/V
    ("gemma4.attention.shared_kv_layers", 6, "no earlier layer of its kind"),  # layer 2 is the first full one
    ("gemma4.rope.dimension_count_swa", 17, "dimension_count_swa"),
    ("gemma4.attention.key_length_swa", 24, "value_length_swa"),  # 16 in the file
    ("gemma4.attention.value_length_swa", 24, "value_length_swa"),
])
def test_hostile_gemma4_metadata_refused(files, tmp_path, key, value, match):
    def spoil(meta, tensors):
        meta[key] = (value, 4, None)
    with pytest.raises(ModelFileError, match=match):
        llamay.load(_edited(files, tmp_path, "gemma4", spoil))


ONE_PER_ARCH = sorted({case.arch: name for name, case in reversed(list(CASES.items()))}.values())


@pytest.mark.parametrize("name", ONE_PER_ARCH)
def test_llamay_verify_passes(files, name, capsys):
    """`llamay verify` on each architecture's tiny file: every determinism check and KV type check ok."""
    from llamay.cli.main import main
    code = main(["verify", "-m", str(files[name]), "--tokens", "16"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("  ok  ") >= 8 and "FAIL" not in out, out


@pytest.mark.parametrize("key, value, match", [
    ("qwen3moe.expert_used_count", 9, "expert_used_count"),  # more than the 8 experts
    ("qwen3moe.expert_used_count", 0, "expert_used_count"),
    ("qwen3moe.expert_count", 4, "shape"),  # the tensors hold 8
    ("qwen3moe.rope.scaling.yarn_beta_fast", -1.0, "yarn_beta_fast"),
])
def test_hostile_moe_and_rope_metadata_refused(files, tmp_path, key, value, match):
    def spoil(meta, tensors):
        if key.endswith("yarn_beta_fast"):
            meta["qwen3moe.rope.scaling.type"] = ("yarn", 8, None)
            meta["qwen3moe.rope.scaling.factor"] = (4.0, 6, None)
            meta["qwen3moe.rope.scaling.original_context_length"] = (64, 4, None)
        meta[key] = (value, 6 if isinstance(value, float) else 4, None)
    with pytest.raises(ModelFileError, match=match):
        llamay.load(_edited(files, tmp_path, "qwen3moe", spoil))
