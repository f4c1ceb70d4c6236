"""What the gated delta-net families (Qwen3.5 dense and MoE, Qwen3-Next; tests/hybrid_deltanet.py) add to
the hybrid tests (test_hybrid_state.py runs their cases for logits against transformers and llama.cpp with
float32 K/V and for the state engine's equalities): the delta rule against transformers' own in float64,
float16 K/V against float64 beside llama.cpp, the v-head map tested by swapping it, LoRA on the new weights,
a one-row matrix stored 1-D, legacy qwen3next files (ssm_in), metadata refused."""
import dataclasses

import numpy as np
import pytest
import torch
from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

import llamay
from arch_models import build, convert, float64_logits, hf_logits, rel_diff, rewrite, sha256, token_ids
from conftest import CACHE, ROOT
from hybrid_deltanet import CASES
from llamay.gguf import GGUFWriter
from llamay.models import ModelFileError, UnsupportedModel, spec
from test_kernels_deltanet import EPS, inputs, meta, run

FLOOR = 2e-6  # float32 summation order: below it, nearer or further than llama.cpp is noise
LLAMACPP = ROOT / "tests" / "fixtures" / "llamacpp_hybrid_deltanet.npz"  # scripts/llamacpp_arch_logits.py

torch.set_num_threads(1)  # torch's threads and llamay's spin against each other on 2 cores


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    models = {name: (case, build(case)) for name, case in CASES.items()}
    return convert(models, tmp_path_factory.mktemp("deltanet-converted"), CACHE)


@pytest.fixture(scope="module", params=list(CASES))
def converted(request, files):
    """(name, HF model, token ids, GGUF path)."""
    name = request.param
    model = build(CASES[name])
    return name, model, token_ids(model.config.vocab_size, CASES[name].n_tokens), files[name]


def test_no_further_from_float64_than_llamacpp_with_f16_kv(converted):
    name, model, ids, path = converted
    llamacpp = np.load(LLAMACPP)
    assert sha256(path) == str(llamacpp[f"{name}/sha256"]), \
        f"{name}: not the file llama.cpp ran; rerun scripts/llamacpp_arch_logits.py --cases hybrid_deltanet"
    exact = float64_logits(model, ids)
    ours = llamay.load(path, threads=1, n_ctx=CASES[name].n_ctx).logits(ids)
    d_ours, d_llamacpp = rel_diff(ours, exact), rel_diff(llamacpp[f"{name}/f16kv"], exact)
    assert d_ours <= max(d_llamacpp, FLOOR), f"{name}: llamay {d_ours:.2e}, llama.cpp {d_llamacpp:.2e}"


def test_delta_rule_matches_transformers_in_float64():
    """The op (float32) against transformers' token-by-token rule in float64, with its k-head map (each
    k-head serves Hv / Hk consecutive v-heads) and its gates from b, a, A and dt_bias."""
    n, hk, hv, dk, dv = 40, 2, 4, 16, 16
    qkv, ba, a, dt = inputs(n, hk, hv, dk, dv)
    state = np.zeros((1, hv, dk, dv), np.float32)
    got = run(qkv, ba, a, dt, state, meta([n], [0]))
    x, (b, raw_a), A, dt = (torch.from_numpy(v).double() for v in (qkv, ba, a, dt))
    q, k = x[:, :hk * dk].reshape(1, n, hk, dk), x[:, hk * dk:2 * hk * dk].reshape(1, n, hk, dk)
    v = x[:, 2 * hk * dk:].reshape(1, n, hv, dv)
    g = A * torch.nn.functional.softplus(raw_a + dt)
    want, s = torch_recurrent_gated_delta_rule(q, k, v, g[None], torch.sigmoid(b)[None], output_final_state=True,
                                               use_qk_l2norm_in_kernel=True)
    assert rel_diff(got, want.reshape(n, -1).numpy()) < 1e-6
    assert rel_diff(state[0], s[0].numpy()) < 1e-6


def test_lora_on_the_delta_net_output_and_not_on_the_gated_query(files, tmp_path):
    """ssm_out is a layer's output projection ("o"), adapted like attention's; attn_q of the gated attention
    interleaves query and gate rows per head, so an adapter of it is refused."""
    case, path, rng = CASES["qwen35"], files["qwen35"], np.random.default_rng(3)

    def adapter(target: str, m: int, k: int):
        w = GGUFWriter()
        for key, value in (("general.architecture", "qwen35"), ("general.type", "adapter"), ("adapter.type", "lora")):
            w.add(key, value)
        w.add("adapter.lora.alpha", 4.0)
        w.add_tensor(f"{target}.lora_a", rng.standard_normal((4, k)).astype(np.float32))
        w.add_tensor(f"{target}.lora_b", rng.standard_normal((m, 4)).astype(np.float32))
        w.write(tmp_path / f"{target}.gguf")
        return [("x", str(tmp_path / f"{target}.gguf"), 1.0)]
    ids = token_ids(300, 8)
    plain = llamay.load(path, threads=1, kv="f32", n_ctx=case.n_ctx).logits(ids)
    adapted = llamay.load(path, threads=1, kv="f32", n_ctx=case.n_ctx, lora=adapter("blk.0.ssm_out.weight", 64, 64))
    assert rel_diff(adapted.logits(ids), plain) > 0.05
    with pytest.raises(UnsupportedModel, match="adapting blk.3.attn_q.weight is not supported"):
        llamay.load(path, threads=1, n_ctx=case.n_ctx, lora=adapter("blk.3.attn_q.weight", 128, 64))


@pytest.mark.parametrize("key,value,error,match", [
    ("attention.recurrent_layers", [True] * 7, ModelFileError, "one bool per layer"),
    ("ssm.time_step_rank", 3, ModelFileError, "multiple of ssm.group_count"),
    ("ssm.inner_size", 4 * 1024, ModelFileError, "heads of at most 512"),
])
def test_delta_net_metadata_that_does_not_fit_is_refused(files, tmp_path, key, value, error, match):
    def edit(meta, tensors):
        meta[f"qwen35.{key}"] = (value, *meta[f"qwen35.{key}"][1:])
    rewrite(files["qwen35"], tmp_path / "bad.gguf", edit)
    with pytest.raises(error, match=match):
        llamay.load(tmp_path / "bad.gguf", n_ctx=64)


def test_a_one_row_matrix_stored_1d_loads_alike(files, tmp_path):
    """llama-quantize writes the shared expert's gate [n_embd, 1] as [n_embd] (ggml's trailing 1 dropped):
    the same weights, the same bits."""
    path, case = files["qwen3next"], CASES["qwen3next"]

    def flat(meta, tensors):
        for name in [n for n in tensors if n.endswith("ffn_gate_inp_shexp.weight")]:
            tensors[name] = tensors[name].reshape(-1)
    rewrite(path, tmp_path / "flat.gguf", flat)
    ids = token_ids(300, 12)
    want = llamay.load(path, threads=1, n_ctx=case.n_ctx).logits(ids)
    assert np.array_equal(llamay.load(tmp_path / "flat.gguf", threads=1, n_ctx=case.n_ctx).logits(ids), want)


@pytest.mark.parametrize("name", ["qwen35", "qwen3next"])
def test_the_v_head_order_matters(files, monkeypatch, name):
    """Each family's files read with the other family's v-head -> k-head map move the logits far from
    transformers' (the cases have 2 k-heads to 4 v-heads): the map is tested, not assumed."""
    part = spec._delta_part

    def swapped(m, arch):
        return dataclasses.replace(part(m, arch), tiled=arch == "qwen3next")
    monkeypatch.setattr(spec, "_delta_part", swapped)
    model, case = build(CASES[name]), CASES[name]
    ids = token_ids(model.config.vocab_size, 24)
    got = llamay.load(files[name], threads=1, kv="f32", n_ctx=case.n_ctx).logits(ids)
    assert rel_diff(got, hf_logits(model, ids)) > 5e-2


def test_a_legacy_qwen3next_file_with_ssm_in_loads_alike(files, tmp_path):
    """Older qwen3next files hold ssm_in (rows per key head: q, k, then its value heads' v and z) instead of
    attn_qkv and attn_gate: the same rows, the same bits; a layer with neither is refused."""
    path, case = files["qwen3next"], CASES["qwen3next"]
    c = case.extra
    hk, dk, dv = c["linear_num_key_heads"], c["linear_key_head_dim"], c["linear_value_head_dim"]
    per = c["linear_num_value_heads"] // hk

    def legacy(meta, tensors):
        for qkv_name in [n for n in tensors if n.endswith("attn_qkv.weight")]:
            qkv, z = tensors.pop(qkv_name), tensors.pop(qkv_name.replace("attn_qkv", "attn_gate"))
            q, k, v = np.split(qkv, [hk * dk, 2 * hk * dk])
            groups = [(q[g * dk:(g + 1) * dk], k[g * dk:(g + 1) * dk], v[g * per * dv:(g + 1) * per * dv],
                       z[g * per * dv:(g + 1) * per * dv]) for g in range(hk)]
            tensors[qkv_name.replace("attn_qkv", "ssm_in")] = np.concatenate([r for grp in groups for r in grp])

    def neither(meta, tensors):
        del tensors["blk.0.ssm_in.weight"]
    rewrite(path, tmp_path / "legacy.gguf", legacy)
    ids = token_ids(300, 12)
    want = llamay.load(path, threads=1, n_ctx=case.n_ctx).logits(ids)
    assert np.array_equal(llamay.load(tmp_path / "legacy.gguf", threads=1, n_ctx=case.n_ctx).logits(ids), want)
    rewrite(tmp_path / "legacy.gguf", tmp_path / "neither.gguf", neither)
    with pytest.raises(ModelFileError, match="needs attn_qkv and attn_gate, or"):
        llamay.load(tmp_path / "neither.gguf", n_ctx=case.n_ctx)
