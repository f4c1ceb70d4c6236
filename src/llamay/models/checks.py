"""What a file must agree with before any kernel sees it: typed, range-checked metadata (Meta) and each
tensor's shape and type against a table the loaders derive from the spec (Expect, check_tensors).

Every disagreement is one error, ModelFileError, whose message names the key or the tensor."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..gguf import QUANT_TYPES, TensorInfo
from ..gguf.dequant import SUPPORTED as DEQUANT_TYPES
from ..kernels.matmul import IQ_TYPES, supported

MAX_SIZE = 2**31 - 1  # any count or length read from metadata (int32-safe in every kernel's indexing)
MAX_LAYERS = 4096  # a spec that walks its layers (per-layer shapes) does so only below this
MAX_ROPE_DIMS = 1024  # kernels/csrc/ops.c ly_rope_slice: cs[512], sn[512] per token
_MISSING = object()


class UnsupportedModel(ValueError):
    """The file's architecture (or a feature of it) is not supported; the message says which and why."""


class ModelFileError(UnsupportedModel):
    """The file parses but disagrees with itself: a key of the wrong type or out of range, hyperparameters
    that contradict each other, a tensor missing, unexpected, of the wrong shape or of a type no kernel
    takes for its role. The message names the key or the tensor."""


def _describe(v) -> str:
    if isinstance(v, (list, np.ndarray)):
        return f"an array of {len(v)}"
    return f"{type(v).__name__} {v!r}"[:80]


class Meta:
    """Typed reads of '{arch}.{key}' metadata. A missing key without a default, a value of the wrong type
    (a string, an array, a bool where a number is expected) or out of range is ModelFileError."""

    def __init__(self, meta: dict, arch: str):
        self.meta, self.arch = meta, arch

    def key(self, key: str) -> str:
        return f"{self.arch}.{key}"

    def _raw(self, key: str, default):
        value = self.meta.get(self.key(key), _MISSING)
        if value is _MISSING and default is _MISSING:
            raise ModelFileError(f"{self.arch} file lacks metadata '{self.key(key)}'")
        return value

    def int(self, key: str, default=_MISSING, lo: int = 1, hi: int = MAX_SIZE):
        """An integer in [lo, hi] (default returned as given when the key is absent)."""
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if isinstance(v, bool) or not isinstance(v, int):
            raise ModelFileError(f"{self.key(key)} must be an integer, got {_describe(v)}")
        if not lo <= v <= hi:
            raise ModelFileError(f"{self.key(key)} = {v} is out of range [{lo}, {hi}]")
        return v

    def layer_int(self, key: str, default=_MISSING) -> int:
        """A positive integer, or one per layer (block_count of them) that is the same for all (different
        ones are unsupported)."""
        v = self.layer_ints(key, default)
        if not isinstance(v, tuple):
            return v
        if any(x != v[0] for x in v):
            raise UnsupportedModel(f"{self.arch}: per-layer {key} is not supported")
        return v[0]

    def layer_ints(self, key: str, default=_MISSING, lo: int = 1):
        """Integers in [lo, MAX_SIZE] per layer: a tuple of block_count of them from an array, or of one when
        one integer serves every layer; the default as given when the key is absent."""
        v = self._raw(key, default)
        if self.key(key) not in self.meta:
            return default
        if not isinstance(v, np.ndarray) or v.dtype.kind not in "iu" or v.ndim != 1 or not len(v):
            return (self.int(key, default, lo=lo),)
        if len(v) != self.int("block_count"):
            raise ModelFileError(f"{self.key(key)} has {len(v)} entries, {self.key('block_count')} is "
                                 f"{self.int('block_count')}")
        if not (lo <= v.min() and v.max() <= MAX_SIZE):
            raise ModelFileError(f"{self.key(key)} has values out of range [{lo}, {MAX_SIZE}]")
        return tuple(int(x) for x in v)

    def float(self, key: str, default=_MISSING, lo: float = 0.0, hi: float = math.inf,
              lo_open: bool = True) -> float:
        """A finite number in (lo, hi] ([lo, hi] when not lo_open); integers are accepted."""
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ModelFileError(f"{self.key(key)} must be a number, got {_describe(v)}")
        f = float(v)
        if not math.isfinite(f) or f > hi or f < lo or (lo_open and f == lo):
            interval = f"{'(' if lo_open else '['}{lo}, {hi}]"
            raise ModelFileError(f"{self.key(key)} = {v!r} is out of range {interval}")
        return f

    def bool(self, key: str, default: bool) -> bool:
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if not isinstance(v, bool):
            raise ModelFileError(f"{self.key(key)} must be a bool, got {_describe(v)}")
        return v

    def str(self, key: str, default: str) -> str:
        v = self._raw(key, default)
        if v is _MISSING:
            return default
        if not isinstance(v, str):
            raise ModelFileError(f"{self.key(key)} must be a string, got {_describe(v)}")
        return v

    def n_vocab(self) -> int:
        """Rows of token_embd: the tokenizer's token count; '{arch}.vocab_size', if given, must agree."""
        tokens = self.meta.get("tokenizer.ggml.tokens")
        if tokens is None:
            return self.int("vocab_size")
        if not isinstance(tokens, list) or not tokens or not isinstance(tokens[0], str):
            raise ModelFileError("tokenizer.ggml.tokens must be a non-empty array of strings, got "
                                 + _describe(tokens))
        n = self.int("vocab_size", len(tokens))
        if n != len(tokens):
            raise ModelFileError(f"{self.key('vocab_size')} = {n} disagrees with the {len(tokens)} entries "
                                 "of tokenizer.ggml.tokens")
        return n


def architecture(meta: dict) -> str:
    arch = meta.get("general.architecture")
    if arch is None:
        raise ModelFileError("file lacks metadata 'general.architecture'")
    if not isinstance(arch, str):
        raise ModelFileError(f"general.architecture must be a string, got {_describe(arch)}")
    return arch


# roles: what reads a tensor, hence which types it may have (the names appear in messages)
MATRIX = "matmul weight"  # C kernels
VECTOR = "norm or bias vector"  # dequantized whole to float32
TABLE = "lookup table"  # rows dequantized by numpy (embeddings, position tables)
TIED = "tied embedding and output weight"  # token_embd without output.weight: both of the above
HEADS = "per-head matrices"  # dequantized whole to float32 (multi-head latent attention's k_b, v_b)


@functools.cache
def allowed_types(role: str) -> frozenset[str]:
    if role == VECTOR:
        return frozenset(("F32", "F16", "BF16"))
    tables = frozenset(DEQUANT_TYPES) | IQ_TYPES  # the IQ formats' rows through the C decoder (weights.py)
    if role == TABLE:
        return tables
    if role == HEADS:
        return frozenset(DEQUANT_TYPES)
    matmul = frozenset(t.name for t in QUANT_TYPES.values() if supported(t))
    return matmul if role == MATRIX else matmul & tables


@dataclass(frozen=True)
class Expect:
    """What one tensor must be. shape in GGUF (ggml) order, ne0 (the row length) first; None: any size."""
    shape: tuple[int | None, ...]
    role: str
    required: bool = True


def _fmt(shape) -> str:
    return "[" + ", ".join("*" if d is None else str(d) for d in shape) + "]"


def check_block_count(tensors: dict[str, TensorInfo], n_layer: int, key: str):
    """Before any per-layer list is built: the file must hold at least n_layer blocks of tensors."""
    blocks = {name.split(".", 2)[1] for name in tensors if name.startswith("blk.")}
    if n_layer > len(blocks):
        raise ModelFileError(f"{key} = {n_layer}, but the file holds tensors of {len(blocks)} blocks")


def check_tensors(tensors: dict[str, TensorInfo], table: dict[str, Expect], path: str, arch: str):
    """Every required tensor present, none unexpected, each of its expected shape and of a type its role
    accepts."""
    missing = [n for n, e in table.items() if e.required and n not in tensors]
    if missing:
        raise ModelFileError(f"{path}: missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    unexpected = sorted(set(tensors) - set(table))
    if unexpected:
        raise ModelFileError(f"{path}: unexpected tensors {unexpected[:5]} for {arch} "
                             "(a feature llamay does not support yet)")
    for name, t in tensors.items():
        check_tensor(name, t, table[name])


def file_shape(t: TensorInfo, e: Expect) -> tuple:
    """The tensor's shape with the trailing 1s the expected one has and the file left out: ggml's shapes imply
    them, and llama-quantize writes a [k, 1] tensor (a matrix of one row, Mamba2's norm of one group) as [k]."""
    shape = tuple(t.shape)
    if len(shape) < len(e.shape) and all(w in (1, None) for w in e.shape[len(shape):]):
        shape += (1,) * (len(e.shape) - len(shape))
    return shape


def check_tensor(name: str, t: TensorInfo, e: Expect):
    shape = file_shape(t, e)
    if len(shape) != len(e.shape) or any(w is not None and w != d for d, w in zip(shape, e.shape)):
        raise ModelFileError(f"{name} has shape {_fmt(t.shape)}, expected {_fmt(e.shape)}")
    if t.qtype.name not in allowed_types(e.role):
        raise ModelFileError(f"{name} is {t.qtype.name}, which llamay cannot use as a {e.role} "
                             f"(allowed: {', '.join(sorted(allowed_types(e.role)))})")
