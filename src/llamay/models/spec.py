"""ArchSpec: the hyperparameters and behaviours of a decoder, read from GGUF metadata and frozen.

Fields name behaviours, not models. A new architecture is one builder function and a registry line."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..kernels.builder import MAX_EXPERTS_USED
from .checks import MAX_LAYERS, MAX_ROPE_DIMS, Meta, ModelFileError, UnsupportedModel, architecture
from .rope import yarn_mscale


@dataclass(frozen=True)
class ArchSpec:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    norm_eps: float
    rope_base: float
    n_rot: int
    rope_neox: bool  # pairs (i, i + n_rot/2) instead of (2i, 2i+1)
    act: str = "silu"  # FFN activation: "silu" | "gelu_tanh" | "swiglu_oai" (gpt-oss's clamped SwiGLU)
    gated_ffn: bool = True  # down(act(gate) * up); False: down(act(up)) (StarCoder 2, GPT-2)
    layer_norm: bool = False  # LayerNorm with bias instead of RMSNorm, every norm
    norm_bias: bool = True  # False: those LayerNorms have no bias (Cohere)
    o_bias: bool = False  # bias on the attention output projection
    ffn_bias: bool = False  # biases on the FFN projections
    parallel_block: bool = False  # attention and FFN both read one norm of x: x + (attn + ffn) (Phi-2)
    output_bias: bool = False  # bias on the output projection
    attn_scale: float = 0.0  # 0: 1 / sqrt(head_dim)
    qkv_bias: bool = False
    qk_norm: bool = False
    qk_norm_full: bool = False  # the q/k norms span the whole projection, not one head (OLMo 2)
    pre_norm: bool = True  # RMSNorm before attention and FFN (OLMo 2 has only the post norms)
    post_attn_norm: bool = False
    post_ffn_norm: bool = False
    embed_scale: float = 1.0
    sliding_window: int = 0  # 0: every layer attends to the full context
    sliding_pattern: int = 0  # n > 0: every n-th layer is global, the others slide; 0: all slide
    swa_layers: tuple = ()  # per layer, whether it slides (the file's sliding_window_pattern array); wins
    rope_base_local: float = 0.0  # RoPE base of sliding layers (0: rope_base)
    rope_linear: float = 1.0  # linear RoPE scaling: frequencies divided by it
    rope_linear_local: bool = True  # False: sliding layers take no RoPE scaling at all: linear, factors or
    # attention factor (Gemma 3, OLMo 3, as transformers)
    rope_freqs: bool = False  # the file may carry rope_freqs.weight: per-pair frequency factors (Llama 3)
    nope_every: int = 0  # n > 0: every n-th layer applies no RoPE at all (SmolLM3; 1: none does)
    nope_global: bool = False  # with a sliding window, only the sliding layers apply RoPE (EXAONE 4)
    attn_logit_softcap: float = 0.0
    final_logit_softcap: float = 0.0
    residual_scale: float = 1.0  # each block's output scaled before the residual add (Granite)
    logit_scale: float = 1.0  # logits divided by it (Granite)
    fused_qkv: bool = False  # one attn_qkv matrix (and bias): the q rows, then k, then v (Phi-3, GPT-2)
    fused_gate_up: bool = False  # ffn_up holds the gate rows, then the up rows (Phi-3)
    rope_long_short: bool = False  # the file may carry LongRoPE's rope_factors_long / _short (Phi-3); as
    # llama.cpp, the long ones when the context exceeds n_ctx_orig, else the short (fixed at load: cached
    # keys stay valid)
    n_ctx_orig: int = 0  # the context the model was pretrained at (before LongRoPE or YaRN extended it)
    rope_mscale: float = 1.0  # cos and sin scaled by it (LongRoPE's attention factor)
    learned_pos: bool = False  # position_embd rows added to the token embeddings (GPT-2)
    n_expert: int = 0  # > 0: the FFN is a mixture of n_expert experts of n_ff values each
    n_expert_used: int = 0  # experts each token takes (the largest router logits)
    moe_gating: str = "softmax"  # their weights: softmax over all experts, or 'softmax_chosen' (over the k)
    moe_norm: bool = False  # weights divided by their sum (Qwen3-MoE's norm_topk_prob)
    moe_bias: bool = False  # biases on the router and on every expert's projections (gpt-oss)
    n_ff_shared: int = 0  # > 0: a shared expert of this width beside the routed ones, gated by sigmoid(x . g)
    attn_sinks: bool = False  # a learned logit per head joins each softmax's denominator (gpt-oss)
    ffn_norm_name: str = "ffn_norm"  # the FFN input norm's GGUF name (gpt-oss: post_attention_norm)
    rope_yarn: float = 0.0  # > 0: YaRN scaling by this factor over an original context of n_ctx_orig
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_truncate: bool = True  # the ramp's ends rounded to whole pairs (llama.cpp; not gpt-oss)
    attn_temp_scale: float = 0.0  # > 0: queries times 1 + it * ln(1 + floor(pos / attn_temp_floor)) (Ministral 3)
    attn_temp_floor: int = 0
    # layers of different shapes (Gemma 4); the scalar fields above are the full-attention layers'
    head_dim_swa: int = 0  # > 0: the sliding layers' head size
    n_rot_swa: int = 0  # > 0: the sliding layers' rotated dims
    n_head_kv_layers: tuple = ()  # KV heads per layer, when they differ between layers
    n_ff_layers: tuple = ()  # FFN width per layer, when it differs (Gemma 4's double-wide MLPs)
    n_kv_shared: int = 0  # the last n layers compute no K/V: each attends to the K/V of the last earlier
    # layer of its kind (sliding or full), so the page pool holds only the other layers
    v_norm: bool = False  # values RMS-normed without a weight
    v_from_k: bool = False  # a layer without attn_v takes its values from the keys, before their norm
    n_embd_per_layer: int = 0  # > 0: per-layer inputs of this width, one slice of them added after each
    # layer through a gate and a projection (Gemma 4's E2B/E4B)
    layer_out_scale: bool = False  # the file may carry layer_output_scale: each layer's output times it
    moe_dense: bool = False  # the experts run beside a dense MLP, each with its own norms, their router
    # reading the unweighted RMSNorm of the residual times a scale vector (Gemma 4's 26B-A4B)
    n_ff_exp: int = 0  # > 0: the experts' width when it differs from the dense MLP's

    def layer_scale(self, il: int) -> float:
        """The query scale of layer il: attn_scale, else 1 / sqrt(its head size)."""
        return self.attn_scale or 1.0 / math.sqrt(self.layer_head_dim(il))

    def layer_window(self, il: int) -> int:
        """Sliding window of layer il in tokens (0 = full context)."""
        if not self.sliding_window:
            return 0
        if self.swa_layers:
            return self.sliding_window if self.swa_layers[il] else 0
        if self.sliding_pattern and il % self.sliding_pattern == self.sliding_pattern - 1:
            return 0
        return self.sliding_window

    def layer_rope_base(self, il: int) -> float:
        return self.rope_base_local if self.rope_base_local and self.layer_window(il) else self.rope_base

    def layer_rope_scaled(self, il: int) -> bool:
        """Whether layer il takes the RoPE scaling (linear, YaRN, frequency factors)."""
        return self.rope_linear_local or not self.layer_window(il)

    def layer_rope_linear(self, il: int) -> float:
        return self.rope_linear if self.layer_rope_scaled(il) else 1.0

    def long_short(self, n_ctx: int) -> str:
        """Which of LongRoPE's factor sets a context of n_ctx tokens takes: 'long' or 'short'."""
        return "long" if n_ctx > self.n_ctx_orig else "short"

    def layer_head_dim(self, il: int) -> int:
        return self.head_dim_swa if self.head_dim_swa and self.layer_window(il) else self.head_dim

    def layer_n_rot(self, il: int) -> int:
        return self.n_rot_swa if self.n_rot_swa and self.layer_window(il) else self.n_rot

    def layer_n_head_kv(self, il: int) -> int:
        return self.n_head_kv_layers[il] if self.n_head_kv_layers else self.n_head_kv

    def layer_n_ff(self, il: int) -> int:
        return self.n_ff_layers[il] if self.n_ff_layers else self.n_ff

    def kv_source(self, il: int) -> int:
        """The layer whose K/V layer il attends to: itself, or for the last n_kv_shared layers the last
        earlier layer of the same kind; -1 when there is none."""
        first = self.n_layer - self.n_kv_shared
        if il < first:
            return il
        kind = bool(self.layer_window(il))
        return next((j for j in range(first - 1, -1, -1) if bool(self.layer_window(j)) == kind), -1)

    @property
    def kv_layers(self) -> tuple[int, ...]:
        """The layers that write K/V, in order: the page pool's layers."""
        return tuple(range(self.n_layer - self.n_kv_shared))

    def kv_index(self, il: int) -> int:
        """The pool layer layer il attends over."""
        return self.kv_source(il)

    @property
    def kv_dims(self) -> tuple[tuple[int, int], ...]:
        """(KV heads, head size) of each pool layer."""
        return tuple((self.layer_n_head_kv(il), self.layer_head_dim(il)) for il in self.kv_layers)

    def layer_rope(self, il: int) -> bool:
        if self.nope_global and self.sliding_window and not self.layer_window(il):
            return False
        return not (self.nope_every and (il + 1) % self.nope_every == 0)


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
    """per_layer: KV heads and FFN widths may differ between layers (n_head_kv_layers, n_ff_layers; the
    scalar fields then hold layer 0's), and the FFN width is the dense one's, not the experts'."""
    m = Meta(meta, arch)
    extra = {}
    if per_layer:
        ffs, kvs = m.layer_ints("feed_forward_length"), m.layer_ints("attention.head_count_kv", None)
        n_ff = ffs[0]
        extra = dict(n_ff_layers=ffs if len(set(ffs)) > 1 else (),
                     n_head_kv_layers=kvs if kvs is not None and len(set(kvs)) > 1 else ())
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
        yarn = dict(rope_yarn=factor, n_ctx_orig=m.int("rope.scaling.original_context_length"),
                    yarn_beta_fast=m.float("rope.scaling.yarn_beta_fast", 32.0, hi=1e4),
                    yarn_beta_slow=m.float("rope.scaling.yarn_beta_slow", 1.0, hi=1e4),
                    rope_mscale=m.float("rope.scaling.yarn_attn_factor", yarn_mscale(
                        factor, m.float("rope.scaling.yarn_log_multiplier", 0.0, lo_open=False, hi=100.0)), hi=100.0))
    m.int("pooling_type", 0, lo=0, hi=4)  # a llama_pooling_type (encoder_spec.POOLING); Embedder.for_llm reads it
    return dict(
        arch=arch, n_layer=m.int("block_count"), n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
        head_dim=head_dim, n_ff=n_ff, n_vocab=m.n_vocab(),
        n_ctx_train=m.int("context_length"),
        norm_eps=m.float("attention.layer_norm_epsilon" if layer_norm else "attention.layer_norm_rms_epsilon",
                         hi=1.0),
        rope_base=m.float("rope.freq_base", 10000.0), n_rot=_n_rot(m, head_dim),
        rope_linear=factor if scaling == "linear" else 1.0, **yarn, **extra,
    )


def _llama(meta: dict) -> ArchSpec:
    c = _common(meta, "llama")
    window = Meta(meta, "llama").int("attention.sliding_window", 0, lo=0)
    return ArchSpec(**c, rope_neox=False, sliding_window=window, rope_freqs=True)


def _mistral3(meta: dict) -> ArchSpec:
    # ref: HF Ministral3Attention, llama.cpp mistral3.cpp: llama's blocks (q/k permuted as llama's), YaRN with
    # mscale_all_dim (rope.scaling.yarn_log_multiplier), and Llama 4's attention temperature on the queries
    # past the original context (attention.temperature_scale; the floor is the original context)
    c, m = _common(meta, "mistral3"), Meta(meta, "mistral3")
    temp = m.float("attention.temperature_scale", 0.0, lo_open=False, hi=100.0)
    if temp and not c.get("n_ctx_orig"):
        raise ModelFileError("mistral3: attention.temperature_scale needs rope.scaling.original_context_length")
    return ArchSpec(**c, rope_neox=False, attn_temp_scale=temp, attn_temp_floor=c.get("n_ctx_orig", 0),
                    attn_scale=m.float("attention.scale", 0.0, lo_open=False))


def _ernie4_5(meta: dict) -> ArchSpec:
    # ref: HF Ernie4_5Attention, llama.cpp ernie4-5.cpp: llama's blocks, RoPE over interleaved pairs (not
    # permuted by the converter: the model's own layout)
    return ArchSpec(**_common(meta, "ernie4_5"), rope_neox=False)


def _qwen2(meta: dict) -> ArchSpec:
    # ref: Qwen2 technical report; HF Qwen2Attention: bias on q/k/v projections only
    return ArchSpec(**_common(meta, "qwen2"), rope_neox=True, qkv_bias=True)


def _qwen3(meta: dict) -> ArchSpec:
    # ref: HF Qwen3Attention: no q/k/v bias; RMSNorm of every query and key head before RoPE
    return ArchSpec(**_common(meta, "qwen3"), rope_neox=True, qk_norm=True)


def _moe(m: Meta) -> dict:
    """The router's settings: expert_count experts, expert_used_count of them per token."""
    n_expert = m.int("expert_count")
    return dict(n_expert=n_expert, n_expert_used=m.int("expert_used_count", hi=min(n_expert, MAX_EXPERTS_USED)))


def _qwen2moe(meta: dict) -> ArchSpec:
    # ref: HF Qwen2MoeSparseMoeBlock, llama.cpp qwen2moe.cpp: softmax over all experts, top-k, not
    # renormalized; a shared expert of expert_shared_feed_forward_length scaled by sigmoid(x . gate) added
    c, m = _common(meta, "qwen2moe"), Meta(meta, "qwen2moe")
    return ArchSpec(**c, rope_neox=True, qkv_bias=True, **_moe(m),
                    n_ff_shared=m.int("expert_shared_feed_forward_length", c["n_ff"]))


def _qwen3moe(meta: dict) -> ArchSpec:
    # ref: HF Qwen3MoeSparseMoeBlock: softmax over all experts, top-k, weights renormalized (llama.cpp
    # always renormalizes for qwen3moe); experts of expert_feed_forward_length
    c, m = _common(meta, "qwen3moe"), Meta(meta, "qwen3moe")
    return ArchSpec(**c, rope_neox=True, qk_norm=True, **_moe(m), moe_norm=True)


def _gpt_oss(meta: dict) -> ArchSpec:
    # ref: HF GptOssDecoderLayer, llama.cpp openai-moe.cpp: biases on q/k/v/o, attention sinks, even layers
    # slide, YaRN without truncation (GptOssConfig rope_parameters.truncate = False; llama.cpp truncates),
    # top-k of the router logits with a softmax over the k, experts with biases and the clamped SwiGLU
    c, m = _common(meta, "gpt-oss"), Meta(meta, "gpt-oss")
    return ArchSpec(**{**c, "yarn_truncate": False}, rope_neox=True, act="swiglu_oai", qkv_bias=True, o_bias=True,
                    attn_sinks=True, ffn_norm_name="post_attention_norm",
                    sliding_window=m.int("attention.sliding_window", 0, lo=0), sliding_pattern=2,
                    rope_base_local=m.float("rope.freq_base_swa", 0.0, lo_open=False),
                    **_moe(m), moe_gating="softmax_chosen", moe_bias=True)


def _granite(meta: dict) -> ArchSpec:
    # ref: HF GraniteForCausalLM: embedding_multiplier, attention_multiplier (the query scale),
    # residual_multiplier, logits_scaling; llama.cpp's granite.* keys
    return _granite_family(meta, "granite")


def _granite_family(meta: dict, arch: str, **moe) -> ArchSpec:
    c, m = _common(meta, arch), Meta(meta, arch)
    return ArchSpec(**c, rope_neox=False, embed_scale=m.float("embedding_scale", 1.0),
                    attn_scale=m.float("attention.scale", 0.0, lo_open=False),
                    residual_scale=m.float("residual_scale", 1.0), logit_scale=m.float("logit_scale", 1.0), **moe)


def _granitemoe(meta: dict) -> ArchSpec:
    # ref: HF GraniteMoeTopKGating: top-k of the router logits, softmax over those k (= softmax over all,
    # renormalized, as llama.cpp computes it); experts of feed_forward_length
    return _granite_family(meta, "granitemoe", **_moe(Meta(meta, "granitemoe")), moe_gating="softmax_chosen")


def _swa(m: Meta, n_layer: int, every: int) -> dict:
    """attention.sliding_window, and which layers slide: the sliding_window_pattern array (one bool per
    layer), or its integer n (every n-th layer full), else `every` (as llama.cpp's load_swa_pattern)."""
    window = m.int("attention.sliding_window", 0, lo=0)
    if not window:
        return {}
    pattern = m.meta.get(m.key("attention.sliding_window_pattern"))
    if isinstance(pattern, np.ndarray) or isinstance(pattern, (list, tuple)):
        layers = tuple(bool(x) for x in pattern)
        if len(layers) != n_layer:
            raise ModelFileError(f"{m.key('attention.sliding_window_pattern')} has {len(layers)} entries for "
                                 f"{n_layer} layers")
        return dict(sliding_window=window, swa_layers=layers)
    return dict(sliding_window=window, sliding_pattern=m.int("attention.sliding_window_pattern", every))


def _olmo2(meta: dict) -> ArchSpec:
    # ref: HF Olmo2DecoderLayer: no input norms, RMSNorm of each block's output before the residual add;
    # q and k normed over the whole projection before RoPE. OLMo 3 (the same GGUF architecture): sliding
    # layers (3 of every 4 by default), unscaled RoPE on them (llama.cpp: rope_freq_scale_train_swa = 1)
    c, m = _common(meta, "olmo2"), Meta(meta, "olmo2")
    return ArchSpec(**c, rope_neox=True, pre_norm=False, qk_norm=True, qk_norm_full=True,
                    post_attn_norm=True, post_ffn_norm=True, **_swa(m, c["n_layer"], 4), rope_linear_local=False,
                    rope_base_local=m.float("rope.freq_base_swa", 0.0, lo_open=False))


def _exaone4(meta: dict) -> ArchSpec:
    # ref: HF Exaone4DecoderLayer, llama.cpp exaone4.cpp: no input norms, RMSNorm of each block's output,
    # per-head q/k norms; with a sliding window (3 of every 4 layers, or the file's pattern) only the
    # sliding layers apply RoPE. llama.cpp applies the window only to 64-layer files (the 32B); llamay to any
    # file that sets attention.sliding_window, as transformers does
    c, m = _common(meta, "exaone4"), Meta(meta, "exaone4")
    return ArchSpec(**c, rope_neox=True, pre_norm=False, qk_norm=True, post_attn_norm=True, post_ffn_norm=True,
                    **_swa(m, c["n_layer"], 4), nope_global=True)


def _cohere2(meta: dict) -> ArchSpec:
    # ref: HF Cohere2DecoderLayer, llama.cpp cohere2.cpp: one LayerNorm without bias feeding attention and
    # the FFN in parallel, 3 of every 4 layers sliding with RoPE over interleaved pairs and the full layers
    # without RoPE, logits multiplied by logit_scale, embeddings tied
    c, m = _common(meta, "cohere2", layer_norm=True), Meta(meta, "cohere2")
    return ArchSpec(**c, rope_neox=False, layer_norm=True, norm_bias=False, parallel_block=True,
                    **_swa(m, c["n_layer"], 4), nope_global=True,
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
    n_layer, swa = c["n_layer"], _swa(m, c["n_layer"], 6)
    head_swa = m.int("attention.key_length_swa", c["head_dim"])
    if m.int("attention.value_length_swa", head_swa) != head_swa:
        raise ModelFileError(f"{m.key('attention.value_length_swa')} differs from the key length {head_swa}")
    n_rot_swa = m.int("rope.dimension_count_swa", head_swa)
    if n_rot_swa > min(head_swa, MAX_ROPE_DIMS) or n_rot_swa % 2:
        raise ModelFileError(f"{m.key('rope.dimension_count_swa')} = {n_rot_swa} must be even, at most "
                             f"{MAX_ROPE_DIMS} and at most {m.key('attention.key_length_swa')} = {head_swa}")
    moe = _moe(m) if m.key("expert_count") in meta and m.int("expert_count") else {}
    if moe:
        moe.update(moe_dense=True, moe_norm=True, n_ff_exp=m.int("expert_feed_forward_length"))
    spec = ArchSpec(
        **c, rope_neox=True, act="gelu_tanh", qk_norm=True, post_attn_norm=True, post_ffn_norm=True,
        embed_scale=math.sqrt(c["n_embd"]), attn_scale=1.0, **swa, head_dim_swa=head_swa, n_rot_swa=n_rot_swa,
        rope_base_local=m.float("rope.freq_base_swa", 10000.0), rope_linear_local=False, rope_freqs=True,
        final_logit_softcap=m.float("final_logit_softcapping", 0.0, lo_open=False),
        n_kv_shared=m.int("attention.shared_kv_layers", 0, lo=0, hi=n_layer - 1), v_norm=True, v_from_k=True,
        n_embd_per_layer=m.int("embedding_length_per_layer_input", 0, lo=0), layer_out_scale=True, **moe)
    for il in range(n_layer):
        src = spec.kv_source(il)
        if src < 0 or spec.layer_n_head_kv(il) != spec.layer_n_head_kv(src):
            raise ModelFileError(f"gemma4: layer {il} shares K/V, but no earlier layer of its kind has its "
                                 f"{spec.layer_n_head_kv(il)} KV heads")
        if c["n_head"] % spec.layer_n_head_kv(il):
            raise ModelFileError(f"gemma4: {spec.layer_n_head_kv(il)} KV heads of layer {il} do not divide "
                                 f"{c['n_head']} heads")
    return spec


def _seed_oss(meta: dict) -> ArchSpec:
    # ref: HF SeedOssDecoderLayer, llama.cpp seed-oss.cpp: llama's blocks with q/k/v biases, NeoX RoPE, the
    # FFN norm named post_attention_norm
    c, m = _common(meta, "seed_oss"), Meta(meta, "seed_oss")
    return ArchSpec(**c, rope_neox=True, qkv_bias=True, ffn_norm_name="post_attention_norm",
                    attn_scale=m.float("attention.scale", 0.0, lo_open=False))


def _starcoder2(meta: dict) -> ArchSpec:
    # ref: HF Starcoder2DecoderLayer: LayerNorm with bias, biases on every projection, a plain
    # (not gated) gelu_pytorch_tanh MLP; llama.cpp LLM_FFN_GELU, LLM_FFN_SEQ
    c, m = _common(meta, "starcoder2", layer_norm=True), Meta(meta, "starcoder2")
    return ArchSpec(**c, rope_neox=True, act="gelu_tanh", gated_ffn=False, layer_norm=True, qkv_bias=True,
                    o_bias=True, ffn_bias=True, sliding_window=m.int("attention.sliding_window", 0, lo=0))


def _phi2(meta: dict) -> ArchSpec:
    # ref: HF PhiDecoderLayer: one LayerNorm feeding attention and MLP in parallel, gelu_new MLP, partial
    # rotary (rope.dimension_count), biases everywhere, lm_head with bias; llama.cpp phi2.cpp
    c = _common(meta, "phi2", layer_norm=True)
    return ArchSpec(**c, rope_neox=True, act="gelu_tanh", gated_ffn=False, layer_norm=True, qkv_bias=True,
                    o_bias=True, ffn_bias=True, parallel_block=True, output_bias=True)


def _phi3(meta: dict) -> ArchSpec:
    # ref: HF Phi3DecoderLayer, llama.cpp phi3.cpp: fused q/k/v and gate/up projections, NeoX RoPE over
    # rope.dimension_count dims (3/4 of the head in Phi-4-mini), LongRoPE factors and attention factor. The
    # sliding window is not applied, as llama.cpp does not (its phi3 SWA is disabled)
    c, m = _common(meta, "phi3"), Meta(meta, "phi3")
    if c.get("rope_yarn"):
        raise UnsupportedModel("phi3: YaRN RoPE scaling is not supported (its LongRoPE is)")
    return ArchSpec(**c, rope_neox=True, fused_qkv=True, fused_gate_up=True, rope_long_short=True,
                    n_ctx_orig=m.int("rope.scaling.original_context_length", c["n_ctx_train"]),
                    rope_mscale=m.float("rope.scaling.attn_factor", 1.0, hi=100.0))


def _gpt2(meta: dict) -> ArchSpec:
    # ref: HF GPT2Block, llama.cpp gpt2.cpp: learned positions, LayerNorm with bias, fused q/k/v with bias,
    # a plain gelu_new MLP, biases everywhere, no RoPE
    c = _common(meta, "gpt2", layer_norm=True)
    return ArchSpec(**c, rope_neox=False, act="gelu_tanh", gated_ffn=False, layer_norm=True, qkv_bias=True,
                    o_bias=True, ffn_bias=True, fused_qkv=True, learned_pos=True, nope_every=1)


def _smollm3(meta: dict) -> ArchSpec:
    # ref: HF SmolLM3Config.no_rope_layer_interval = 4; llama.cpp n_no_rope_layer_step
    return ArchSpec(**_common(meta, "smollm3"), rope_neox=False, nope_every=4)


def _gemma_query_scale(c: dict, n_layer_27b: int) -> float:
    """ref: gemma_pytorch config (as llama.cpp reads it): the 27B models scale queries by
    1 / sqrt(n_embd / n_head) (query_pre_attn_scalar), the others by 1 / sqrt(head_dim)."""
    return 1.0 / math.sqrt(c["n_embd"] // c["n_head"] if c["n_layer"] == n_layer_27b else c["head_dim"])


def _gemma(meta: dict) -> ArchSpec:
    # ref: HF GemmaDecoderLayer: pre-norms only, gelu_pytorch_tanh, embeddings scaled by sqrt(n_embd)
    c = _common(meta, "gemma")
    return ArchSpec(**c, rope_neox=True, act="gelu_tanh", embed_scale=math.sqrt(c["n_embd"]))


def _gemma2(meta: dict) -> ArchSpec:
    c, m = _common(meta, "gemma2"), Meta(meta, "gemma2")
    return ArchSpec(
        **c, rope_neox=True, act="gelu_tanh", post_attn_norm=True, post_ffn_norm=True,  # ref: HF Gemma2DecoderLayer
        embed_scale=math.sqrt(c["n_embd"]), attn_scale=_gemma_query_scale(c, 46),
        sliding_window=m.int("attention.sliding_window", 4096, lo=0),
        sliding_pattern=2,  # ref: HF Gemma2Config.layer_types: even layers slide
        rope_base_local=m.float("rope.freq_base_swa", 0.0, lo_open=False),  # llama.cpp: rope_freq_base_train_swa
        attn_logit_softcap=m.float("attn_logit_softcapping", 0.0, lo_open=False),
        final_logit_softcap=m.float("final_logit_softcapping", 0.0, lo_open=False),
    )


def _gemma3(meta: dict) -> ArchSpec:
    c, m = _common(meta, "gemma3"), Meta(meta, "gemma3")
    return ArchSpec(
        **c, rope_neox=True,
        act="gelu_tanh",  # ref: Gemma 3 tech report; HF gelu_pytorch_tanh
        qk_norm=True, post_attn_norm=True, post_ffn_norm=True,  # ref: HF Gemma3DecoderLayer
        embed_scale=math.sqrt(c["n_embd"]),  # ref: HF Gemma3TextScaledWordEmbedding
        attn_scale=_gemma_query_scale(c, 62),
        sliding_window=m.int("attention.sliding_window", 0, lo=0),
        sliding_pattern=6,  # ref: Gemma 3 tech report sec. 2: 5 local layers per global layer
        # ref: HF Gemma3TextConfig.rope_local_base_freq (10000); llama.cpp reads rope.freq_base_swa when set
        rope_base_local=m.float("rope.freq_base_swa", 10000.0), rope_linear_local=False,
        final_logit_softcap=m.float("final_logit_softcapping", 0.0, lo_open=False),
    )


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
}
_STATE = "its layers keep a recurrent or convolutional state besides the KV cache"
_LATENT = "multi-head latent attention changes what a KV page holds"
DECLINED = {
    # names as llama.cpp's llama-arch.cpp writes them
    **{arch: "a state-space model: " + _STATE for arch in ("mamba", "mamba2", "falcon-h1", "jamba", "nemotron_h",
                                                         "nemotron_h_moe", "granitehybrid", "plamo2")},
    **{arch: "a recurrent (RWKV) model: " + _STATE for arch in ("rwkv6", "rwkv7", "rwkv6qwen2", "arwkv7")},
    **{arch: "a hybrid of attention and linear attention: " + _STATE
       for arch in ("qwen35", "qwen35moe", "qwen3next", "kimi-linear", "minimax-01")},
    **{arch: "a hybrid of attention and short convolutions: " + _STATE for arch in ("lfm2", "lfm2moe")},
    **{arch: _LATENT for arch in ("deepseek2", "deepseek3", "deepseek32")},  # DeepSeek V2/V3, Kimi K2
}


def arch_spec(meta: dict) -> ArchSpec:
    """The spec of a decoder file; hostile or self-contradicting metadata is ModelFileError."""
    arch = architecture(meta)
    if arch in DECLINED:
        raise UnsupportedModel(f"architecture '{arch}' is not supported: {DECLINED[arch]}")
    if arch not in BUILDERS:
        raise UnsupportedModel(f"architecture '{arch}' is not supported "
                               f"(supported: {', '.join(sorted(BUILDERS))})")
    return BUILDERS[arch](meta)
