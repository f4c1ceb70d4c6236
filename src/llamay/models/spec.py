"""Reading a decoder file's metadata into an ArchSpec: one builder per family, each setting the family's parts
(parts.py) and whole-model fields (arch.py). A new architecture is one builder and a registry line."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..kernels.builder import MAX_EXPERTS_USED
from .arch import ArchSpec
from .checks import MAX_LAYERS, MAX_ROPE_DIMS, Meta, ModelFileError, UnsupportedModel, architecture
from .parts import FFN, Attention, DeltaNet, KimiDelta, Mamba, Mamba2, MoE, Norms, Rope, ShortConv
from .rope import yarn_mscale

MAX_CONV = 64  # taps of a recurrent layer's convolution
MAX_DELTA_HEAD = 512  # a delta net's head size (kernels' delta_rule)

__all__ = ["ArchSpec", "BUILDERS", "DECLINED", "ModelFileError", "UnsupportedModel", "arch_spec"]


def _heads(m: Meta, n_embd: int) -> tuple[int, int, int]:
    """(n_head, n_head_kv, head_dim): kv heads divide the heads; head_dim is key_length, else n_embd / n_head."""
    n_head = m.layer_int("attention.head_count")
    n_head_kv = m.layer_int("attention.head_count_kv", n_head)
    if n_head % n_head_kv:
        raise ModelFileError(f"{m.key('attention.head_count_kv')} = {n_head_kv} does not divide "
                             f"{m.key('attention.head_count')} = {n_head}")
    head_dim = m.int("attention.key_length", None)
    if head_dim is None:
        if n_embd % n_head:
            raise ModelFileError(f"{m.key('attention.head_count')} = {n_head} does not divide "
                                 f"{m.key('embedding_length')} = {n_embd} (and there is no key_length)")
        head_dim = n_embd // n_head
    value_length = m.int("attention.value_length", head_dim)
    if value_length != head_dim:
        raise ModelFileError(f"{m.key('attention.value_length')} = {value_length} differs from the key "
                             f"length {head_dim}")
    return n_head, n_head_kv, head_dim


def _n_rot(m: Meta, head_dim: int) -> int:
    n_rot = m.int("rope.dimension_count", head_dim)
    if n_rot > head_dim or n_rot % 2 or n_rot > MAX_ROPE_DIMS:
        size = (m.key("attention.key_length") if m.key("attention.key_length") in m.meta
                else f"{m.key('embedding_length')} / {m.key('attention.head_count')}")
        raise ModelFileError(f"{m.key('rope.dimension_count')} = {n_rot} must be even, at most "
                             f"{MAX_ROPE_DIMS} and at most the head size {head_dim} ({size})")
    return n_rot


def _common(meta: dict, arch: str, layer_norm: bool = False, per_layer: bool = False) -> dict:
    """What every family reads alike, by part: "model" (ArchSpec's sizes), "eps", "attn", "rope", "ffn".
    per_layer: KV heads and FFN widths may differ between layers (n_head_kv_layers, n_ff_layers; the
    scalar fields then hold layer 0's), and the FFN width is the dense one's, not the experts'."""
    m = Meta(meta, arch)
    n_ff_layers = n_head_kv_layers = ()
    if per_layer:
        ffs, kvs = m.layer_ints("feed_forward_length"), m.layer_ints("attention.head_count_kv", None)
        n_ff = ffs[0]
        n_ff_layers = ffs if len(set(ffs)) > 1 else ()
        n_head_kv_layers = kvs if kvs is not None and len(set(kvs)) > 1 else ()
        meta = {**meta, m.key("attention.head_count_kv"): kvs[0]} if kvs else meta
        m = Meta(meta, arch)
    else:
        n_ff = m.layer_int("expert_feed_forward_length", None) or m.layer_int("feed_forward_length")
    n_embd = m.int("embedding_length")
    n_head, n_head_kv, head_dim = _heads(m, n_embd)
    scaling, factor = m.str("rope.scaling.type", "none"), m.float("rope.scaling.factor", 1.0, lo_open=True)
    if scaling not in ("none", "linear", "yarn") and factor != 1.0:
        raise UnsupportedModel(f"{arch}: RoPE scaling '{scaling}' is not supported yet")
    yarn = {}
    if scaling == "yarn" and factor > 1.0:  # ref: llama.cpp's rope.scaling.* keys; YaRN's attention factor
        yarn = dict(yarn=factor, n_ctx_orig=m.int("rope.scaling.original_context_length"),
                    yarn_beta_fast=m.float("rope.scaling.yarn_beta_fast", 32.0, hi=1e4),
                    yarn_beta_slow=m.float("rope.scaling.yarn_beta_slow", 1.0, hi=1e4),
                    mscale=m.float("rope.scaling.yarn_attn_factor", yarn_mscale(
                        factor, m.float("rope.scaling.yarn_log_multiplier", 0.0, lo_open=False, hi=100.0)), hi=100.0))
    m.int("pooling_type", 0, lo=0, hi=4)  # a llama_pooling_type (encoder_spec.POOLING); Embedder.for_llm reads it
    return dict(
        model=dict(arch=arch, n_layer=m.int("block_count"), n_embd=n_embd, n_vocab=m.n_vocab(),
                   n_ctx_train=m.int("context_length")),
        eps=m.float("attention.layer_norm_epsilon" if layer_norm else "attention.layer_norm_rms_epsilon", hi=1.0),
        attn=dict(n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, n_head_kv_layers=n_head_kv_layers),
        rope=dict(base=m.float("rope.freq_base", 10000.0), n_rot=_n_rot(m, head_dim),
                  linear=factor if scaling == "linear" else 1.0, **yarn),
        ffn=dict(n_ff=n_ff, n_ff_layers=n_ff_layers),
    )


def _build(c: dict, neox: bool, norms: dict | None = None, attn: dict | None = None, rope: dict | None = None,
           ffn: dict | None = None, moe: MoE | None = None, **model) -> ArchSpec:
    """The spec from _common's reads and a family's settings of each part (the family's win over _common's);
    model: ArchSpec's whole-model fields."""
    rope = Rope(**{**c["rope"], "neox": neox, **(rope or {})})
    return ArchSpec(**c["model"], norms=Norms(c["eps"], **(norms or {})),
                    attn=Attention(**{**c["attn"], **(attn or {})}, rope=rope), ffn=FFN(**{**c["ffn"], **(ffn or {})}),
                    moe=moe, **model)


def _moe(m: Meta, n_ff: int, **settings) -> MoE:
    """The router's settings: expert_count experts of n_ff values, expert_used_count of them per token."""
    n_expert = m.int("expert_count")
    return MoE(n_expert=n_expert, n_used=m.int("expert_used_count", hi=min(n_expert, MAX_EXPERTS_USED)), n_ff=n_ff,
               **settings)


def _swa(m: Meta, n_layer: int, every: int) -> dict:
    """Attention's window and which layers slide: the sliding_window_pattern array (one bool per layer), or
    its integer n (every n-th layer global), else `every` (as llama.cpp's load_swa_pattern)."""
    window = m.int("attention.sliding_window", 0, lo=0)
    if not window:
        return {}
    pattern = m.meta.get(m.key("attention.sliding_window_pattern"))
    if isinstance(pattern, np.ndarray) or isinstance(pattern, (list, tuple)):
        layers = tuple(bool(x) for x in pattern)
        if len(layers) != n_layer:
            raise ModelFileError(f"{m.key('attention.sliding_window_pattern')} has {len(layers)} entries for "
                                 f"{n_layer} layers")
        return dict(window=window, sliding=layers)
    return dict(window=window, global_every=m.int("attention.sliding_window_pattern", every))


def _llama(meta: dict) -> ArchSpec:
    c = _common(meta, "llama")
    window = Meta(meta, "llama").int("attention.sliding_window", 0, lo=0)
    return _build(c, neox=False, attn=dict(window=window), rope=dict(freqs=True))


def _mistral3(meta: dict) -> ArchSpec:
    # ref: HF Ministral3Attention, llama.cpp mistral3.cpp: llama's blocks (q/k permuted as llama's), YaRN with
    # mscale_all_dim (rope.scaling.yarn_log_multiplier), and Llama 4's attention temperature on the queries
    # past the original context (attention.temperature_scale; the floor is the original context)
    c, m = _common(meta, "mistral3"), Meta(meta, "mistral3")
    temp = m.float("attention.temperature_scale", 0.0, lo_open=False, hi=100.0)
    n_ctx_orig = c["rope"].get("n_ctx_orig", 0)
    if temp and not n_ctx_orig:
        raise ModelFileError("mistral3: attention.temperature_scale needs rope.scaling.original_context_length")
    return _build(c, neox=False, attn=dict(temp_scale=temp, temp_floor=n_ctx_orig,
                                           scale=m.float("attention.scale", 0.0, lo_open=False)))


def _ernie4_5(meta: dict) -> ArchSpec:
    # ref: HF Ernie4_5Attention, llama.cpp ernie4-5.cpp: llama's blocks, RoPE over interleaved pairs (not
    # permuted by the converter: the model's own layout)
    return _build(_common(meta, "ernie4_5"), neox=False)


def _qwen2(meta: dict) -> ArchSpec:
    # ref: Qwen2 technical report; HF Qwen2Attention: bias on q/k/v projections only
    return _build(_common(meta, "qwen2"), neox=True, attn=dict(qkv_bias=True))


def _qwen3(meta: dict) -> ArchSpec:
    # ref: HF Qwen3Attention: no q/k/v bias; RMSNorm of every query and key head before RoPE
    return _build(_common(meta, "qwen3"), neox=True, attn=dict(qk_norm=True))


def _qwen2moe(meta: dict) -> ArchSpec:
    # ref: HF Qwen2MoeSparseMoeBlock, llama.cpp qwen2moe.cpp: softmax over all experts, top-k, not
    # renormalized; a shared expert of expert_shared_feed_forward_length scaled by sigmoid(x . gate) added
    c, m = _common(meta, "qwen2moe"), Meta(meta, "qwen2moe")
    n_ff = c["ffn"]["n_ff"]
    moe = _moe(m, n_ff)
    return _build(c, neox=True, attn=dict(qkv_bias=True),
                  moe=replace(moe, n_ff_shared=m.int("expert_shared_feed_forward_length", n_ff)))


def _qwen3moe(meta: dict) -> ArchSpec:
    # ref: HF Qwen3MoeSparseMoeBlock: softmax over all experts, top-k, weights renormalized (llama.cpp
    # always renormalizes for qwen3moe); experts of expert_feed_forward_length
    c, m = _common(meta, "qwen3moe"), Meta(meta, "qwen3moe")
    return _build(c, neox=True, attn=dict(qk_norm=True), moe=_moe(m, c["ffn"]["n_ff"], norm=True))


def _gpt_oss(meta: dict) -> ArchSpec:
    # ref: HF GptOssDecoderLayer, llama.cpp openai-moe.cpp: biases on q/k/v/o, attention sinks, even layers
    # slide, YaRN without truncation (GptOssConfig rope_parameters.truncate = False; llama.cpp truncates),
    # top-k of the router logits with a softmax over the k, experts with biases and the clamped SwiGLU
    c, m = _common(meta, "gpt-oss"), Meta(meta, "gpt-oss")
    return _build(c, neox=True, ffn=dict(act="swiglu_oai"), norms=dict(ffn_name="post_attention_norm"),
                  attn=dict(qkv_bias=True, o_bias=True, sinks=True,
                            window=m.int("attention.sliding_window", 0, lo=0), global_every=2),
                  rope=dict(yarn_truncate=False, base_local=m.float("rope.freq_base_swa", 0.0, lo_open=False)),
                  moe=_moe(m, c["ffn"]["n_ff"], gating="softmax_chosen", bias=True))


def _granite(meta: dict) -> ArchSpec:
    # ref: HF GraniteForCausalLM: embedding_multiplier, attention_multiplier (the query scale),
    # residual_multiplier, logits_scaling; llama.cpp's granite.* keys
    return _granite_family(meta, "granite")


def _granite_family(meta: dict, arch: str, moe: dict | None = None, rope: dict | None = None, **model) -> ArchSpec:
    """moe: the experts' settings besides their counts, or None for none; model: more ArchSpec fields."""
    c, m = _common(meta, arch), Meta(meta, arch)
    return _build(c, neox=False, embed_scale=m.float("embedding_scale", 1.0),
                  attn=dict(scale=m.float("attention.scale", 0.0, lo_open=False)), rope=rope,
                  residual_scale=m.float("residual_scale", 1.0), logit_scale=m.float("logit_scale", 1.0),
                  moe=None if moe is None else _moe(m, c["ffn"]["n_ff"], **moe), **model)


def _granitemoe(meta: dict) -> ArchSpec:
    # ref: HF GraniteMoeTopKGating: top-k of the router logits, softmax over those k (= softmax over all,
    # renormalized, as llama.cpp computes it); experts of feed_forward_length
    return _granite_family(meta, "granitemoe", moe=dict(gating="softmax_chosen"))


def _olmo2(meta: dict) -> ArchSpec:
    # ref: HF Olmo2DecoderLayer: no input norms, RMSNorm of each block's output before the residual add;
    # q and k normed over the whole projection before RoPE. OLMo 3 (the same GGUF architecture): sliding
    # layers (3 of every 4 by default), unscaled RoPE on them (llama.cpp: rope_freq_scale_train_swa = 1)
    c, m = _common(meta, "olmo2"), Meta(meta, "olmo2")
    return _build(c, neox=True, norms=dict(pre=False, post_attn=True, post_ffn=True),
                  attn=dict(qk_norm=True, qk_norm_full=True, **_swa(m, c["model"]["n_layer"], 4)),
                  rope=dict(scaled_local=False, base_local=m.float("rope.freq_base_swa", 0.0, lo_open=False)))


def _exaone4(meta: dict) -> ArchSpec:
    # ref: HF Exaone4DecoderLayer, llama.cpp exaone4.cpp: no input norms, RMSNorm of each block's output,
    # per-head q/k norms; with a sliding window (3 of every 4 layers, or the file's pattern) only the
    # sliding layers apply RoPE. llama.cpp applies the window only to 64-layer files (the 32B); llamay to any
    # file that sets attention.sliding_window, as transformers does
    c, m = _common(meta, "exaone4"), Meta(meta, "exaone4")
    return _build(c, neox=True, norms=dict(pre=False, post_attn=True, post_ffn=True),
                  attn=dict(qk_norm=True, **_swa(m, c["model"]["n_layer"], 4)), rope=dict(none_global=True))


def _cohere2(meta: dict) -> ArchSpec:
    # ref: HF Cohere2DecoderLayer, llama.cpp cohere2.cpp: one LayerNorm without bias feeding attention and
    # the FFN in parallel, 3 of every 4 layers sliding with RoPE over interleaved pairs and the full layers
    # without RoPE, logits multiplied by logit_scale, embeddings tied
    c, m = _common(meta, "cohere2", layer_norm=True), Meta(meta, "cohere2")
    return _build(c, neox=False, norms=dict(layer_norm=True, bias=False), parallel_block=True,
                  attn=_swa(m, c["model"]["n_layer"], 4), rope=dict(none_global=True),
                  logit_scale=1.0 / m.float("logit_scale", 1.0, hi=1e4))


def _gemma4(meta: dict) -> ArchSpec:
    # ref: HF Gemma4TextDecoderLayer, Gemma4TextAttention, Gemma4TextRouter; llama.cpp gemma4.cpp. Norms
    # scale by w (not 1 + w), queries unscaled (scaling 1), q/k per-head norms and values RMS-normed; sliding
    # layers (the file's pattern) of head key_length_swa with plain RoPE, full layers of head key_length
    # with proportional RoPE (rope_freqs: the unrotated pairs' factors are 1e30); per-layer KV heads and FFN
    # widths; the last shared_kv_layers layers reuse K/V; optional per-layer inputs and MoE beside the MLP
    m = Meta(meta, "gemma4")
    m.int("block_count", hi=MAX_LAYERS)
    c = _common(meta, "gemma4", per_layer=True)
    n_layer, swa = c["model"]["n_layer"], _swa(m, c["model"]["n_layer"], 6)
    head_swa = m.int("attention.key_length_swa", c["attn"]["head_dim"])
    if m.int("attention.value_length_swa", head_swa) != head_swa:
        raise ModelFileError(f"{m.key('attention.value_length_swa')} differs from the key length {head_swa}")
    n_rot_swa = m.int("rope.dimension_count_swa", head_swa)
    if n_rot_swa > min(head_swa, MAX_ROPE_DIMS) or n_rot_swa % 2:
        raise ModelFileError(f"{m.key('rope.dimension_count_swa')} = {n_rot_swa} must be even, at most "
                             f"{MAX_ROPE_DIMS} and at most {m.key('attention.key_length_swa')} = {head_swa}")
    moe = None
    if m.key("expert_count") in meta and m.int("expert_count"):
        moe = _moe(m, m.int("expert_feed_forward_length"), norm=True, beside_dense=True)
    spec = _build(
        c, neox=True, ffn=dict(act="gelu_tanh"), norms=dict(post_attn=True, post_ffn=True),
        embed_scale=math.sqrt(c["model"]["n_embd"]),
        attn=dict(qk_norm=True, scale=1.0, **swa, head_dim_local=head_swa, v_norm=True, v_from_k=True,
                  n_kv_shared=m.int("attention.shared_kv_layers", 0, lo=0, hi=n_layer - 1)),
        rope=dict(n_rot_local=n_rot_swa, base_local=m.float("rope.freq_base_swa", 10000.0), scaled_local=False,
                  freqs=True),
        final_logit_softcap=m.float("final_logit_softcapping", 0.0, lo_open=False),
        n_embd_per_layer=m.int("embedding_length_per_layer_input", 0, lo=0), layer_out_scale=True, moe=moe)
    for p in spec.layers:
        if p.kv_source < 0 or p.n_head_kv != spec.layers[p.kv_source].n_head_kv:
            raise ModelFileError(f"gemma4: layer {p.index} shares K/V, but no earlier layer of its kind has its "
                                 f"{p.n_head_kv} KV heads")
        if p.n_head % p.n_head_kv:
            raise ModelFileError(f"gemma4: {p.n_head_kv} KV heads of layer {p.index} do not divide "
                                 f"{p.n_head} heads")
    return spec


def _seed_oss(meta: dict) -> ArchSpec:
    # ref: HF SeedOssDecoderLayer, llama.cpp seed-oss.cpp: llama's blocks with q/k/v biases, NeoX RoPE, the
    # FFN norm named post_attention_norm
    c, m = _common(meta, "seed_oss"), Meta(meta, "seed_oss")
    return _build(c, neox=True, norms=dict(ffn_name="post_attention_norm"),
                  attn=dict(qkv_bias=True, scale=m.float("attention.scale", 0.0, lo_open=False)))


def _starcoder2(meta: dict) -> ArchSpec:
    # ref: HF Starcoder2DecoderLayer: LayerNorm with bias, biases on every projection, a plain
    # (not gated) gelu_pytorch_tanh MLP; llama.cpp LLM_FFN_GELU, LLM_FFN_SEQ
    c, m = _common(meta, "starcoder2", layer_norm=True), Meta(meta, "starcoder2")
    return _build(c, neox=True, ffn=dict(act="gelu_tanh", gated=False, bias=True), norms=dict(layer_norm=True),
                  attn=dict(qkv_bias=True, o_bias=True, window=m.int("attention.sliding_window", 0, lo=0)))


def _phi2(meta: dict) -> ArchSpec:
    # ref: HF PhiDecoderLayer: one LayerNorm feeding attention and MLP in parallel, gelu_new MLP, partial
    # rotary (rope.dimension_count), biases everywhere, lm_head with bias; llama.cpp phi2.cpp
    return _build(_common(meta, "phi2", layer_norm=True), neox=True, ffn=dict(act="gelu_tanh", gated=False, bias=True),
                  norms=dict(layer_norm=True), attn=dict(qkv_bias=True, o_bias=True), parallel_block=True,
                  output_bias=True)


def _phi3(meta: dict) -> ArchSpec:
    # ref: HF Phi3DecoderLayer, llama.cpp phi3.cpp: fused q/k/v and gate/up projections, NeoX RoPE over
    # rope.dimension_count dims (3/4 of the head in Phi-4-mini), LongRoPE factors and attention factor. The
    # sliding window is not applied, as llama.cpp does not (its phi3 SWA is disabled)
    c, m = _common(meta, "phi3"), Meta(meta, "phi3")
    if c["rope"].get("yarn"):
        raise UnsupportedModel("phi3: YaRN RoPE scaling is not supported (its LongRoPE is)")
    return _build(c, neox=True, attn=dict(fused_qkv=True), ffn=dict(fused_gate_up=True),
                  rope=dict(long_short=True,
                            n_ctx_orig=m.int("rope.scaling.original_context_length", c["model"]["n_ctx_train"]),
                            mscale=m.float("rope.scaling.attn_factor", 1.0, hi=100.0)))


def _gpt2(meta: dict) -> ArchSpec:
    # ref: HF GPT2Block, llama.cpp gpt2.cpp: learned positions, LayerNorm with bias, fused q/k/v with bias,
    # a plain gelu_new MLP, biases everywhere, no RoPE
    return _build(_common(meta, "gpt2", layer_norm=True), neox=False, ffn=dict(act="gelu_tanh", gated=False, bias=True),
                  norms=dict(layer_norm=True), attn=dict(qkv_bias=True, o_bias=True, fused_qkv=True),
                  learned_pos=True, rope=dict(none_every=1))


def _smollm3(meta: dict) -> ArchSpec:
    # ref: HF SmolLM3Config.no_rope_layer_interval = 4; llama.cpp n_no_rope_layer_step
    return _build(_common(meta, "smollm3"), neox=False, rope=dict(none_every=4))


def _gemma_query_scale(c: dict, n_layer_27b: int) -> float:
    """ref: gemma_pytorch config (as llama.cpp reads it): the 27B models scale queries by
    1 / sqrt(n_embd / n_head) (query_pre_attn_scalar), the others by 1 / sqrt(head_dim)."""
    n_embd, n_head = c["model"]["n_embd"], c["attn"]["n_head"]
    return 1.0 / math.sqrt(n_embd // n_head if c["model"]["n_layer"] == n_layer_27b else c["attn"]["head_dim"])


def _gemma(meta: dict) -> ArchSpec:
    # ref: HF GemmaDecoderLayer: pre-norms only, gelu_pytorch_tanh, embeddings scaled by sqrt(n_embd)
    c = _common(meta, "gemma")
    return _build(c, neox=True, ffn=dict(act="gelu_tanh"), embed_scale=math.sqrt(c["model"]["n_embd"]))


def _gemma2(meta: dict) -> ArchSpec:
    c, m = _common(meta, "gemma2"), Meta(meta, "gemma2")
    return _build(
        c, neox=True, ffn=dict(act="gelu_tanh"),
        norms=dict(post_attn=True, post_ffn=True),  # ref: HF Gemma2DecoderLayer
        embed_scale=math.sqrt(c["model"]["n_embd"]),
        attn=dict(scale=_gemma_query_scale(c, 46), window=m.int("attention.sliding_window", 4096, lo=0),
                  global_every=2,  # ref: HF Gemma2Config.layer_types: even layers slide
                  logit_softcap=m.float("attn_logit_softcapping", 0.0, lo_open=False)),
        rope=dict(base_local=m.float("rope.freq_base_swa", 0.0, lo_open=False)),  # llama.cpp: rope_freq_base_train_swa
        final_logit_softcap=m.float("final_logit_softcapping", 0.0, lo_open=False),
    )


def _gemma3(meta: dict) -> ArchSpec:
    c, m = _common(meta, "gemma3"), Meta(meta, "gemma3")
    return _build(
        c, neox=True,
        ffn=dict(act="gelu_tanh"),  # ref: Gemma 3 tech report; HF gelu_pytorch_tanh
        norms=dict(post_attn=True, post_ffn=True),  # ref: HF Gemma3DecoderLayer
        embed_scale=math.sqrt(c["model"]["n_embd"]),  # ref: HF Gemma3TextScaledWordEmbedding
        attn=dict(qk_norm=True, scale=_gemma_query_scale(c, 62),
                  window=m.int("attention.sliding_window", 0, lo=0),
                  global_every=6),  # ref: Gemma 3 tech report sec. 2: 5 local layers per global layer
        # ref: HF Gemma3TextConfig.rope_local_base_freq (10000); llama.cpp reads rope.freq_base_swa when set
        rope=dict(base_local=m.float("rope.freq_base_swa", 10000.0), scaled_local=False),
        final_logit_softcap=m.float("final_logit_softcapping", 0.0, lo_open=False),
    )


def _lfm2(meta: dict, arch: str = "lfm2") -> ArchSpec:
    # ref: HF Lfm2DecoderLayer, llama.cpp's lfm2 graph: a layer of attention_kv_heads 0 is a short convolution
    # (mixer_shortconv.py), the others attention with per-head q/k norms and NeoX RoPE; the final norm is
    # token_embd_norm
    m = Meta(meta, arch)
    kvs = m.layer_ints("attention.head_count_kv", lo=0)
    heads = {k for k in kvs if k}
    if len(heads) != 1:
        raise ModelFileError(f"{m.key('attention.head_count_kv')} {list(kvs)}: the attention layers' must be one "
                             "number, with at least one attention layer")
    mixers = tuple("attention" if k else "shortconv" for k in kvs)
    c = _common({**meta, m.key("attention.head_count_kv"): heads.pop()}, arch)
    return _build(c, neox=True, attn=dict(qk_norm=True), mixers=mixers,
                  recurrent=ShortConv(m.int("shortconv.l_cache", lo=2, hi=MAX_CONV)), output_norm="token_embd_norm")


def _delta_net(meta: dict, arch: str) -> ArchSpec:
    # ref: HF Qwen3NextDecoderLayer, Qwen3_5DecoderLayer; llama.cpp's qwen3next and qwen35 graphs: gated delta
    # nets (mixer_deltanet.py) between gated attention layers (per-head q/k norms, the output times
    # sigmoid(gate), NeoX RoPE over rope.dimension_count dims; qwen35's M-RoPE sections all take the token's
    # position in text, which is this RoPE); the FFN's norm is post_attention_norm; experts: softmax over
    # all, top k, renormalized, a shared expert behind a sigmoid gate
    c, m = _common(meta, arch), Meta(meta, arch)
    n_layer, moe = c["model"]["n_layer"], None
    if m.key("expert_count") in meta:
        moe = _moe(m, c["ffn"]["n_ff"], norm=True, n_ff_shared=m.int("expert_shared_feed_forward_length", 0, lo=0))
    return _build(c, neox=True, norms=dict(ffn_name="post_attention_norm"), attn=dict(qk_norm=True, out_gate=True),
                  moe=moe, mixers=_delta_layers(m, n_layer), recurrent=_delta_part(m, arch))


def _delta_layers(m: Meta, n_layer: int) -> tuple:
    """Each layer's mixer: attention.recurrent_layers (a bool per layer), else every full_attention_interval-th
    layer attention (default 4, as llama.cpp)."""
    flags = m.meta.get(m.key("attention.recurrent_layers"))
    if flags is None:
        every = m.int("full_attention_interval", 4)
        flags = [(i + 1) % every != 0 for i in range(n_layer)]
    elif not isinstance(flags, (np.ndarray, list, tuple)) or len(flags) != n_layer:
        raise ModelFileError(f"{m.key('attention.recurrent_layers')} must hold one bool per layer ({n_layer})")
    return tuple("deltanet" if bool(f) else "attention" for f in flags)


def _delta_part(m: Meta, arch: str) -> DeltaNet:
    hk, hv = m.int("ssm.group_count", hi=4096), m.int("ssm.time_step_rank", hi=4096)
    dk, inner = m.int("ssm.state_size", hi=MAX_DELTA_HEAD), m.int("ssm.inner_size")
    if hv % hk or inner % hv or not inner // hv <= MAX_DELTA_HEAD:
        raise ModelFileError(f"{arch}: ssm.time_step_rank {hv} value heads must be a multiple of ssm.group_count "
                             f"{hk} and divide ssm.inner_size {inner} into heads of at most {MAX_DELTA_HEAD}")
    return DeltaNet(d_conv=m.int("ssm.conv_kernel", lo=2, hi=MAX_CONV), n_k_heads=hk, n_v_heads=hv, d_k=dk,
                    d_v=inner // hv, tiled=arch != "qwen3next", fused_ba=arch == "qwen3next")


def _mamba2_part(m: Meta) -> Mamba2:
    """The ssm.* keys (llama.cpp's: time_step_rank is the head count)."""
    r = Mamba2(d_conv=m.int("ssm.conv_kernel", lo=2, hi=MAX_CONV), d_inner=m.int("ssm.inner_size"),
               d_state=m.int("ssm.state_size"), n_group=m.int("ssm.group_count", 1), n_head=m.int("ssm.time_step_rank"))
    if r.d_inner % r.n_head or r.n_head % r.n_group:
        raise ModelFileError(f"{m.arch}: ssm.time_step_rank {r.n_head} must divide ssm.inner_size {r.d_inner}, and "
                             f"ssm.group_count {r.n_group} divide it")
    return r


def _hybrid_heads(meta: dict, m: Meta) -> tuple[dict, tuple]:
    """The attention layers' KV heads (attention.head_count_kv per layer, 0 in the others) as one number in
    the metadata _common reads, and which layers attend."""
    kvs = m.layer_ints("attention.head_count_kv", lo=0)
    heads = {k for k in kvs if k}
    if len(heads) > 1:
        raise UnsupportedModel(f"{m.arch}: attention layers with different KV head counts {sorted(heads)}")
    return {**meta, m.key("attention.head_count_kv"): heads.pop() if heads else 1}, tuple(k > 0 for k in kvs)


def _mamba_part(m: Meta, norms: str | None = None) -> Mamba:
    """The ssm.* keys of a Mamba1 mixer (time_step_rank is dt's rank); norms: "rms" when ssm.dt_b_c_rms says
    so (Falcon-Mamba), unless the family says (Jamba: "weights")."""
    return Mamba(d_conv=m.int("ssm.conv_kernel", lo=2, hi=MAX_CONV), d_inner=m.int("ssm.inner_size"),
                 d_state=m.int("ssm.state_size"), dt_rank=m.int("ssm.time_step_rank"),
                 norms=norms or ("rms" if m.bool("ssm.dt_b_c_rms", False) else "none"))


def _ssm_only(meta: dict, arch: str, part) -> ArchSpec:
    # ref: HF MambaForCausalLM, FalconMambaForCausalLM, Mamba2ForCausalLM; llama.cpp mamba.cpp: every layer
    # x + mixer(rmsnorm(x)), no FFN, no attention; part(Meta) -> the mixer's settings (its name: arch's). The
    # attention and RoPE sizes _common reads are placeholders no layer uses (a head of n_embd rotated whole
    # refused every file wider than MAX_ROPE_DIMS: Mamba-1.4B and up)
    m = Meta(meta, arch)
    n = m.int("block_count", hi=MAX_LAYERS)
    c = _common({**meta, m.key("attention.head_count"): 1, m.key("feed_forward_length"): 1,
                 m.key("rope.dimension_count"): 2}, arch)
    return _build(c, neox=False, ffn=dict(n_ff=0), mixers=(arch,) * n, recurrent=part(m))


def _jamba(meta: dict, tensors=None) -> ArchSpec:
    # ref: HF JambaAttentionDecoderLayer / JambaMambaDecoderLayer, llama.cpp jamba.cpp: x + mixer(rmsnorm(x)),
    # then x + ffn(rmsnorm(x)); a layer of head_count_kv 0 is Mamba (dt, B and C normed by weights), the others
    # attention without RoPE; the FFN is a SiLU-gated MLP, or experts (softmax over all, the chosen k's weights
    # as they are) in the layers whose tensors have a router (llama.cpp's rule: no key says which), the
    # published pattern (every second layer from layer 1) when the tensors are not at hand
    m = Meta(meta, "jamba")
    meta, attends = _hybrid_heads(meta, m)
    n = len(attends)
    routed = (tuple(f"blk.{i}.ffn_gate_inp.weight" in tensors for i in range(n)) if tensors is not None
              else tuple(i % 2 == 1 for i in range(n)))
    c = _common(meta, "jamba")
    moe = _moe(m, c["ffn"]["n_ff"], layers=routed) if m.int("expert_count", 0, lo=0) and any(routed) else None
    return _build(c, neox=False, rope=dict(none_every=1), mixers=tuple("attention" if a else "mamba" for a in attends),
                  recurrent=_mamba_part(m, norms="weights"), moe=moe)


def _granitehybrid(meta: dict) -> ArchSpec:
    # ref: HF GraniteMoeHybridDecoderLayer, llama.cpp granite-hybrid.cpp: Granite's multipliers; a layer of
    # head_count_kv 0 is Mamba2, the others attention (RoPE only when rope.scaling.finetuned, as llama.cpp;
    # Granite 4 has none); then the dense MLP, or experts (softmax over the chosen) plus an ungated shared MLP
    m = Meta(meta, "granitehybrid")
    meta, attends = _hybrid_heads(meta, m)
    moe = (dict(gating="softmax_chosen", shared_gate=False, n_ff_shared=m.int("expert_shared_feed_forward_length", 0, lo=0))
           if m.int("expert_count", 0, lo=0) else None)
    return _granite_family(meta, "granitehybrid", moe=moe, rope=dict(none_every=0 if m.bool("rope.scaling.finetuned", True) else 1),
                           mixers=tuple("attention" if a else "mamba2" for a in attends), recurrent=_mamba2_part(m))


def _nemotron_h(meta: dict, arch: str = "nemotron_h") -> ArchSpec:
    # ref: HF NemotronHBlock, llama.cpp nemotron-h.cpp: each layer x + block(rmsnorm(x)) with one block: Mamba2,
    # attention without RoPE (head_count_kv > 0), or a squared-ReLU MLP (feed_forward_length > 0); the norm is
    # attn_norm in every layer; eps layer_norm_rms_epsilon, else layer_norm_epsilon. nemotron_h_moe (Nemotron 3
    # Nano): the MLP layers are experts (feed_forward_length their width), squared ReLU without a gate beside
    # a shared one, chosen by sigmoid score + expert bias, weighted by the score (renormalized), times
    # expert_weights_scale
    m = Meta(meta, arch)
    meta, attends = _hybrid_heads(meta, m)
    ffs = m.layer_ints("feed_forward_length", lo=0)
    if any(a and f for a, f in zip(attends, ffs)):
        raise ModelFileError(f"{arch}: a layer with both attention heads and a feed_forward_length")
    c = _common({**meta, m.key("feed_forward_length"): max(ffs) or 1}, arch,
                layer_norm=m.key("attention.layer_norm_rms_epsilon") not in meta)
    mixers = tuple("attention" if a else "none" if f else "mamba2" for a, f in zip(attends, ffs))
    moe = None
    if arch == "nemotron_h_moe":
        groups = m.int("expert_group_count", 1)
        if m.int("expert_group_used_count", groups, hi=groups) < groups:
            raise UnsupportedModel(f"{arch}: routing within {groups} groups of experts is not supported yet")
        moe = _moe(m, m.int("expert_feed_forward_length"), gating="sigmoid", norm=m.bool("expert_weights_norm", False),
                   select_bias=True, scale=m.float("expert_weights_scale", 1.0, hi=1e4), shared_gate=False,
                   n_ff_shared=m.int("expert_shared_feed_forward_length", 0, lo=0), layers=tuple(f > 0 for f in ffs))
        ffs = (0,) * len(ffs)  # no dense MLP: the experts are the FFN
    return _build(c, neox=False, ffn=dict(n_ff=max(ffs) or 1, n_ff_layers=ffs, act="relu_sqr", gated=False),
                  rope=dict(none_every=1), norms=dict(ffn_name="attn_norm"), mixers=mixers, recurrent=_mamba2_part(m),
                  moe=moe)


def _falcon_h1(meta: dict) -> ArchSpec:
    # ref: HF FalconH1DecoderLayer, llama.cpp falcon-h1.cpp: x + attention(n) + mamba2(n), n = rmsnorm(x)
    # (attn_norm), attention with NeoX RoPE; then a SiLU-gated FFN, its norm named blk.N.ffn_norm (no
    # .weight). The µP multipliers are inside the weights: the converter multiplies them in
    m = Meta(meta, "falcon-h1")
    n = m.int("block_count", hi=MAX_LAYERS)
    return _build(_common(meta, "falcon-h1"), neox=True, norms=dict(bare_ffn_norm=True), mixers=("mamba2",) * n,
                  recurrent=_mamba2_part(m), attention_beside=True)


def _lfm2moe(meta: dict) -> ArchSpec:
    # ref: HF Lfm2MoeSparseMoeBlock, llama.cpp's lfm2moe graph: LFM2's layers; after the first
    # leading_dense_block_count (dense MLPs), experts chosen by sigmoid score + expert bias, weighted by the
    # score, renormalized
    m = Meta(meta, "lfm2moe")
    m.int("expert_gating_func", 2, lo=2, hi=2)  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID only
    base = _lfm2(meta, "lfm2moe")
    moe = _moe(m, m.int("expert_feed_forward_length"), gating="sigmoid", norm=True, select_bias=True,
               n_dense_lead=m.int("leading_dense_block_count", 0, lo=0, hi=base.n_layer))
    return replace(base, ffn=replace(base.ffn, n_ff=m.int("feed_forward_length")), moe=moe)


def _kimi_linear(meta: dict) -> ArchSpec:
    # ref: HF KimiLinearDecoderLayer, llama.cpp kimi-linear.cpp: x + mixer(rmsnorm(x)), then x + ffn(rmsnorm(x));
    # a layer of head_count_kv 0 is Kimi's delta attention (mixer_kda.py), the others multi-head latent
    # attention without RoPE (latent.py; key_length is the absorbed head, kv_lora_rank + rope dims; the
    # queries' scale 1 / sqrt(key_length_mla)); the first leading_dense_block_count layers a SiLU MLP, the
    # others experts chosen by sigmoid score + expert bias, weighted by the score renormalized times
    # expert_weights_scale (llama.cpp's graph always renormalizes), beside an ungated shared expert
    m = Meta(meta, "kimi-linear")
    meta, attends = _hybrid_heads(meta, m)
    kv_lora, head = m.int("attention.kv_lora_rank"), m.int("attention.key_length")
    k_mla, rot = m.int("attention.key_length_mla"), m.int("rope.dimension_count", lo=0)
    if head != kv_lora + rot or not rot < k_mla:
        raise ModelFileError(f"kimi-linear: attention.key_length {head} must be kv_lora_rank {kv_lora} + "
                             f"rope.dimension_count {rot}, and key_length_mla {k_mla} more than the latter")
    c = _common({**meta, m.key("attention.value_length"): head}, "kimi-linear")
    c["ffn"]["n_ff"] = m.int("feed_forward_length")
    m.int("expert_gating_func", 2, lo=2, hi=2)  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID only
    groups = m.int("expert_group_count", 1)
    if m.int("expert_group_used_count", groups, hi=groups) < groups:
        raise UnsupportedModel(f"kimi-linear: routing within {groups} groups of experts is not supported yet")
    n_ff_exp = m.int("expert_feed_forward_length")
    moe = _moe(m, n_ff_exp, gating="sigmoid", norm=True, select_bias=True, shared_gate=False,
               scale=m.float("expert_weights_scale", 1.0, hi=1e4),
               n_dense_lead=m.int("leading_dense_block_count", 0, lo=0, hi=len(attends)),
               n_ff_shared=n_ff_exp * m.int("expert_shared_count", 0, lo=0, hi=64))
    kda = KimiDelta(d_conv=m.int("ssm.conv_kernel", lo=2, hi=MAX_CONV), n_head=c["attn"]["n_head"],
                    head_dim=m.int("kda.head_dim", hi=MAX_DELTA_HEAD))
    attn = dict(kv_lora=kv_lora, q_lora=m.int("attention.q_lora_rank", 0, lo=0), nope=k_mla - rot,
                v_dim=m.int("attention.value_length_mla"), scale=1.0 / math.sqrt(k_mla))
    return _build(c, neox=False, rope=dict(none_every=1), attn=attn, moe=moe, recurrent=kda,
                  mixers=tuple("attention" if a else "kda" for a in attends))


BUILDERS = {
    "llama": _llama,
    "smollm3": _smollm3,
    "granite": _granite,
    "granitemoe": _granitemoe,
    "olmo2": _olmo2,
    "seed_oss": _seed_oss,
    "exaone4": _exaone4,
    "cohere2": _cohere2,
    "starcoder2": _starcoder2,
    "phi2": _phi2,
    "phi3": _phi3,
    "gpt2": _gpt2,
    "mistral3": _mistral3,
    "ernie4_5": _ernie4_5,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen2moe": _qwen2moe,
    "qwen3moe": _qwen3moe,
    "gpt-oss": _gpt_oss,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "gemma4": _gemma4,
    "lfm2": _lfm2,
    "lfm2moe": _lfm2moe,
    "mamba": lambda meta: _ssm_only(meta, "mamba", _mamba_part),
    "jamba": _jamba,
    "mamba2": lambda meta: _ssm_only(meta, "mamba2", _mamba2_part),
    "granitehybrid": _granitehybrid,
    "nemotron_h": _nemotron_h,
    "nemotron_h_moe": lambda meta: _nemotron_h(meta, "nemotron_h_moe"),
    "falcon-h1": _falcon_h1,
    "kimi-linear": _kimi_linear,
    **{arch: (lambda meta, arch=arch: _delta_net(meta, arch)) for arch in ("qwen35", "qwen35moe", "qwen3next")},
}
_STATE = "its layers keep a recurrent or convolutional state besides the KV cache"
_LATENT = "multi-head latent attention with RoPE on part of each head (kimi-linear's, without, runs)"
DECLINED = {
    # names as llama.cpp's llama-arch.cpp writes them
    **{arch: "a state-space model: " + _STATE for arch in ("plamo2",)},
    **{arch: "a recurrent (RWKV) model: " + _STATE for arch in ("rwkv6", "rwkv7", "rwkv6qwen2", "arwkv7")},
    **{arch: "a hybrid of attention and linear attention: " + _STATE
       for arch in ("minimax-01",)},
    **{arch: _LATENT for arch in ("deepseek2", "deepseek3", "deepseek32")},  # DeepSeek V2/V3, Kimi K2
}


def arch_spec(meta: dict, tensors=None) -> ArchSpec:
    """The spec of a decoder file; hostile or self-contradicting metadata is ModelFileError. tensors: the file's
    tensor names, for the one family whose layers' kinds only its tensors say (jamba's experts)."""
    arch = architecture(meta)
    if arch in DECLINED:
        raise UnsupportedModel(f"architecture '{arch}' is not supported: {DECLINED[arch]}")
    if arch not in BUILDERS:
        raise UnsupportedModel(f"architecture '{arch}' is not supported "
                               f"(supported: {', '.join(sorted(BUILDERS))})")
    return _jamba(meta, tensors) if arch == "jamba" else BUILDERS[arch](meta)
