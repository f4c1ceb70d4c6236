"""GGUF files for fuzz_load.py: tiny models built without torch (any llama, qwen2 or gemma3 geometry, or
a bert encoder), edits as JSON-able lists, and seeded random hostile edits.

Layouts are written out here from llama.cpp's tensor names, independently of llamay's loader tables, so a
wrong table shows up as a rejected valid file or a crash, not as agreement with itself."""
from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field

import numpy as np

from llamay.gguf import BY_NAME, GGUFReader, GGUFWriter

U32, I32, F32, BOOL, STRING, U64, I64 = 4, 5, 6, 7, 8, 10, 11
INT_TYPES = (0, 1, 2, 3, 4, 5, 10, 11)
EDGES = [0, 1, -1, 2, 3, 7, 31, 48, 1023, 1024, 2**15, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1,
         2**63, 2**64 - 1, -2**31, -2**63]
FLOATS = [0.0, -0.0, -1.0, 1e-45, 1e38, float("nan"), float("inf"), float("-inf")]
# [3, 3, 3]: one value per layer for 3 layers (a per-layer array that varies is a real feature llamay
# refuses as UnsupportedModel, so the fuzzer never writes one)
WRONG_TYPES = [("7", STRING), ("", STRING), (1.5, F32), (True, BOOL), ([3, 3, 3], None), (["a"], None),
               ([1.5, 2.5], None), ([], None), (7, U32), (2**64 - 1, U64)]
RETYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_1", "Q4_K", "Q6_K", "Q8_1", "I8", "I32", "F64",
           "IQ2_XXS", "MXFP4", "TQ1_0"]
MATMUL_32 = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]  # kernels for rows % 32 == 0
MATMUL_256 = ["Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K"]  # and for rows % 256 == 0


@dataclass
class Model:
    """A GGUF file as editable lists: metadata [key, vtype, value], tensors [name, shape, qtype, raw]."""
    meta: list = field(default_factory=list)
    tensors: list = field(default_factory=list)

    def copy(self) -> Model:
        return Model([list(m) for m in self.meta], [list(t) for t in self.tensors])

    def arch(self) -> str:
        return next((v for k, _, v in self.meta if k == "general.architecture"), "")

    def to_bytes(self) -> bytes:
        w = GGUFWriter()
        for key, vtype, value in self.meta:
            w.add(key, value, vtype=vtype)
        for name, shape, qtype, raw in self.tensors:
            w.add_tensor(name, np.frombuffer(raw, np.uint8), qtype=qtype, shape=tuple(shape))
        return w.to_bytes()


def n_bytes(shape, qtype: str) -> int:
    qt, n = BY_NAME[qtype], int(np.prod(shape, dtype=np.int64))
    return n // qt.block_size * qt.type_size


def fill(shape, qtype: str, rng: np.random.Generator) -> bytes:
    """Plausible data: floats ~N(0, 0.1); quantized blocks random with their leading f16 scale(s) small."""
    qt, n = BY_NAME[qtype], int(np.prod(shape, dtype=np.int64))
    floats = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}
    if qtype in floats:
        return (rng.standard_normal(n) * 0.1).astype(floats[qtype]).tobytes()
    if qtype == "BF16":
        return ((rng.standard_normal(n) * 0.1).astype("<f4").view("<u4") >> 16).astype("<u2").tobytes()
    raw = rng.integers(0, 256, n_bytes(shape, qtype), np.uint8).reshape(-1, qt.type_size)
    lead = {"Q4_0": 2, "Q8_0": 2, "Q5_0": 2, "Q4_1": 4, "Q5_1": 4, "Q4_K": 4, "Q5_K": 4}.get(qtype, 0)
    raw[:, :lead] = np.frombuffer(np.full(lead // 2, 0.004, "<f2").tobytes(), np.uint8)
    if qtype in ("Q2_K", "Q3_K", "Q6_K"):  # d (and dmin) trail the block
        tail = {"Q2_K": 4, "Q3_K": 2, "Q6_K": 2}[qtype]
        raw[:, -tail:] = np.frombuffer(np.full(tail // 2, 0.004, "<f2").tobytes(), np.uint8)
    return raw.tobytes()


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (the alphabet of a byte-level BPE vocab)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def gpt2_vocab() -> list[list]:
    """272 tokens: 256 bytes, 15 merged pairs, <|endoftext|> (BOS and EOS)."""
    pairs = [(chr(97 + i), chr(98 + i)) for i in range(15)]
    tokens = _byte_chars() + [a + b for a, b in pairs] + ["<|endoftext|>"]
    v = len(tokens)
    return [["tokenizer.ggml.model", STRING, "gpt2"], ["tokenizer.ggml.pre", STRING, "default"],
            ["tokenizer.ggml.tokens", None, tokens],
            ["tokenizer.ggml.token_type", None, np.array([1] * (v - 1) + [3], np.int32)],
            ["tokenizer.ggml.merges", None, [f"{a} {b}" for a, b in pairs]],
            ["tokenizer.ggml.bos_token_id", U32, v - 1], ["tokenizer.ggml.eos_token_id", U32, v - 1]]


@dataclass(frozen=True)
class Geometry:
    """A decoder's shape. The default is the tiny llama the tests attack."""
    arch: str = "llama"  # llama | qwen2 (q/k/v biases) | gemma3 (q/k norms, post norms, tied)
    n_layer: int = 2
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 256
    n_ctx: int = 128
    n_rot: int = 16
    tied: bool = False
    window: int = 0  # sliding window (llama, gemma3)
    types: tuple = ()  # matrix types, cycled (default: six different ones)


def random_geometry(rng: random.Random) -> Geometry:
    head_dim = rng.choice([2, 4, 8, 16, 32, 48, 64, 128, 256, 1024, 1040])
    heads = [(kv, kv * g) for kv in (1, 2, 3) for g in (1, 2, 3, 4, 8, 9) if kv * g * head_dim <= 4096]
    n_head_kv, n_head = rng.choice(heads or [(1, 1)])
    n_embd = rng.choice([32, 64, 96, 256])
    n_rot = rng.choice([r for r in (head_dim, head_dim // 4 * 2, 2) if r % 2 == 0 and 2 <= r <= 1024])
    types = tuple(rng.choice(MATMUL_32) for _ in range(4))
    return Geometry(arch=rng.choice(["llama", "qwen2", "gemma3"]), n_layer=rng.choice([1, 2, 3]),
                    n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                    n_ff=rng.choice([32, 96, 256, 512]), n_ctx=rng.choice([4, 33, 128, 2**31 - 1]), n_rot=n_rot,
                    tied=rng.random() < 0.5, window=rng.choice([0, 0, 1, 3, 100]), types=types)


def _decoder_meta(g: Geometry, n_vocab: int) -> list[list]:
    a = g.arch
    meta = [["general.architecture", STRING, a], [f"{a}.block_count", U32, g.n_layer],
            [f"{a}.context_length", U32, g.n_ctx], [f"{a}.embedding_length", U32, g.n_embd],
            [f"{a}.feed_forward_length", U32, g.n_ff], [f"{a}.attention.head_count", U32, g.n_head],
            [f"{a}.attention.head_count_kv", U32, g.n_head_kv], [f"{a}.attention.key_length", U32, g.head_dim],
            [f"{a}.attention.value_length", U32, g.head_dim], [f"{a}.rope.dimension_count", U32, g.n_rot],
            [f"{a}.attention.layer_norm_rms_epsilon", F32, 1e-5], [f"{a}.rope.freq_base", F32, 10000.0]]
    if a == "llama":
        meta.append([f"{a}.vocab_size", U32, n_vocab])
    if g.window and a in ("llama", "gemma3"):
        meta.append([f"{a}.attention.sliding_window", U32, g.window])
    return meta


def _decoder_layer(g: Geometry) -> list[tuple]:
    """(name in block, GGUF shape ne0 first, type). ref: llama.cpp src/llama-arch.cpp tensor names."""
    d, q, kv, ff = g.n_embd, g.n_head * g.head_dim, g.n_head_kv * g.head_dim, g.n_ff
    types = g.types or ("Q8_0", "F16", "Q4_0", "F32", "Q8_0", "Q5_1", "Q4_K" if ff % 256 == 0 else "F16")
    mats = [("attn_q", (d, q)), ("attn_k", (d, kv)), ("attn_v", (d, kv)), ("attn_output", (q, d)),
            ("ffn_gate", (d, ff)), ("ffn_up", (d, ff)), ("ffn_down", (ff, d))]
    fit = lambda t, k: t if k % BY_NAME[t].block_size == 0 else "F16"  # noqa: E731  (rows of k values)
    out = [(f"{n}.weight", s, fit(types[i % len(types)], s[0])) for i, (n, s) in enumerate(mats)]
    out += [("attn_norm.weight", (d,), "F32"), ("ffn_norm.weight", (d,), "F32")]
    if g.arch == "qwen2":
        out += [("attn_q.bias", (q,), "F32"), ("attn_k.bias", (kv,), "F32"), ("attn_v.bias", (kv,), "F32")]
    if g.arch == "gemma3":
        out += [("attn_q_norm.weight", (g.head_dim,), "F32"), ("attn_k_norm.weight", (g.head_dim,), "F32"),
                ("post_attention_norm.weight", (d,), "F32"), ("post_ffw_norm.weight", (d,), "F32")]
    return out


def tiny_decoder(g: Geometry = Geometry(), seed: int = 0) -> Model:
    """A decoder of geometry g with a 272-token byte-level BPE vocab and random weights."""
    rng, vocab = np.random.default_rng(seed), gpt2_vocab()
    n_vocab = len(vocab[2][2])
    named = [(f"blk.{i}.{n}", s, t) for i in range(g.n_layer) for n, s, t in _decoder_layer(g)]
    named += [("token_embd.weight", (g.n_embd, n_vocab), "Q8_0" if g.n_embd % 32 == 0 else "F16"),
              ("output_norm.weight", (g.n_embd,), "F32")]
    if not (g.tied or g.arch == "gemma3"):
        named.append(("output.weight", (g.n_embd, n_vocab), "F16"))
    return Model(_decoder_meta(g, n_vocab) + vocab, [[n, list(s), t, fill(s, t, rng)] for n, s, t in named])


def tiny_bert(seed: int = 0, n_embd: int = 64, n_head: int = 4, n_ff: int = 128, n_ctx: int = 32,
              n_layer: int = 2) -> Model:
    """A bert encoder (post-norm blocks, learned positions, 2 token types, mean pooling)."""
    rng, letters = np.random.default_rng(seed), [chr(c) for c in range(97, 123)]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + ["\u2581" + c for c in letters] + letters
    d, v = n_embd, len(tokens)
    meta = [["general.architecture", STRING, "bert"], ["bert.block_count", U32, n_layer],
            ["bert.context_length", U32, n_ctx], ["bert.embedding_length", U32, d],
            ["bert.feed_forward_length", U32, n_ff], ["bert.attention.head_count", U32, n_head],
            ["bert.attention.layer_norm_epsilon", F32, 1e-12], ["bert.attention.causal", BOOL, False],
            ["bert.pooling_type", U32, 1], ["tokenizer.ggml.model", STRING, "bert"],
            ["tokenizer.ggml.tokens", None, tokens],
            ["tokenizer.ggml.token_type", None, np.array([3] * 5 + [1] * (v - 5), np.int32)]]
    meta += [[f"tokenizer.ggml.{k}_token_id", U32, i] for k, i in
             (("padding", 0), ("unknown", 1), ("bos", 2), ("seperator", 3), ("eos", 3), ("mask", 4))]
    q8 = "Q8_0" if d % 32 == 0 else "F16"
    layer = [(f"attn_{x}.weight", (d, d), q8) for x in "qkv"] + [(f"attn_{x}.bias", (d,), "F32") for x in "qkv"]
    layer += [("attn_output.weight", (d, d), "F16"), ("attn_output.bias", (d,), "F32"),
              ("ffn_up.weight", (d, n_ff), q8), ("ffn_up.bias", (n_ff,), "F32"),
              ("ffn_down.weight", (n_ff, d), "F32"), ("ffn_down.bias", (d,), "F32")]
    layer += [(f"{n}.{p}", (d,), "F32") for n in ("attn_output_norm", "layer_output_norm") for p in ("weight", "bias")]
    named = [(f"blk.{i}.{n}", s, t) for i in range(n_layer) for n, s, t in layer]
    named += [("token_embd.weight", (d, v), "F16"), ("position_embd.weight", (d, n_ctx), "F32"),
              ("token_types.weight", (d, 2), "F32"), ("token_embd_norm.weight", (d,), "F32"),
              ("token_embd_norm.bias", (d,), "F32")]
    return Model(meta, [[n, list(s), t, fill(s, t, rng)] for n, s, t in named])


def random_bert(rng: random.Random, seed: int) -> Model:
    n_head = rng.choice([1, 2, 4, 12])
    return tiny_bert(seed, n_embd=n_head * rng.choice([2, 8, 32]), n_head=n_head, n_ff=rng.choice([32, 100]),
                     n_ctx=rng.choice([3, 32]), n_layer=rng.choice([1, 2]))


def from_file(path: str) -> Model:
    r = GGUFReader(path)
    meta = [[k, r.metadata_types[k], v] for k, v in r.metadata.items() if k != "general.alignment"]
    return Model(meta, [[n, list(t.shape), t.qtype.name, bytes(r.data(n))] for n, t in r.tensors.items()])


BASES = {"llama": tiny_decoder, "bert": tiny_bert}


# --- edits: JSON-able lists, applied in order --------------------------------------------------
def _int_vtype(v: int, old: int) -> int:
    """old if v fits it, else the narrowest of i32, u32, i64, u64 that holds v."""
    ranges = {0: (0, 255), 1: (-128, 127), 2: (0, 65535), 3: (-32768, 32767), U32: (0, 2**32 - 1),
              I32: (-2**31, 2**31 - 1), U64: (0, 2**64 - 1), I64: (-2**63, 2**63 - 1)}
    for t in (old, I32, U32, I64, U64):
        if t in ranges and ranges[t][0] <= v <= ranges[t][1]:
            return t
    raise ValueError(f"{v} fits no GGUF integer type")


def _tensor(m: Model, name: str) -> list:
    return next(t for t in m.tensors if t[0] == name)


def apply(m: Model, edits: list, seed: int = 0) -> Model:
    """edits: ["set", key, value, vtype|None] ["del", key] ["shape", name, dims] ["type", name, qtype]
    ["drop", name] ["rename", name, new] ["add", name, dims, qtype]. Data is refilled when its size changes."""
    m, rng = m.copy(), np.random.default_rng(seed)
    for op, name, *args in edits:
        if op in ("set", "del"):
            m.meta = [e for e in m.meta if e[0] != name]
            if op == "set":
                value, vtype = args
                m.meta.append([name, vtype, value])
        elif op == "drop":
            m.tensors = [t for t in m.tensors if t[0] != name]
        elif op == "rename":
            _tensor(m, name)[0] = args[0]
        elif op == "add":
            m.tensors.append([name, list(args[0]), args[1], fill(args[0], args[1], rng)])
        else:
            t = _tensor(m, name)
            t[1 if op == "shape" else 2] = list(args[0]) if op == "shape" else args[0]
            if len(t[3]) != n_bytes(t[1], t[2]):
                t[3] = fill(t[1], t[2], rng)
    return m


def _model_keys(m: Model) -> list[list]:
    return [e for e in m.meta if e[0].startswith(m.arch() + ".") or e[0] == "general.architecture"]


def _mutate_int(m: Model, rng: random.Random) -> list:
    key, vtype, v = rng.choice([e for e in m.meta if e[1] in INT_TYPES])
    new = rng.choice(EDGES) if rng.random() < 0.6 else v + rng.choice([-2, -1, 1, 2, v, -v, v * 2, -(v // 2)])
    new = max(-2**63, min(2**64 - 1, new))
    return ["set", key, new, _int_vtype(new, vtype)]


def _mutate_type(m: Model, rng: random.Random) -> list:
    """A model key (general.architecture too) to a float edge value or a value of another type."""
    key, vtype, _ = rng.choice(_model_keys(m))
    if rng.random() < 0.3 and vtype != F32:
        return ["set", key, rng.choice(FLOATS), F32]
    other = [w for w in WRONG_TYPES if w[1] != vtype and not (w[1] in INT_TYPES and vtype in INT_TYPES)]
    value, new = rng.choice(other)
    return ["set", key, value, new]


def _mutate_shape(m: Model, rng: random.Random) -> list:
    name, shape, *_ = rng.choice(m.tensors)
    shape = list(shape)
    if len(shape) == 2 and shape[0] != shape[1] and rng.random() < 0.4:
        return ["shape", name, shape[::-1]]
    i = rng.randrange(len(shape))
    shape[i] = max(1, rng.choice([shape[i] * 2, shape[i] * 4, shape[i] // 2, shape[i] + 1, shape[i] - 1,
                                  shape[i] + 32, shape[i] + 256, 1, 3 * shape[i] // 4]))
    if rng.random() < 0.1:
        shape = shape + [rng.choice([1, 2])]
    return ["shape", name, shape]


def _mutate_tensor(m: Model, rng: random.Random) -> list:
    name, shape, *_ = rng.choice(m.tensors)
    r = rng.random()
    if r < 0.5:
        return ["type", name, rng.choice(RETYPES)]
    if r < 0.7:
        return ["drop", name]
    if r < 0.85:
        block = rng.choice(["0", "1", "2", "99"])
        return ["rename", name, name.replace(name.split(".")[1], block, 1) if name.startswith("blk.")
                else "blk." + block + "." + name]
    return ["add", f"blk.{rng.choice(['0', '2'])}.{rng.choice(['attn_q.bias', 'attn_q_norm.weight', 'x.weight'])}",
            [64], "F32"]


def mutations(m: Model, rng: random.Random) -> list:
    """1 to 3 edits: integers to edge values most often, then shapes, wrong types, tensor changes."""
    ops = [_mutate_int] * 4 + [_mutate_shape] * 3 + [_mutate_type] * 2 + [_mutate_tensor] * 2
    n = rng.choices([1, 2, 3], [6, 3, 1])[0]
    return [rng.choice(ops)(m, rng) for _ in range(n)]


def case(bases: list[str | Model], seed: int, i: int, p_random: float = 0.3) -> tuple[str, list, bytes]:
    """Case i of seed: (base description, edits, file bytes). bases: tiny base names or loaded Models;
    with probability p_random a tiny base is redrawn with a random geometry. One case in ten has no edit
    (a valid file, which must load)."""
    rng = random.Random(f"{seed}:{i}")
    base = bases[i % len(bases)]
    if isinstance(base, Model):
        name = "file"
    elif rng.random() < p_random:
        g = random_geometry(rng) if base == "llama" else None
        base, name = (tiny_decoder(g, i), repr(g)) if g else (random_bert(rng, i), "random bert")
    else:
        base, name = _cached(base), base
    while True:
        edits = [] if rng.random() < 0.1 else mutations(base, rng)
        try:
            return name, edits, apply(base, edits, i).to_bytes()
        except (ValueError, StopIteration):  # not writable (a rename onto a dropped name, ...): redraw
            continue


@functools.cache
def _cached(name: str) -> Model:
    return BASES[name]()
