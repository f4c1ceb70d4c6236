"""Which type each tensor gets: llama.cpp's choice for each file type ("mix"), so a llamay quantization
has the tensor types a llama-quantize one has (ref: llama.cpp src/llama-quant.cpp, llama_tensor_get_type
and llama_tensor_get_type_impl; only the branches of the file types llamay writes).

Types are GGML type names. The choice is stateful as llama.cpp's: counters of the attention-V and FFN
tensors seen so far pick the layers that get more bits, so tensors are planned in file order."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..gguf.quant_types import BY_NAME

# file type name -> (llama_ftype number, the type most tensors get)
FTYPES = {
    "F32": (0, "F32"), "F16": (1, "F16"), "BF16": (32, "BF16"),
    "Q4_0": (2, "Q4_0"), "Q4_1": (3, "Q4_1"), "Q5_0": (8, "Q5_0"), "Q5_1": (9, "Q5_1"), "Q8_0": (7, "Q8_0"),
    "Q2_K": (10, "Q2_K"), "Q2_K_S": (21, "Q2_K"), "Q3_K_S": (11, "Q3_K"), "Q3_K_M": (12, "Q3_K"),
    "Q3_K_L": (13, "Q3_K"), "Q4_K_S": (14, "Q4_K"), "Q4_K_M": (15, "Q4_K"), "Q5_K_S": (16, "Q5_K"),
    "Q5_K_M": (17, "Q5_K"), "Q6_K": (18, "Q6_K"),
}
QUANTIZED = frozenset(t for _, t in FTYPES.values()) - {"F32", "F16", "BF16"}
# a 256-block type whose row length does not divide falls back to a 32-block one (then to F16)
FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
# what llama.cpp never quantizes (substrings of the name), besides 1-D tensors, norms and non-weights
_KEEP = ("ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
         "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
         "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
         "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
         "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
         "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
         "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos",
         ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd")
_CATEGORIES = (("attn_qkv.weight", "qkv"), ("attn_kv_b.weight", "kv_b"), ("attn_v.weight", "v"),
               ("attn_k.weight", "k"), ("attn_q.weight", "q"), ("attn_output.weight", "o"),
               ("ffn_up", "up"), ("ffn_gate", "gate"), ("ffn_down", "down"))
_LAYER = re.compile(r"blk\.(-?\d+)\.")


def n_dims(shape) -> int:
    """ggml_n_dims: dimensions up to the last one above 1 (at least 1)."""
    n = len(shape)
    while n > 1 and shape[n - 1] == 1:
        n -= 1
    return max(n, 1)


def layer_of(name: str) -> int:
    """The block number in the name, -1 for none (llama.cpp's sscanf "blk.%d.")."""
    m = _LAYER.match(name)
    return int(m.group(1)) if m else -1


def category(name: str) -> str:
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    return next((c for s, c in _CATEGORIES if s in name), "other")


@dataclass(frozen=True)
class Options:
    ftype: str  # a key of FTYPES
    pure: bool = False  # every quantized tensor the default type (no mix; fallbacks still apply)
    output_tensor_type: str | None = None
    token_embedding_type: str | None = None
    leave_output_tensor: bool = False  # output.weight kept as it is
    has_imatrix: bool = False  # an importance matrix is given (it changes a few choices)


@dataclass(frozen=True)
class Model:
    """What the mix reads of the model."""
    arch: str
    n_layer: int
    n_gqa: int  # heads per KV head (layer 0), 0 when unknown
    n_expert: int
    is_70b: bool = False  # llama.cpp's LLM_TYPE_70B: attention-V up one type

    @classmethod
    def from_metadata(cls, meta: dict) -> Model:
        arch = meta.get("general.architecture", "")

        def first(key, default=0):
            v = meta.get(f"{arch}.{key}", default)
            v = v[0] if hasattr(v, "__len__") and not isinstance(v, str) and len(v) else v
            return int(v) if isinstance(v, (int, float)) or hasattr(v, "__int__") else default
        n_layer, n_head = first("block_count"), first("attention.head_count")
        n_head_kv = first("attention.head_count_kv", n_head)
        return cls(arch, n_layer, n_head // n_head_kv if n_head_kv else 0, first("expert_count"),
                   is_70b=arch == "llama" and n_layer == 80 and n_head != n_head_kv)


def allows_quantization(name: str, shape, opts: Options) -> bool:
    """ref: llama.cpp tensor_allows_quantization."""
    return (n_dims(shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name
            and not (opts.leave_output_tensor and name == "output.weight")
            and not any(k in name for k in _KEEP)
            and name not in ("position_embd.weight", "token_types.weight"))


@dataclass
class Planner:
    model: Model
    opts: Options
    tied: bool  # no output.weight: token_embd is the output too
    i_attn_v: int = 0
    n_attn_v: int = 0
    i_ffn: dict = field(default_factory=lambda: {"down": 0, "gate": 0, "up": 0})

    def target(self, name: str, shape, qtype: str) -> str:
        """The type of one tensor, in file order (counters advance)."""
        o, cat = self.opts, category(name)
        if not allows_quantization(name, shape, o):
            return qtype
        if o.token_embedding_type and cat == "token_embd":
            return o.token_embedding_type
        if o.output_tensor_type and cat == "output":
            return o.output_tensor_type
        new = FTYPES[o.ftype][1]
        if new not in QUANTIZED:
            return new
        if not o.pure:
            new = self._mix(name, shape, new, cat)
        return _fallback(shape[0], new)

    def _mix(self, name: str, shape, new: str, cat: str) -> str:
        m, ft = self.model, self.opts.ftype
        if cat == "output" or (self.tied and cat == "token_embd"):
            if self.opts.output_tensor_type:
                return self.opts.output_tensor_type
            if shape[0] % BY_NAME[new].block_size or m.arch == "falcon":
                return "Q8_0"
            return new if new == "Q8_0" else "Q6_K"
        if cat == "token_embd":
            return new
        if cat in ("v", "qkv", "kv_b"):
            i, n = self.i_attn_v, self.n_attn_v
            if ft == "Q2_K":
                new = "Q4_K" if m.n_gqa >= 4 else "Q3_K"
            elif ft == "Q2_K_S" and m.n_gqa >= 4:
                new = "Q4_K"
            elif ft == "Q3_K_M":
                new = "Q5_K" if i < 2 else "Q4_K"
            elif ft == "Q3_K_L":
                new = "Q5_K"
            elif ft in ("Q4_K_M", "Q5_K_M") and _more_bits(i, n):
                new = "Q6_K"
            elif ft == "Q4_K_S" and i < 4:
                new = "Q5_K"
            if m.is_70b and new in ("Q3_K", "Q4_K"):
                new = "Q5_K"
            if m.n_expert == 8:
                new = "Q8_0"
            self.i_attn_v += 1  # (llama.cpp's own ATTENTION_QKV branch comes after this one: never reached)
            return new
        if cat == "k":
            return "Q8_0" if m.n_expert == 8 else new
        if cat == "down":
            i, n = self._layer(name, "down")
            if ft == "Q2_K":
                new = "Q3_K"
            elif ft == "Q2_K_S":
                new = "Q4_K" if i < n // 8 else new
            elif ft == "Q3_K_M":
                new = "Q5_K" if i < n // 16 else "Q4_K" if m.arch != "falcon" or _more_bits(i, n) else "Q3_K"
            elif ft == "Q3_K_L":
                new = "Q4_K" if m.arch == "falcon" else "Q5_K"
            elif ft == "Q4_K_M":
                if m.arch == "falcon":
                    new = "Q6_K" if i < n // 16 else "Q5_K" if _more_bits(i, n) else "Q4_K"
                elif _more_bits(i, n):
                    new = "Q6_K"
            elif ft == "Q5_K_M" and _more_bits(i, n):
                new = "Q6_K"
            elif ft == "Q4_K_S" and m.arch != "falcon" and i < n // 8:
                new = "Q5_K"
            elif ft in ("Q4_0", "Q5_0") and self.opts.has_imatrix and i < n // 8:
                new = "Q4_1" if ft == "Q4_0" else "Q5_1"  # llama.cpp's guard for the first FFN-down layers
            self.i_ffn["down"] += 1
            return new
        if cat == "o":
            if m.arch != "falcon":
                if m.n_expert == 8:
                    return "Q5_K" if ft in ("Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M") else new
                return {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(ft, new)
            return "Q4_K" if ft == "Q3_K_L" else new
        if cat in ("gate", "up"):
            self._layer(name, cat)
            self.i_ffn[cat] += 1
        return new

    def _layer(self, name: str, kind: str) -> tuple[int, int]:
        """(layer, layers): the counter of this kind, or with experts the block number in the name."""
        n = self.model.n_layer
        if self.model.n_expert > 1:
            i = layer_of(name)
            if not 0 <= i < n:
                raise ValueError(f"bad layer {i} for tensor {name}: must be in [0, {n})")
            return i, n
        return self.i_ffn[kind], n


def _more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fallback(ncols: int, new: str) -> str:
    """ref: llama.cpp tensor_type_fallback."""
    if ncols % BY_NAME[new].block_size == 0:
        return new
    new = FALLBACK.get(new, new)
    return new if ncols % BY_NAME[new].block_size == 0 else "F16"


def plan(names_shapes_types, model: Model, opts: Options) -> dict[str, str]:
    """name -> target type for tensors given in file order as (name, GGUF shape, type name)."""
    items = list(names_shapes_types)
    p = Planner(model, opts, tied=not any(n == "output.weight" for n, _, _ in items))
    p.n_attn_v = sum(category(n) in ("v", "qkv", "kv_b") for n, _, _ in items)
    return {n: p.target(n, s, t) for n, s, t in items}
