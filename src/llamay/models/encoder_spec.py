"""EncoderSpec: the hyperparameters of a bidirectional encoder (bert, nomic-bert), read from GGUF
metadata and frozen. Like ArchSpec, fields name behaviours; an architecture is a builder and a registry line."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .checks import MAX_ROPE_DIMS, Meta, ModelFileError, UnsupportedModel, architecture

# ref: llama.cpp include/llama.h enum llama_pooling_type (the value of {arch}.pooling_type)
POOLING = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


@dataclass(frozen=True)
class EncoderSpec:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    norm_eps: float  # LayerNorm epsilon
    pooling: str  # one of POOLING's values
    ffn: str = "gelu"  # "gelu": up -> GELU -> down; "swiglu": SiLU(gate) * up -> down
    rope_base: float = 0.0  # > 0: rotary positions (NeoX pairs) instead of a position table
    fused_qkv: bool = False  # one attn_qkv matrix instead of attn_q/k/v
    biases: bool = True  # linear layers carry biases

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)


def _common(meta: dict, arch: str) -> dict:
    m = Meta(meta, arch)
    if m.bool("attention.causal", False):
        raise UnsupportedModel(f"{arch}: a causal encoder is not supported")
    n_embd, n_head = m.int("embedding_length"), m.int("attention.head_count")
    if n_embd % n_head:
        raise ModelFileError(f"{m.key('attention.head_count')} = {n_head} does not divide "
                             f"{m.key('embedding_length')} = {n_embd}")
    return {
        "arch": arch, "n_layer": m.int("block_count"), "n_embd": n_embd, "n_head": n_head,
        "n_ff": m.int("feed_forward_length"), "n_vocab": m.n_vocab(), "n_ctx_train": m.int("context_length"),
        "norm_eps": m.float("attention.layer_norm_epsilon", hi=1.0),
        "pooling": POOLING[m.int("pooling_type", 0, lo=0, hi=max(POOLING))]}


def _bert(meta: dict) -> EncoderSpec:
    # ref: llama.cpp src/llama-model.cpp build_bert (post-norm blocks, learned absolute positions)
    return EncoderSpec(**_common(meta, "bert"))


def _nomic_bert(meta: dict) -> EncoderSpec:
    # ref: llama.cpp build_bert for LLM_ARCH_NOMIC_BERT: fused QKV, rotary positions, SwiGLU FFN, no biases
    c = _common(meta, "nomic-bert")
    head_dim = c["n_embd"] // c["n_head"]
    if head_dim % 2 or head_dim > MAX_ROPE_DIMS:
        raise ModelFileError(f"nomic-bert.embedding_length / nomic-bert.attention.head_count = {head_dim}: "
                             f"rotary positions need an even head size of at most {MAX_ROPE_DIMS}")
    return EncoderSpec(**c, ffn="swiglu", rope_base=Meta(meta, "nomic-bert").float("rope.freq_base", 10000.0),
                       fused_qkv=True, biases=False)


ENCODERS = {"bert": _bert, "nomic-bert": _nomic_bert}


def is_encoder(meta: dict) -> bool:
    arch = meta.get("general.architecture")
    return isinstance(arch, str) and arch in ENCODERS


def encoder_spec(meta: dict) -> EncoderSpec:
    """The spec of an encoder file; hostile or self-contradicting metadata is ModelFileError."""
    arch = architecture(meta)
    if arch not in ENCODERS:
        raise UnsupportedModel(f"'{arch}' is not an encoder architecture "
                               f"(encoders: {', '.join(sorted(ENCODERS))})")
    return ENCODERS[arch](meta)
