"""A bidirectional encoder (bert, nomic-bert) over a padding-free batch: the tokens of every input are
concatenated and each attends only to its own sequence. The blocks run as one graph of the backend's typed
ops per batch size (kernels/builder.py), as the decoder's do: LayerNorm with bias, projections, rotary or
learned positions, bidirectional attention over a private page pool (one slot per page), GELU or SwiGLU.
Every op is row-independent, so a sequence's output does not depend on what else is in the batch.
Shapes: n = tokens in the batch.

ref: llama.cpp src/llama-model.cpp build_bert and src/llama-graph.cpp build_pooling."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..gguf import GGUFReader, dequantize
from ..kernels.arena import Arena
from ..kernels.builder import Builder
from ..kernels.matmul import QWeight
from ..kernels.ops import BatchMeta
from ..kv import PagePool, kv_type
from .checks import MATRIX, TABLE, VECTOR, Expect, ModelFileError, check_block_count, check_tensors
from .encoder_spec import EncoderSpec
from .weights import Embedding

_NORMS = ("attn_output_norm", "layer_output_norm")


def _layer(s: EncoderSpec) -> dict[str, Expect]:
    """GGUF name within block i (after 'blk.{i}.') -> what it must be; shapes ne0 first."""
    d, ff = s.n_embd, s.n_ff
    mats = {"attn_qkv": (d, 3 * d)} if s.fused_qkv else {f"attn_{x}": (d, d) for x in "qkv"}
    mats |= {"attn_output": (d, d), "ffn_up": (d, ff), "ffn_down": (ff, d)}
    if s.ffn == "swiglu":
        mats["ffn_gate"] = (d, ff)
    layer = {f"{m}.weight": Expect(shape, MATRIX) for m, shape in mats.items()}
    if s.biases:
        layer |= {f"{m}.bias": Expect(shape[1:], VECTOR) for m, shape in mats.items() if m != "ffn_gate"}
    layer |= {f"{m}.{p}": Expect((d,), VECTOR) for m in _NORMS for p in ("weight", "bias")}
    return layer


def tensor_table(s: EncoderSpec, n_labels: int | None = None) -> dict[str, Expect]:
    """Every tensor of an encoder file: GGUF name -> what it must be. Optional: token types and the
    classification head (rank pooling) of n_labels outputs (None: any)."""
    d = s.n_embd
    table = {f"blk.{i}.{name}": e for i in range(s.n_layer) for name, e in _layer(s).items()}
    table |= {"token_embd.weight": Expect((d, s.n_vocab), TABLE), "token_embd_norm.weight": Expect((d,), VECTOR),
              "token_embd_norm.bias": Expect((d,), VECTOR)}
    if not s.rope_base:
        table["position_embd.weight"] = Expect((d, s.n_ctx_train), TABLE)
    table |= {"token_types.weight": Expect((d, None), TABLE, False), "cls.weight": Expect((d, d), MATRIX, False),
              "cls.bias": Expect((d,), VECTOR, False), "cls.output.weight": Expect((d, n_labels), MATRIX, False),
              "cls.output.bias": Expect((n_labels,), VECTOR, False)}
    return table


class Encoder:
    def __init__(self, reader: GGUFReader, spec: EncoderSpec, nthreads: int):
        self.spec, self.nthreads = spec, nthreads
        check_block_count(reader.tensors, spec.n_layer, f"{spec.arch}.block_count")
        head = reader.tensors.get("cls.output.weight")
        table = tensor_table(spec, head.shape[-1] if head is not None else None)
        check_tensors(reader.tensors, table, reader.path, spec.arch)
        if spec.pooling == "rank" and head is None:
            raise ModelFileError(f"{reader.path}: pooling 'rank' needs the cls.output.weight head")
        self.w = {n: self._load(reader, n, table[n].role) for n in sorted(reader.tensors)}
        self.token_embd = Embedding(reader, "token_embd.weight")
        self._plans: OrderedDict[int, EncoderPlan] = OrderedDict()
        self.arena = Arena()  # the scratch its plans share (one runs at a time)

    @staticmethod
    def _load(reader: GGUFReader, name: str, role: str):
        """Matrices stay as block bytes; vectors and tables become float32 ([rows, row length]);
        token_embd is looked up row by row (Embedding)."""
        if role == MATRIX:
            return QWeight.from_gguf(reader, name)
        if name == "token_embd.weight":
            return None
        t = reader.tensors[name]
        data = dequantize(reader.data(name), t.qtype, t.shape)
        return np.ascontiguousarray(data.reshape(t.shape[::-1]), np.float32)

    @property
    def n_types(self) -> int:
        t = self.w.get("token_types.weight")
        return 0 if t is None else t.shape[0]

    def linear(self, name: str) -> tuple[QWeight, np.ndarray | None]:
        """A projection and its bias (None without); attn_q/k/v of a fused QKV file are row views of it."""
        qkv = name.rsplit(".", 1)
        if self.spec.fused_qkv and qkv[-1] in ("attn_q", "attn_k", "attn_v"):
            i = ("attn_q", "attn_k", "attn_v").index(qkv[-1])
            w, bias = self.w[qkv[0] + ".attn_qkv.weight"], self.w.get(qkv[0] + ".attn_qkv.bias")
            d, rb = w.m // 3, w.row_bytes
            part = QWeight(w.raw[i * d * rb:(i + 1) * d * rb], w.qtype, d, w.k)
            return part, None if bias is None else np.ascontiguousarray(bias[i * d:(i + 1) * d])
        return self.w[name + ".weight"], self.w.get(name + ".bias")

    def forward(self, ids: np.ndarray, lens: list[int], types: np.ndarray | None = None) -> np.ndarray:
        """ids int32 [n]: sequences of lengths lens, concatenated; types int32 [n] token types (default 0).
        -> final hidden states float32 [n, n_embd] (a fresh array)."""
        s, n = self.spec, len(ids)
        assert sum(lens) == n and all(0 < m <= s.n_ctx_train for m in lens), (lens, s.n_ctx_train)
        pos = np.concatenate([np.arange(m, dtype=np.int32) for m in lens])
        x = self.token_embd(ids)
        if self.n_types:
            x = x + self.w["token_types.weight"][np.zeros(n, np.int32) if types is None else types]
        if not s.rope_base:
            x = x + self.w["position_embd.weight"][pos]
        plan = self._plans.pop(n, None) or EncoderPlan(self, n)
        self._plans[n] = plan
        while len(self._plans) > MAX_PLANS:
            self._plans.popitem(last=False)
        plan.x[:] = x
        plan.run(pos, lens, self.nthreads)
        return plan.x.copy()

    def classify(self, cls_rows: np.ndarray) -> np.ndarray:
        """Classification head on [n_seq, n_embd] rows -> [n_seq, n_labels]: optional dense + tanh
        (BERT's pooler), then the output projection."""
        b = Builder()
        x = h = b.tensor(*cls_rows.shape)
        if "cls.weight" in self.w:
            h = b.softcap(b.matmul(x, *self.linear("cls")), 1.0)  # 1 * tanh(h / 1)
        out = b.matmul(h, *self.linear("cls.output"))
        x[:] = cls_rows
        b.run(self.nthreads)
        return out


MAX_PLANS = 8  # batch sizes kept


class EncoderPlan:
    """The encoder's blocks for n tokens: `x` in (summed embeddings), `x` out (final hidden states)."""

    def __init__(self, enc: Encoder, n: int):
        s, b = enc.spec, Builder(arena=enc.arena)
        self.b, self.batch = b, b.batch(n)
        self.pool = PagePool(s.n_layer, n, 1, s.n_head, s.head_dim, kv_type("f32", s.head_dim))
        w, eps = enc.w, s.norm_eps
        self.x = x = b.tensor(n, s.n_embd, io=True)
        b.layernorm(x, w["token_embd_norm.weight"], w["token_embd_norm.bias"], eps, out=x)
        for il in range(s.n_layer):
            p = f"blk.{il}."
            q, k, v = (b.matmul(x, *enc.linear(p + m)) for m in ("attn_q", "attn_k", "attn_v"))
            if s.rope_base:
                for t in (q, k):
                    b.rope(t, self.batch, s.n_head, s.head_dim, s.head_dim, s.rope_base, True)
            b.kv_write(self.pool, il, k, v, self.batch)
            attn = b.attention(q, self.pool, il, self.batch, s.n_head, s.scale, causal=False)
            b.add(x, b.matmul(attn, *enc.linear(p + "attn_output")))
            b.layernorm(x, w[p + "attn_output_norm.weight"], w[p + "attn_output_norm.bias"], eps, out=x)
            if s.ffn == "swiglu":
                h = b.gated(b.matmul(x, *enc.linear(p + "ffn_gate")), b.matmul(x, *enc.linear(p + "ffn_up")), "silu")
            else:
                h = b.activation(b.matmul(x, *enc.linear(p + "ffn_up")), "gelu_tanh")
            b.add(x, b.matmul(h, *enc.linear(p + "ffn_down")))
            b.layernorm(x, w[p + "layer_output_norm.weight"], w[p + "layer_output_norm.bias"], eps, out=x)
        b.finish()

    def run(self, pos: np.ndarray, lens: list[int], nthreads: int):
        """Token i of the batch sits in slot i (pages of one slot), each sequence's page table its slots."""
        first = np.cumsum([0] + lens[:-1])
        table = np.zeros((len(lens), max(lens)), np.int32)
        for i, (f, m) in enumerate(zip(first, lens)):
            table[i, :m] = np.arange(f, f + m)
        seq = np.repeat(np.arange(len(lens), dtype=np.int32), lens)
        self.batch.fill(BatchMeta(pos, seq, table, 1))
        self.b.run(nthreads)
