"""EncoderSpec: the hyperparameters of a bidirectional encoder (bert, nomic-bert), read from GGUF
metadata and frozen. Like ArchSpec, fields name behaviours; an architecture is a builder and a registry line."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .spec import UnsupportedModel, metadata_getter

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
    get = metadata_getter(meta, arch)

    if get("attention.causal", False):
        raise UnsupportedModel(f"{arch}: a causal encoder is not supported")
    pooling = int(get("pooling_type", 0))
    if pooling not in POOLING:
        raise UnsupportedModel(f"{arch}: unknown pooling_type {pooling}")
    tokens = meta.get("tokenizer.ggml.tokens")
    n_embd, n_head = int(get("embedding_length")), int(get("attention.head_count"))
    if n_embd % n_head:
        raise UnsupportedModel(f"{arch}: embedding_length {n_embd} is not a multiple of {n_head} heads")
    return {
        "arch": arch, "n_layer": int(get("block_count")), "n_embd": n_embd, "n_head": n_head,
        "n_ff": int(get("feed_forward_length")),
        "n_vocab": int(get("vocab_size", len(tokens) if tokens is not None else None)),
        "n_ctx_train": int(get("context_length")), "norm_eps": float(get("attention.layer_norm_epsilon")),
        "pooling": POOLING[pooling]}


def _bert(meta: dict) -> EncoderSpec:
    # ref: llama.cpp src/llama-model.cpp build_bert (post-norm blocks, learned absolute positions)
    return EncoderSpec(**_common(meta, "bert"))


def _nomic_bert(meta: dict) -> EncoderSpec:
    # ref: llama.cpp build_bert for LLM_ARCH_NOMIC_BERT: fused QKV, rotary positions, SwiGLU FFN, no biases
    return EncoderSpec(**_common(meta, "nomic-bert"), ffn="swiglu",
                       rope_base=float(meta.get("nomic-bert.rope.freq_base", 10000.0)),
                       fused_qkv=True, biases=False)


ENCODERS = {"bert": _bert, "nomic-bert": _nomic_bert}


def is_encoder(meta: dict) -> bool:
    return meta.get("general.architecture") in ENCODERS


def encoder_spec(meta: dict) -> EncoderSpec:
    arch = meta.get("general.architecture")
    if arch not in ENCODERS:
        raise UnsupportedModel(f"'{arch}' is not an encoder architecture "
                               f"(encoders: {', '.join(sorted(ENCODERS))})")
    return ENCODERS[arch](meta)
