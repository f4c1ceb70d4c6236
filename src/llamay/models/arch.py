"""ArchSpec: a decoder's parts (parts.py) and whole-model settings, read from GGUF metadata (spec.py) and
frozen; `layers` is its per-layer plan (plan.py), resolved once on first use (after the loader has checked
block_count against the file's tensors)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .parts import FFN, Attention, MoE, Norms, Rope
from .plan import LayerPlan, resolve


@dataclass(frozen=True)
class ArchSpec:
    arch: str
    n_layer: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    norms: Norms
    attn: Attention
    ffn: FFN
    moe: MoE | None = None
    mixers: tuple = ()  # each layer's mixer (parts.MIXERS); (): attention everywhere
    recurrent: Any = None  # the part of the layers whose mixer is not attention (parts.ShortConv, ...)
    attention_beside: bool = False  # each recurrent layer also attends, from the same norm; the two outputs are
    # summed (Falcon-H1)
    parallel_block: bool = False  # attention and FFN both read one norm of x: x + (attn + ffn) (Phi-2)
    residual_scale: float = 1.0  # each block's output scaled before the residual add (Granite)
    layer_out_scale: bool = False  # the file may carry layer_output_scale: each layer's output times it
    embed_scale: float = 1.0
    learned_pos: bool = False  # position_embd rows added to the token embeddings (GPT-2)
    n_embd_per_layer: int = 0  # > 0: per-layer inputs of this width, one slice of them added after each
    # layer through a gate and a projection (Gemma 4's E2B/E4B)
    output_bias: bool = False  # bias on the output projection
    output_norm: str = "output_norm"  # the final norm's GGUF name (LFM2: token_embd_norm)
    logit_scale: float = 1.0  # logits divided by it (Granite)
    final_logit_softcap: float = 0.0

    @cached_property
    def layers(self) -> tuple[LayerPlan, ...]:
        return resolve(self)

    @property
    def rope(self) -> Rope:
        return self.attn.rope

    @property
    def layer_norm(self) -> bool:
        return self.norms.layer_norm

    @property
    def norm_eps(self) -> float:
        return self.norms.eps

    @property
    def kv_layers(self) -> tuple[int, ...]:
        """The layers that write K/V, in order: the page pool's layers."""
        return tuple(p.index for p in self.layers if p.writes_kv)

    @property
    def state_layers(self) -> tuple[int, ...]:
        """The layers that keep a recurrent state, in order."""
        return tuple(p.index for p in self.layers if p.recurrent is not None)

    @property
    def kv_dims(self) -> tuple[tuple[int, int], ...]:
        """(KV heads, head size) of each pool layer."""
        return tuple((p.n_head_kv, p.head_dim) for p in self.layers if p.writes_kv)

    @property
    def values_are_keys(self) -> tuple[bool, ...]:
        """Of each pool layer, whether its values are its keys (latent attention's one head, models/latent.py)."""
        return tuple(p.attn.kv_lora > 0 for p in self.layers if p.writes_kv)

    def long_short(self, n_ctx: int) -> str:
        """Which of LongRoPE's factor sets a context of n_ctx tokens takes: 'long' or 'short'."""
        return "long" if n_ctx > self.rope.n_ctx_orig else "short"
