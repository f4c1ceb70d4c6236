"""Loading is a walk over GGUF tensor names with strict errors: every expected tensor must be present
and every tensor in the file must be expected. Matrices stay as block bytes mapped from the file."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gguf import GGUFReader, dequantize
from ..kernels.matmul import QWeight
from .spec import ArchSpec, UnsupportedModel


def expected_tensors(spec: ArchSpec) -> tuple[list[str], list[str]]:
    """(required, optional) GGUF tensor names for this spec."""
    layer = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
             "ffn_up", "ffn_down"]
    layer += ["attn_q_norm", "attn_k_norm"] if spec.qk_norm else []
    layer += ["post_attention_norm"] if spec.post_attn_norm else []
    layer += ["post_ffw_norm"] if spec.post_ffn_norm else []
    required = [f"blk.{i}.{n}.weight" for i in range(spec.n_layer) for n in layer]
    if spec.qkv_bias:
        required += [f"blk.{i}.attn_{n}.bias" for i in range(spec.n_layer) for n in "qkv"]
    required += ["token_embd.weight", "output_norm.weight"]
    return required, ["output.weight"]  # output absent: tied to token_embd


@dataclass(frozen=True)
class Layer:
    attn_norm: np.ndarray
    q: QWeight
    k: QWeight
    v: QWeight
    o: QWeight
    ffn_norm: np.ndarray
    gate: QWeight
    up: QWeight
    down: QWeight
    q_bias: np.ndarray | None = None
    k_bias: np.ndarray | None = None
    v_bias: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffn_norm: np.ndarray | None = None


class Embedding:
    """token_embd rows dequantized on lookup; the table stays mapped, never dequantized whole."""

    def __init__(self, reader: GGUFReader, name: str):
        t = reader.tensors[name]
        self.qtype, self.n_embd = t.qtype, t.shape[0]
        self.rows = reader.data(name).reshape(t.shape[1], -1)  # [n_vocab, row_bytes]

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        return dequantize(self.rows[ids], self.qtype, (self.n_embd, len(ids)))  # [n, n_embd]


def load_weights(reader: GGUFReader, spec: ArchSpec):
    required, optional = expected_tensors(spec)
    present = set(reader.tensors)
    missing = [n for n in required if n not in present]
    if missing:
        raise UnsupportedModel(f"{reader.path}: missing tensors {missing[:5]}"
                               f"{' ...' if len(missing) > 5 else ''}")
    unexpected = sorted(present - set(required) - set(optional))
    if unexpected:
        raise UnsupportedModel(f"{reader.path}: unexpected tensors {unexpected[:5]} for {spec.arch} "
                               "(a feature llamay does not support yet)")

    def vec(name):
        return np.ascontiguousarray(dequantize(reader.data(name), reader.tensors[name].qtype,
                                               reader.tensors[name].shape))

    def mat(name):
        t = reader.tensors[name]
        return QWeight(reader.data(name), t.qtype, t.shape[1], t.shape[0])

    layers = []
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        opt = {}
        if spec.qkv_bias:
            opt.update(q_bias=vec(p + "attn_q.bias"), k_bias=vec(p + "attn_k.bias"), v_bias=vec(p + "attn_v.bias"))
        if spec.qk_norm:
            opt.update(q_norm=vec(p + "attn_q_norm.weight"), k_norm=vec(p + "attn_k_norm.weight"))
        if spec.post_attn_norm:
            opt["post_attn_norm"] = vec(p + "post_attention_norm.weight")
        if spec.post_ffn_norm:
            opt["post_ffn_norm"] = vec(p + "post_ffw_norm.weight")
        layers.append(Layer(
            vec(p + "attn_norm.weight"), mat(p + "attn_q.weight"), mat(p + "attn_k.weight"),
            mat(p + "attn_v.weight"), mat(p + "attn_output.weight"), vec(p + "ffn_norm.weight"),
            mat(p + "ffn_gate.weight"), mat(p + "ffn_up.weight"), mat(p + "ffn_down.weight"), **opt))
    output = mat("output.weight" if "output.weight" in present else "token_embd.weight")
    return layers, Embedding(reader, "token_embd.weight"), vec("output_norm.weight"), output
