"""The parts a family's builder describes a decoder with: frozen sub-specs, each of one block's settings.

Fields name behaviours, not models. plan.py resolves them once into one LayerPlan per layer; what may differ
between layers (a window, a head size, RoPE, an FFN width) is said here as a rule, read there."""
from __future__ import annotations

from dataclasses import dataclass

MIXERS = ("attention", "shortconv", "mamba", "mamba2", "deltanet", "kda", "none")  # what a layer's mixer may be; "none": the
# layer is its FFN alone (Nemotron-H); every other one keeps a recurrent state (models/recurrent.py)


@dataclass(frozen=True)
class Norms:
    eps: float
    layer_norm: bool = False  # LayerNorm with bias instead of RMSNorm, every norm
    bias: bool = True  # False: those LayerNorms have no bias (Cohere)
    pre: bool = True  # a norm before attention and FFN (OLMo 2 has only the post norms)
    post_attn: bool = False  # each block's output normed before the residual add
    post_ffn: bool = False
    ffn_name: str = "ffn_norm"  # the FFN input norm's GGUF name (gpt-oss: post_attention_norm)
    bare_ffn_norm: bool = False  # its tensor's name has no ".weight" (llama.cpp's falcon-h1 files)


@dataclass(frozen=True)
class Rope:
    base: float
    n_rot: int  # rotated dims of the global layers' heads
    neox: bool  # pairs (i, i + n_rot/2) instead of (2i, 2i+1)
    linear: float = 1.0  # linear scaling: frequencies divided by it
    freqs: bool = False  # the file may carry rope_freqs.weight: per-pair frequency factors (Llama 3)
    long_short: bool = False  # the file may carry LongRoPE's rope_factors_long / _short (Phi-3); as llama.cpp,
    # the long ones when the context exceeds n_ctx_orig, else the short (fixed at load: cached keys stay valid)
    n_ctx_orig: int = 0  # the context the model was pretrained at (before LongRoPE or YaRN extended it)
    mscale: float = 1.0  # cos and sin scaled by it (LongRoPE's and YaRN's attention factor)
    yarn: float = 0.0  # > 0: YaRN scaling by this factor over an original context of n_ctx_orig
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    yarn_truncate: bool = True  # the ramp's ends rounded to whole pairs (llama.cpp; not gpt-oss)
    # the sliding layers'
    base_local: float = 0.0  # their base (0: base)
    scaled_local: bool = True  # False: they take no scaling at all: linear, factors or attention factor
    n_rot_local: int = 0  # > 0: their rotated dims
    # layers without RoPE
    none_every: int = 0  # n > 0: every n-th layer applies none (SmolLM3; 1: no layer does)
    none_global: bool = False  # with a sliding window, only the sliding layers apply RoPE (EXAONE 4)


@dataclass(frozen=True)
class Attention:
    n_head: int
    n_head_kv: int  # of every layer, unless n_head_kv_layers says otherwise
    head_dim: int  # of the global layers
    rope: Rope
    scale: float = 0.0  # the queries' scale; 0: 1 / sqrt(the layer's head size)
    qkv_bias: bool = False
    o_bias: bool = False
    fused_qkv: bool = False  # one attn_qkv matrix (and bias): the q rows, then k, then v (Phi-3, GPT-2)
    qk_norm: bool = False  # q and k RMS-normed per head
    qk_norm_full: bool = False  # ... over the whole projection instead (OLMo 2)
    v_norm: bool = False  # values RMS-normed without a weight
    v_from_k: bool = False  # a layer without attn_v takes its values from the keys, before their norm
    sinks: bool = False  # a learned logit per head joins each softmax's denominator (gpt-oss)
    out_gate: bool = False  # attn_q holds, per head, head_dim query rows then head_dim gate rows; the
    # attention's output times sigmoid(gate) (Qwen3-Next, Qwen3.5)
    logit_softcap: float = 0.0
    temp_scale: float = 0.0  # > 0: queries times 1 + it * ln(1 + floor(pos / temp_floor)) (Ministral 3)
    temp_floor: int = 0
    # which layers slide: window > 0 and the layer marked in `sliding`, else not every global_every-th
    window: int = 0  # 0: every layer attends to the full context
    global_every: int = 0  # n > 0: every n-th layer is global, the others slide; 0: all slide
    sliding: tuple = ()  # per layer, whether it slides (the file's sliding_window_pattern array); wins
    head_dim_local: int = 0  # > 0: the sliding layers' head size
    n_head_kv_layers: tuple = ()  # KV heads per layer, when they differ between layers
    n_kv_shared: int = 0  # the last n layers compute no K/V: each attends to the K/V of the last earlier
    # layer of its kind (sliding or global), so the page pool holds only the other layers
    # multi-head latent attention (models/latent.py), absorbed: kv_lora > 0 is the latent's size; the pool
    # holds one head of head_dim = kv_lora + n_rot values a token, the normed latent then the shared rotary
    # key, as keys and values alike
    kv_lora: int = 0
    q_lora: int = 0  # > 0: the queries through a projection of this rank and its norm (else attn_q)
    nope: int = 0  # each query head's dims without RoPE (then n_rot with)
    v_dim: int = 0  # each head's value size, out of the latent through attn_v_b


@dataclass(frozen=True)
class FFN:
    n_ff: int  # the dense MLP's width (of every layer unless n_ff_layers says otherwise)
    act: str = "silu"  # "silu" | "gelu_tanh" | "swiglu_oai" (gpt-oss's clamped SwiGLU); the experts' too
    gated: bool = True  # down(act(gate) * up); False: down(act(up)) (StarCoder 2, GPT-2)
    bias: bool = False  # biases on up and down
    fused_gate_up: bool = False  # ffn_up holds the gate rows, then the up rows (Phi-3)
    n_ff_layers: tuple = ()  # width per layer, when it differs (Gemma 4's double-wide MLPs)


@dataclass(frozen=True)
class MoE:
    n_expert: int
    n_used: int  # experts each token takes (the largest router logits)
    n_ff: int  # each expert's width
    gating: str = "softmax"  # their weights: softmax over all experts, 'softmax_chosen' (over the k), or
    # 'sigmoid' (each chosen one's sigmoid score; chosen by score + the file's exp_probs_b when select_bias)
    select_bias: bool = False
    scale: float = 1.0  # the chosen experts' weights times it (routed_scaling_factor)
    n_dense_lead: int = 0  # the first n layers have the dense MLP instead (LFM2-MoE)
    layers: tuple = ()  # per layer, whether it has the experts (Nemotron-H MoE); (): all (past n_dense_lead)
    norm: bool = False  # weights divided by their sum (Qwen3-MoE's norm_topk_prob)
    bias: bool = False  # biases on the router and on every expert's projections (gpt-oss)
    n_ff_shared: int = 0  # > 0: a shared expert of this width beside the routed ones, gated by sigmoid(x . g)
    shared_gate: bool = True  # False: the shared expert's output added as is (Granite 4)
    beside_dense: bool = False  # the experts run beside the dense MLP, each with its own norms, their router
    # reading the unweighted RMSNorm of the residual times a scale vector (Gemma 4's 26B-A4B)


@dataclass(frozen=True)
class ShortConv:
    """LFM2's short convolution: in_proj to B, C, x; y = C * conv(B * x) over the last `d_conv` tokens;
    out_proj. Its state: the last d_conv - 1 values of B * x."""
    d_conv: int


@dataclass(frozen=True)
class Mamba:
    """Mamba's (Mamba1's) mixer (models/mixer_mamba.py): in_proj to x, z; a causal convolution over the last
    d_conv rows of x, SiLU; x_proj to dt (rank dt_rank), B, C, normed by `norms`; dt_proj; the selective scan
    of each of d_inner channels over a state of d_state, one A per channel and state; y * SiLU(z); out_proj."""
    d_conv: int
    d_inner: int
    d_state: int
    dt_rank: int
    norms: str = "none"  # dt, B and C RMS-normed: "rms" without weights (Falcon-Mamba), "weights" (Jamba)


@dataclass(frozen=True)
class Mamba2:
    """Mamba2's mixer (models/mixer_mamba2.py): in_proj to z, x B C, dt; a causal convolution over the last
    d_conv rows of x B C, SiLU; the selective scan of n_head heads of head_dim over states of d_state, B and C
    shared by n_head / n_group heads; y * SiLU(z) RMS-normed per group of d_inner / n_group; out_proj."""
    d_conv: int
    d_inner: int
    d_state: int
    n_group: int
    n_head: int

    @property
    def head_dim(self) -> int:
        return self.d_inner // self.n_head

    @property
    def conv_dim(self) -> int:  # x, B and C
        return self.d_inner + 2 * self.n_group * self.d_state


@dataclass(frozen=True)
class KimiDelta:
    """Kimi's delta attention (models/mixer_kda.py): q, k, v each through a causal convolution of d_conv
    taps, then the delta rule with a decay per state row over a [head_dim, head_dim] state per head."""
    d_conv: int
    n_head: int
    head_dim: int


@dataclass(frozen=True)
class DeltaNet:
    """The gated delta net of Qwen3-Next and Qwen3.5 (models/mixer_deltanet.py): a causal convolution of
    d_conv taps over q, k, v, then the gated delta rule over a [d_k, d_v] state per value head."""
    d_conv: int
    n_k_heads: int
    n_v_heads: int  # a multiple of n_k_heads
    d_k: int
    d_v: int
    tiled: bool  # value head h reads key head h % n_k_heads (llama.cpp's qwen35 files), else h // (Hv / Hk)
    fused_ba: bool  # one ssm_ba matrix, rows per key head: its value heads' b, then their a (qwen3next);
    # else ssm_beta and ssm_alpha
