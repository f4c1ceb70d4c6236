"""ArchSpec: the hyperparameters and behaviours of a decoder, read from GGUF metadata and frozen.

Fields name behaviours, not models. A new architecture is one builder function and a registry line."""
from __future__ import annotations

import math
from dataclasses import dataclass


class UnsupportedModel(ValueError):
    """The file's architecture (or a feature of it) is not supported; the message says which and why."""


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
    act: str = "silu"  # gated FFN activation: "silu" | "gelu_tanh"
    attn_scale: float = 0.0  # 0: 1 / sqrt(head_dim)
    qkv_bias: bool = False
    qk_norm: bool = False
    post_attn_norm: bool = False
    post_ffn_norm: bool = False
    embed_scale: float = 1.0
    sliding_window: int = 0  # 0: every layer attends to the full context
    sliding_pattern: int = 0  # n > 0: every n-th layer is global, the others slide; 0: all slide
    rope_base_local: float = 0.0  # RoPE base of sliding layers (0: rope_base)
    attn_logit_softcap: float = 0.0
    final_logit_softcap: float = 0.0

    @property
    def kv_dim(self) -> int:
        return self.n_head_kv * self.head_dim

    @property
    def scale(self) -> float:
        return self.attn_scale or 1.0 / math.sqrt(self.head_dim)

    def layer_window(self, il: int) -> int:
        """Sliding window of layer il in tokens (0 = full context)."""
        if not self.sliding_window:
            return 0
        if self.sliding_pattern and il % self.sliding_pattern == self.sliding_pattern - 1:
            return 0
        return self.sliding_window

    def layer_rope_base(self, il: int) -> float:
        return self.rope_base_local if self.rope_base_local and self.layer_window(il) else self.rope_base


def metadata_getter(meta: dict, arch: str):
    """get(key, default=None) -> meta['{arch}.{key}']; a missing key without a default is UnsupportedModel."""
    def get(key, default=None):
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise UnsupportedModel(f"{arch} file lacks metadata '{arch}.{key}'")
        return value
    return get


def _common(meta: dict, arch: str) -> dict:
    get = metadata_getter(meta, arch)

    n_embd, n_head = int(get("embedding_length")), int(get("attention.head_count"))
    n_ff = get("feed_forward_length")
    if not isinstance(n_ff, int):  # an array: one width per layer
        if len(set(int(v) for v in n_ff)) != 1:
            raise UnsupportedModel(f"{arch}: per-layer feed_forward_length is not supported")
        n_ff = int(n_ff[0])
    head_dim = int(get("attention.key_length", n_embd // n_head))
    if int(get("attention.value_length", head_dim)) != head_dim:
        raise UnsupportedModel(f"{arch}: value_length != key_length is not supported")
    tokens = meta.get("tokenizer.ggml.tokens")
    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", None) and float(meta.get(f"{arch}.rope.scaling.factor", 1.0)) != 1.0:
        raise UnsupportedModel(f"{arch}: RoPE scaling '{scaling}' is not supported yet")
    return dict(
        arch=arch, n_layer=int(get("block_count")), n_embd=n_embd, n_head=n_head,
        n_head_kv=int(get("attention.head_count_kv", n_head)), head_dim=head_dim, n_ff=int(n_ff),
        n_vocab=int(get("vocab_size", len(tokens) if tokens is not None else None)),
        n_ctx_train=int(get("context_length")),
        norm_eps=float(get("attention.layer_norm_rms_epsilon")),
        rope_base=float(get("rope.freq_base", 10000.0)),
        n_rot=int(get("rope.dimension_count", head_dim)),
    )


def _llama(meta: dict) -> ArchSpec:
    c = _common(meta, "llama")
    return ArchSpec(**c, rope_neox=False, sliding_window=int(meta.get("llama.attention.sliding_window", 0)))


def _qwen2(meta: dict) -> ArchSpec:
    # ref: Qwen2 technical report; HF Qwen2Attention: bias on q/k/v projections only
    return ArchSpec(**_common(meta, "qwen2"), rope_neox=True, qkv_bias=True)


def _gemma3(meta: dict) -> ArchSpec:
    c = _common(meta, "gemma3")
    return ArchSpec(
        **c, rope_neox=True,
        act="gelu_tanh",  # ref: Gemma 3 tech report; HF gelu_pytorch_tanh
        qk_norm=True, post_attn_norm=True, post_ffn_norm=True,  # ref: HF Gemma3DecoderLayer
        embed_scale=math.sqrt(c["n_embd"]),  # ref: HF Gemma3TextScaledWordEmbedding
        attn_scale=1.0 / math.sqrt(c["head_dim"]),  # query_pre_attn_scalar = head_dim (270m..12b)
        sliding_window=int(meta.get("gemma3.attention.sliding_window", 0)),
        sliding_pattern=6,  # ref: Gemma 3 tech report sec. 2: 5 local layers per global layer
        rope_base_local=10000.0,  # ref: HF Gemma3TextConfig.rope_local_base_freq
        final_logit_softcap=float(meta.get("gemma3.final_logit_softcapping", 0.0)),
    )


BUILDERS = {"llama": _llama, "qwen2": _qwen2, "gemma3": _gemma3}
DECLINED = {
    "mamba": "a state-space model", "mamba2": "a state-space model", "rwkv6": "a recurrent (RWKV) model",
    "rwkv7": "a recurrent (RWKV) model", "rwkv6qwen2": "a recurrent (RWKV) model",
    "deepseek2": "multi-head latent attention changes what a KV page holds",
    "deepseek3": "multi-head latent attention changes what a KV page holds",
}


def arch_spec(meta: dict) -> ArchSpec:
    arch = meta.get("general.architecture")
    if arch in DECLINED:
        raise UnsupportedModel(f"architecture '{arch}' is not supported: {DECLINED[arch]}")
    if arch not in BUILDERS:
        raise UnsupportedModel(f"architecture '{arch}' is not supported "
                               f"(supported: {', '.join(sorted(BUILDERS))})")
    return BUILDERS[arch](meta)
