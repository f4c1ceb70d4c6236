"""The backend boundary: a model describes its forward pass as typed ops on float32 arrays, one method per
op; the builder checks dtype, shape and contiguity when each op is added (a wrong shape fails while the
graph is built, never inside C), owns the quantized-activation buffers and the batch description, and
emits the C graph (graph.py). Models never see pointers, ctypes structs or packed codes.

A matmul quantizes its input once per write: the builder tracks which op last wrote each array and adds a
quant node only when the input changed since it was last quantized, so three projections of one normed
input share one quantization. When the input was written by the node just added, an RMSNorm or a gated
activation over whole rows, that node quantizes each row as it finishes it instead (one node and one
memory pass fewer; the same row functions in the same order, so the same bits). A matmul's bias and a
residual add run inside its chunks. A second backend (a GPU) implements the same methods."""
from __future__ import annotations

import bisect

import numpy as np

from .arena import Arena, layout
from .graph import Batch, Graph
from .kvtypes import kv_codes
from .matmul import QExperts, QWeight, _ActStruct, act_block
from .ops import ACTS, BatchMeta

_F32 = np.dtype(np.float32)


def _f32(a, name: str, shape: tuple | None = None) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.dtype != _F32 or not a.flags.c_contiguous:
        raise ValueError(f"{name} must be a C-contiguous float32 array, got {getattr(a, 'dtype', type(a))}")
    if shape is not None and a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape}, expected {shape}")
    return a


class _Act:
    """A matmul input x [n, k] and its canonical Q8 form, filled by a quant node."""

    def __init__(self, x: np.ndarray, bs: int, alloc=np.zeros):
        n, k = x.shape
        self.x, self.version = x, -1
        self.q = alloc((n, k), np.int8)
        self.d = alloc((n, max(k // 32, 1)), np.float32)
        self.s16 = alloc((n, max(k // 16, 1)), np.int32)
        self.struct = s = _ActStruct()
        s.k, s.bs = k, bs
        self.point()

    def point(self):
        """The struct at the arrays (again, once they have moved)."""
        s = self.struct
        s.x, s.q, s.d, s.s16 = self.x.ctypes.data, self.q.ctypes.data, self.d.ctypes.data, self.s16.ctypes.data


class BatchSlot:
    """Where the tokens of one run live (positions, sequences, page tables); filled before each run.
    Bidirectional attention reads a second description whose positions are each sequence's last one
    (the attention kernel attends to every key up to the position it is given)."""

    def __init__(self, n_tokens: int):
        self.n_tokens, self.struct, self.both_ways = n_tokens, Batch(), None
        self.pos = np.zeros(n_tokens, np.int32)  # positions, also read by rope
        self._meta = self._ends = None

    def fill(self, meta: BatchMeta):
        if len(meta.tok_pos) != self.n_tokens:
            raise ValueError(f"batch of {len(meta.tok_pos)} tokens for a graph of {self.n_tokens}")
        self.pos[:] = meta.tok_pos
        self._meta = meta  # its arrays must outlive the run
        meta.fill(self.struct)
        if self.both_ways is not None:
            last = np.zeros(len(meta.page_tables), np.int32)
            np.maximum.at(last, meta.tok_seq, meta.tok_pos)
            self._ends = BatchMeta(last[meta.tok_seq], meta.tok_seq, meta.page_tables, meta.page_size)
            self._ends.fill(self.both_ways)


GATINGS = {"softmax": 0, "softmax_chosen": 1, "sigmoid": 2}  # csrc/graph.h MOE_ROUTE
MAX_EXPERTS = 4096  # csrc/moe.c LY_MOE_MAX_EXPERTS
MAX_EXPERTS_USED = 64  # csrc/moe.c


class Route:
    """One batch's choice of experts (a moe_route node's outputs): weights [n, k] in slot order; order and
    pos, the gathered batch's rows and their inverse; offs [n_expert + 1], each expert's first row."""

    def __init__(self, n: int, n_expert: int, k: int, alloc=np.zeros):
        self.n, self.n_expert, self.k = n, n_expert, k
        self.weights = alloc((n, k), np.float32)
        self.order, self.pos = alloc(n * k, np.int32), alloc(n * k, np.int32)
        self.offs = alloc(n_expert + 1, np.int32)


class Builder:
    def __init__(self, fuse: bool = True, arena: Arena | None = None):
        """fuse=False: every quantization and residual add its own node (bench/profile_ops.py compares).
        arena: where finish() lays out the scratch buffers (tensor()'s but io ones, the activations' Q8
        forms, routes), by lifetime; None: each its own zeroed array."""
        self._g, self.fuse, self._arena = Graph(), fuse, arena
        self._scratch: dict[int, list[np.ndarray]] = {}  # buffer key -> its arrays, placeholders until finish()
        self._touch: list[tuple[set, set]] = []  # per node: the keys it reads, the keys it writes
        self._written: dict[int, int] = {}  # buffer key -> number of the op that last wrote it (1-based)
        self._read: dict[int, int] = {}  # buffer key -> number of the last op that read it since
        self._acts: dict[tuple[int, int], _Act] = {}  # (input id, block) -> its form; holds the input for life
        self._fusable = None  # (node number, output, pointers) of the last node if it may quantize its rows

    @staticmethod
    def _key(a) -> int:
        """The buffer an operand lives in: the array its views share (conservative: all views conflict)."""
        while isinstance(a, np.ndarray) and a.base is not None and isinstance(a.base, np.ndarray):
            a = a.base
        return id(a)

    def _op(self, op: str, ptrs, sizes=(), floats=(), writes=(), keep=(), reads=None):
        """Add a node; it waits for the latest earlier node that wrote what it reads or writes, or read what
        it writes. reads: its inputs (default: every array among ptrs that it does not write)."""
        if reads is None:
            reads = [p for p in ptrs if isinstance(p, np.ndarray) and all(p is not w for w in writes)]
        r, w = [self._key(a) for a in reads], [self._key(a) for a in writes]
        after = max([self._written.get(k, 0) for k in r + w] + [self._read.get(k, 0) for k in w]) - 1
        self._g.add(op, ptrs, sizes, floats, keep, after=after)
        self._fusable = None
        return self._mark(r, w)

    def _mark(self, reads, writes) -> int:
        n = len(self._g._specs)
        while len(self._touch) < n:
            self._touch.append((set(), set()))
        self._touch[n - 1][0].update(reads)
        self._touch[n - 1][1].update(writes)
        for k in reads:
            self._read[k] = n
        for k in writes:
            self._written[k], self._read[k] = n, 0
        return n

    def _quantize(self, x: np.ndarray, act: _Act):
        """Brings act up to date with x: inside the node that just wrote x when it can, else a quant node."""
        f, key = self._fusable, self._key(act)
        if f is not None and f[1] is x and f[0] == len(self._g._specs):
            after = max(self._g._specs[-1][4], self._written.get(key, 0) - 1, self._read.get(key, 0) - 1)
            self._g.replace_last(f[2] + [act.struct], after, keep=(act,))
            self._mark((), (key,))
        else:
            self._op("quant", (act.struct,), (x.shape[0],), reads=(x,), writes=(act,))
        act.version = self._written.get(self._key(x), 0)

    def tensor(self, *shape: int, io: bool = False) -> np.ndarray:
        """A new float32 activation buffer: zeros of its own when io (the caller reads or writes it between
        runs) or without an arena; else scratch, laid out in the arena by finish()."""
        if io or self._arena is None:
            return np.zeros(shape, np.float32)
        return self._scratch_array(shape, np.float32)

    def _scratch_array(self, shape, dtype) -> np.ndarray:
        a = np.empty(shape, dtype)  # a placeholder: nodes point at it until finish() moves them
        self._scratch[id(a)] = [a]
        return a

    def _alloc(self):
        """How the builder's own buffers (activation forms, routes) are made."""
        return np.zeros if self._arena is None else np.empty  # placeholders, as tensor()'s

    def finish(self):
        """Lays the scratch buffers out in the arena by lifetime (arena.layout) and points the nodes at them:
        a buffer takes bytes another held only when that one's last node is done before its first writer
        starts (no node waits for more than it did). A buffer a node reads before any writes it (or none
        uses) gets zeros of its own, as without an arena."""
        if self._arena is None or not self._scratch:
            return
        first, last, fresh = {}, {}, {}
        for i, (reads, writes) in enumerate(self._touch):
            for k in reads | writes:
                if k in self._scratch:
                    if k not in first:
                        first[k], fresh[k] = i, k in writes and k not in reads
                    last[k] = i
        laid = [k for k in self._scratch if fresh.get(k)]
        sizes = [sum(-(-a.nbytes // 64) * 64 for a in self._scratch[k]) for k in laid]
        ready = [self._g._specs[first[k]][4] for k in laid]  # what each first writer waits for already
        offsets, total = layout(sizes, [first[k] for k in laid], [last[k] for k in laid], ready)
        buf = self._arena.buffer(total)
        self.laid_out = (sum(sizes), total)  # bytes of the buffers laid out, bytes they take in the arena
        moved: dict[int, np.ndarray] = {}  # id(placeholder) -> where it lives now
        for k, off in zip(laid, offsets):
            for a in self._scratch[k]:
                moved[id(a)] = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
                off += -(-a.nbytes // 64) * 64
        for k in self._scratch:
            if not fresh.get(k):
                for a in self._scratch[k]:
                    moved[id(a)] = np.zeros(a.shape, a.dtype)
        self._relocate(moved, {id(a): a for arrays in self._scratch.values() for a in arrays})
        self._g.keep_only(lambda o: not (isinstance(o, np.ndarray) and self._key(o) in self._scratch),
                          [buf, *moved.values()])
        self._scratch, self._fusable, self._touch = {}, None, []

    def _relocate(self, moved: dict[int, np.ndarray], placeholders: dict[int, np.ndarray]):
        """Every node pointer into a placeholder, and the activation forms' structs, at the new arrays."""
        old = sorted((a.ctypes.data, a.nbytes, moved[i].ctypes.data) for i, a in placeholders.items() if a.nbytes)
        starts = [start for start, _, _ in old]

        def move(p: int) -> int:
            j = bisect.bisect_right(starts, p) - 1
            if j < 0 or p >= starts[j] + old[j][1]:
                return p
            return old[j][2] + p - starts[j]
        self._g.move_pointers(move)
        for act in self._acts.values():
            for name in ("x", "q", "d", "s16"):
                a = getattr(act, name)
                if id(a) in moved:
                    setattr(act, name, moved[id(a)])
            act.point()

    def batch(self, n_tokens: int) -> BatchSlot:
        return BatchSlot(n_tokens)

    # ---- ops ----
    def rmsnorm(self, x: np.ndarray, w: np.ndarray, eps: float, out: np.ndarray | None = None) -> np.ndarray:
        """RMSNorm of every d-value row of x (d = w.shape[-1]: per head when d is the head size); w [G, d]:
        G groups of d per row of x, each with its own weight (Mamba2's group norm); out may be x."""
        _f32(x, "x"), _f32(w, "norm weight")
        d, G = w.shape[-1], (w.shape[0] if w.ndim == 2 else 1)
        if w.ndim not in (1, 2) or x.size % d or (G > 1 and x.shape[-1] != G * d):
            raise ValueError(f"norm weight of {w.shape} does not divide x of {x.shape}")
        out = self.tensor(*x.shape) if out is None else _f32(out, "out", x.shape)
        n = self._op("rmsnorm", (x, w, out), (x.size // d, d, G), (eps,), writes=(out,))
        if self.fuse and out.ndim == 2 and out.shape[1] == d:
            self._fusable = (n, out, [x, w, out])
        return out

    def layernorm(self, x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float,
                  out: np.ndarray | None = None) -> np.ndarray:
        """LayerNorm with bias of every d-value row of x (d = len(w)); out may be x."""
        _f32(x, "x"), _f32(w, "norm weight"), _f32(b, "norm bias", w.shape)
        d = w.shape[0]
        if w.ndim != 1 or x.size % d:
            raise ValueError(f"norm weight of {w.shape} does not divide x of {x.shape}")
        out = self.tensor(*x.shape) if out is None else _f32(out, "out", x.shape)
        self._op("layernorm", (x, w, b, out), (x.size // d, d), (eps,), writes=(out,))
        return out

    def matmul(self, x: np.ndarray, w: QWeight, bias: np.ndarray | None = None,
               out: np.ndarray | None = None, residual: np.ndarray | None = None) -> np.ndarray:
        """out [n, m] = x [n, k] . w[m, k]^T (+ bias [m]); then residual [n, m] += out when given."""
        _f32(x, "x")
        if x.ndim != 2 or x.shape[1] != w.k:
            raise ValueError(f"x of {x.shape} for {w!r}")
        n = x.shape[0]
        out = self.tensor(n, w.m) if out is None else _f32(out, "out", (n, w.m))
        if bias is not None:
            _f32(bias, "bias", (w.m,))
        if residual is not None and (_f32(residual, "residual", (n, w.m)) is out or residual is x):
            raise ValueError("a residual must be its own array")
        act = self._act(x, w)
        fused = residual if self.fuse else None
        writes = (out,) if fused is None else (out, fused)
        self._op("matmul", (w.raw, act.struct, out, bias, fused), (w.row_bytes, w.type_code, w.m, n),
                 writes=writes, keep=(act,), reads=tuple(a for a in (x, act, bias, fused) if a is not None))
        if residual is not None and fused is None:
            self.add(residual, out)
        return out

    def _act(self, x: np.ndarray, w) -> _Act:
        """x's activation form for weight w (its act_block), quantized when x changed since it last was."""
        bs = 32 if w.is_float else act_block(w.qtype)
        act = self._acts.get((id(x), bs))
        if act is None:
            act = self._acts[(id(x), bs)] = _Act(x, bs, self._alloc())
            if self._arena is not None:
                self._scratch[id(act)] = [act.q, act.d, act.s16]
        if not w.is_float and act.version != self._written.get(self._key(x), 0):
            self._quantize(x, act)
        return act

    def moe_route(self, logits: np.ndarray, k: int, gating: str = "softmax", norm: bool = False,
                  scale: float = 1.0, expert_scale: np.ndarray | None = None,
                  select_bias: np.ndarray | None = None) -> Route:
        """Each token's k experts, from its router logits [n, n_expert]: the k largest, weighted by the
        softmax over all experts ('softmax') or over the k chosen ('softmax_chosen'); or ('sigmoid') the k
        largest sigmoid scores plus select_bias [n_expert], weighted by their scores. Then divided by their
        sum when norm, times scale, times expert_scale [n_expert] of the chosen expert when given."""
        _f32(logits, "router logits")
        n, n_expert = logits.shape
        if not 1 <= k <= min(n_expert, MAX_EXPERTS_USED):
            raise ValueError(f"{k} experts used of {n_expert} (at most {MAX_EXPERTS_USED})")
        extra = expert_scale
        if select_bias is not None or gating == "sigmoid":
            if expert_scale is not None or gating != "sigmoid" or n_expert > MAX_EXPERTS:
                raise ValueError(f"selection biases go with sigmoid gating alone, of at most {MAX_EXPERTS} experts")
            extra = select_bias
        if extra is not None:
            _f32(extra, "expert scale or selection bias", (n_expert,))
        r = Route(n, n_expert, k, self._alloc())
        if self._arena is not None:
            for a in (r.weights, r.order, r.pos, r.offs):
                self._scratch[id(a)] = [a]
        self._op("moe_route", (logits, r.weights, r.order, r.pos, r.offs, extra),
                 (n, n_expert, k, GATINGS[gating], int(norm)), (scale,), writes=(r.weights, r.order, r.pos, r.offs),
                 reads=(logits,) if extra is None else (logits, extra))
        return r

    def gather(self, x: np.ndarray, route: Route) -> np.ndarray:
        """[n * k, d]: row r is x's row of the token that row r of the gathered batch belongs to."""
        _f32(x, "x")
        if x.ndim != 2 or x.shape[0] != route.n:
            raise ValueError(f"x of {x.shape} for a route of {route.n} tokens")
        out = self.tensor(route.n * route.k, x.shape[1])
        self._op("gather", (x, route.order, out), (route.n * route.k, x.shape[1], route.k), writes=(out,),
                 reads=(x, route.order))
        return out

    def matmul_experts(self, x: np.ndarray, w: QExperts, route: Route, bias: np.ndarray | None = None) -> np.ndarray:
        """[n * k, m]: each gathered row times its expert's matrix (+ that expert's bias [n_expert, m])."""
        _f32(x, "x", (route.n * route.k, w.k))
        if w.n_expert != route.n_expert:
            raise ValueError(f"{w!r} for a route over {route.n_expert} experts")
        if bias is not None:
            _f32(bias, "experts' bias", (w.n_expert, w.m))
        act, out = self._act(x, w), self.tensor(route.n * route.k, w.m)
        self._op("moe_matmul", (w.raw, act.struct, out, route.offs, bias), (w.row_bytes, w.qtype.id, w.m, w.n_expert,
                                                                         route.n * route.k, w.expert_bytes),
                 writes=(out,), keep=(act,), reads=tuple(a for a in (x, act, route.offs, bias) if a is not None))
        return out

    def moe_combine(self, y: np.ndarray, route: Route) -> np.ndarray:
        """[n, d]: each token's gathered rows of y [n * k, d] weighted and summed in slot order."""
        _f32(y, "y")
        if y.ndim != 2 or y.shape[0] != route.n * route.k:
            raise ValueError(f"y of {y.shape} for a route of {route.n} x {route.k}")
        out = self.tensor(route.n, y.shape[1])
        self._op("moe_combine", (y, route.weights, route.pos, out), (route.n, y.shape[1], route.k), writes=(out,),
                 reads=(y, route.weights, route.pos))
        return out

    def sigmoid_scale(self, y: np.ndarray, g: np.ndarray) -> np.ndarray:
        """In place: row t of y [n, d] times sigmoid(g[t]), g [n, 1] (a shared expert's gate)."""
        _f32(y, "y")
        if y.ndim != 2:
            raise ValueError(f"y of {y.shape} must be [n, d]")
        _f32(g, "g", (y.shape[0], 1))
        self._op("sigmoid_scale", (y, g), (y.shape[0], y.shape[1]), writes=(y,), reads=(y, g))
        return y

    def row_scale(self, y: np.ndarray, s: np.ndarray, alpha: float, rank: int) -> np.ndarray:
        """In place: row t of y [n, d] times s[t] * alpha / rank (s[t] when alpha is 0), s float32 [n]; rows
        of scale 0 become zeros (a LoRA term for the tokens of sequences that do not use it)."""
        _f32(y, "y")
        if y.ndim != 2 or rank < 1:
            raise ValueError(f"row scale of y {y.shape} at rank {rank}")
        _f32(s, "row scales", (y.shape[0],))
        self._op("row_scale", (y, s), (y.shape[0], y.shape[1]), (alpha, float(rank)), writes=(y,), reads=(y, s))
        return y

    def conv(self, x: np.ndarray, w: np.ndarray, state: np.ndarray, batch: BatchSlot,
             bias: np.ndarray | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """A causal depthwise convolution of x [n, C] by w [C, K] over each token's sequence, reading and
        updating the sequence's slot of state [slots, K - 1, C] (its last K - 1 inputs); out may be x."""
        _f32(x, "x"), _f32(w, "conv weight"), _f32(state, "conv state")
        if x.ndim != 2 or x.shape[0] != batch.n_tokens or w.ndim != 2 or w.shape[0] != x.shape[1] or w.shape[1] < 2:
            raise ValueError(f"conv of x {x.shape} by w {w.shape} over {batch.n_tokens} tokens")
        n, C, K = *x.shape, w.shape[1]
        if state.ndim != 3 or state.shape[1:] != (K - 1, C):
            raise ValueError(f"conv state {state.shape} for {K} taps over {C} channels")
        if bias is not None:
            _f32(bias, "conv bias", (C,))
        out = self.tensor(n, C) if out is None else _f32(out, "out", (n, C))
        taps = np.ascontiguousarray(w.T)  # [K, C]: a tap's weights for consecutive channels side by side
        self._op("conv", (x, taps, out, state, batch.struct, bias), (n, C, K), writes=(out, state), keep=(batch,),
                 reads=tuple(a for a in (x, taps, state, bias) if a is not None))
        return out

    def delta_rule(self, qkv: np.ndarray, ba: np.ndarray, a: np.ndarray, dt_bias: np.ndarray, state: np.ndarray,
                   batch: BatchSlot, *, tiled: bool, eps: float, planar: bool = False) -> np.ndarray:
        """The gated delta rule (csrc/graph.h DELTA_RULE) over each token's sequence: qkv [n, 2 Hk dk + Hv dv]
        (planar: [3, n, Hk dk], Hk dk = Hv dv), ba [2, n, Hv] (b, then a), a and dt_bias [Hv], state [slots,
        Hv, dk, dv] (its slot read and updated) -> y [n, Hv dv]. A decay per state row (Kimi's KDA) when
        dt_bias is [Hv dk]: ba then [n Hv (1 + dk)] (b [n, Hv], then a [n, Hv dk]). tiled: v-head h reads
        k-head h % Hk, else h // (Hv / Hk)."""
        for arr, name in ((qkv, "qkv"), (ba, "ba"), (a, "ssm_a"), (dt_bias, "dt_bias"), (state, "delta state")):
            _f32(arr, name)
        if state.ndim != 4 or not 0 < max(state.shape[2:]) <= 512:  # csrc/graph.h LY_DELTA_MAX_DIM
            raise ValueError(f"delta rule state {state.shape} must be [slots, Hv, dk <= 512, dv <= 512]")
        n, (hv, dk, dv) = batch.n_tokens, state.shape[1:]
        if planar:
            hk, odd = divmod(qkv.shape[2], dk) if qkv.ndim == 3 and qkv.shape[:2] == (3, n) else (0, 1)
            odd = odd or hk * dk != hv * dv
        else:
            hk, odd = divmod(qkv.shape[1] - hv * dv, 2 * dk) if qkv.ndim == 2 and qkv.shape[0] == n else (0, 1)
        if odd or hk < 1 or hv % hk:
            raise ValueError(f"delta rule qkv {qkv.shape} over {n} tokens for state {state.shape}")
        per_row = dt_bias.shape == (hv * dk,) and dk > 1
        _f32(ba, "ba", (n * hv * (1 + dk),) if per_row else (2, n, hv)), _f32(a, "ssm_a", (hv,))
        _f32(dt_bias, "dt_bias", (hv * dk,) if per_row else (hv,))
        params = np.concatenate([a, dt_bias])
        out = self.tensor(n, hv * dv)
        flags = int(tiled) | (2 if planar else 0) | (4 if per_row else 0)  # graph.h LY_DELTA_*
        self._op("delta_rule", (qkv, ba, params, out, state, batch.struct), (n, hk, hv, dk, dv, flags),
                 (eps, 1.0 / np.sqrt(dk)), writes=(out, state), keep=(batch,), reads=(qkv, ba, params, state))
        return out

    def head_matmul(self, x: np.ndarray, w: np.ndarray, out: np.ndarray, x_off: int = 0,
                    out_off: int = 0) -> np.ndarray:
        """Each head's own matrix on its own slice of each row: x [n, H * sx], w float32 [H, M, K],
        out [n, H * sy]; out[t, h sy + out_off + m] = w[h, m] . x[t, h sx + x_off : + K] (graph.h HEAD_MATMUL)."""
        _f32(x, "x"), _f32(w, "per-head weights"), _f32(out, "out")
        if w.ndim != 3 or x.ndim != 2 or out.ndim != 2 or x.shape[0] != out.shape[0]:
            raise ValueError(f"head matmul of x {x.shape} by {w.shape} into {out.shape}")
        (h, m, k), n = w.shape, x.shape[0]
        sx, sy = divmod(x.shape[1], h), divmod(out.shape[1], h)
        if sx[1] or sy[1] or x_off + k > sx[0] or out_off + m > sy[0]:
            raise ValueError(f"head matmul of x {x.shape} by {w.shape} into {out.shape} at {x_off}, {out_off}")
        self._op("head_matmul", (x.reshape(-1)[x_off:], w, out.reshape(-1)[out_off:]), (n * h, h, m, k, sx[0], sy[0]),
                 writes=(out,), reads=(x, w))
        return out

    def copy_rows(self, x: np.ndarray, out: np.ndarray, rows: int, width: int, x_off: int = 0,
                  out_off: int = 0) -> np.ndarray:
        """out viewed as `rows` rows, x as as many: out[r, out_off : + width] = x[r, x_off : + width]."""
        _f32(x, "x"), _f32(out, "out")
        sx, sy = divmod(x.size, rows), divmod(out.size, rows)
        if rows < 1 or sx[1] or sy[1] or x_off + width > sx[0] or out_off + width > sy[0]:
            raise ValueError(f"copy of {rows} rows of {width} from x {x.shape} into {out.shape}")
        self._op("copy_rows", (x.reshape(-1)[x_off:], out.reshape(-1)[out_off:]), (rows, width, sx[0], sy[0]),
                 writes=(out,), reads=(x,))
        return out

    def ssm_scan(self, xbc: np.ndarray, dt: np.ndarray, a: np.ndarray, d: np.ndarray, dt_bias: np.ndarray,
                 state: np.ndarray, batch: BatchSlot, n_group: int, bc: np.ndarray | None = None) -> np.ndarray:
        """Mamba's selective scan (graph.h SSM_SCAN) -> y [n, H * P]. xbc [n, H * P + 2 * n_group * N]: the
        conv's output after SiLU (x, B, C), or [n, H * P] (x) with bc [n, 2 * n_group * N] (B, C); dt [n, H]:
        raw, before dt_bias and softplus; d, dt_bias [H]. Mamba2: a [H], state [slots, H, P, N]; Mamba1: a
        [H, N] (one per channel and state), state [slots, N, H] (P = n_group = 1). Each sequence's slot is
        read and updated."""
        _f32(xbc, "xBC"), _f32(dt, "dt"), _f32(state, "ssm state")
        mamba1 = a.ndim == 2
        if state.ndim != (3 if mamba1 else 4) or n_group < 1 or (mamba1 and n_group != 1) or state.shape[1] % n_group:
            raise ValueError(f"ssm state {state.shape} for {n_group} groups and A of {a.shape}")
        if mamba1:
            (N, H), P = state.shape[1:], 1
        else:
            H, P, N = state.shape[1:]
        n = batch.n_tokens
        _f32(dt, "dt", (n, H))
        if bc is None:
            _f32(xbc, "xBC", (n, H * P + 2 * n_group * N))
        else:
            _f32(xbc, "x", (n, H * P)), _f32(bc, "BC", (n, 2 * n_group * N))
        _f32(a, "A", (H, N) if mamba1 else (H,))
        for v, name in ((d, "D"), (dt_bias, "dt_bias")):
            _f32(v, name, (H,))
        # read-only: copied once, kept by the graph; Mamba1's A as [N, H], its state's layout
        params = np.concatenate([(a.T if mamba1 else a).reshape(-1), d, dt_bias])
        y = self.tensor(n, H * P)
        reads = (xbc, dt, state) if bc is None else (xbc, bc, dt, state)
        self._op("ssm_scan", (xbc, dt, params, y, state, batch.struct, bc), (n, H, P, N, n_group, int(mamba1)),
                 writes=(y, state), keep=(batch,), reads=reads)
        return y

    def rope(self, x: np.ndarray, batch: BatchSlot, heads: int, head_dim: int, n_rot: int, base: float,
             neox: bool, factors: np.ndarray | None = None, linear: float = 1.0, mscale: float = 1.0) -> np.ndarray:
        """In place on x [n, heads * head_dim], at the batch's positions. factors [n_rot / 2]: each pair's
        frequency divided by its factor (Llama 3's rope_freqs, LongRoPE's); linear > 0: every frequency
        divided by it; mscale > 0: cos and sin multiplied by it (LongRoPE's attention factor)."""
        _f32(x, "x", (batch.n_tokens, heads * head_dim))
        if n_rot % 2 or not 0 < n_rot <= min(head_dim, 1024):
            raise ValueError(f"rope over {n_rot} of {head_dim} dims")
        if factors is not None:
            _f32(factors, "rope factors", (n_rot // 2,))
        if not (linear > 0 and mscale > 0):
            raise ValueError(f"RoPE scaling factors {linear}, {mscale} must be > 0")
        self._op("rope", (x, batch.pos, factors), (batch.n_tokens, heads, head_dim, n_rot, int(neox)),
                 (base, linear, mscale),
                 writes=(x,), keep=(batch,), reads=(x,) if factors is None else (x, factors))
        return x

    def position_scale(self, x: np.ndarray, batch: BatchSlot, beta: float, floor: int) -> np.ndarray:
        """In place: token t's row of x times 1 + beta * ln(1 + floor(pos_t / floor)) (Llama 4's attention
        temperature; 1 exactly below `floor`)."""
        _f32(x, "x")
        if x.ndim != 2 or x.shape[0] != batch.n_tokens or floor < 1:
            raise ValueError(f"position scale of x {x.shape} over {batch.n_tokens} tokens, floor {floor}")
        self._op("pos_scale", (x, batch.pos), (batch.n_tokens, x.shape[1], floor), (beta,), writes=(x,),
                 keep=(batch,), reads=(x,))
        return x

    def kv_write(self, pool, layer: int, k: np.ndarray, v: np.ndarray, batch: BatchSlot):
        """K and V [n, n_kv_head * head_dim] of the batch's tokens into the pool's layer, at their slots."""
        n_kv, hd = pool.dims[layer]
        _f32(k, "k", (batch.n_tokens, n_kv * hd)), _f32(v, "v", (batch.n_tokens, n_kv * hd))
        codes = kv_codes(pool.kv)
        pairs = ((pool.k[layer], k, codes & 0xff), (pool.v[layer], v, codes >> 8))
        if pool.v[layer] is pool.k[layer]:  # the layer's values are its keys: one array, written once
            if v is not k:
                raise ValueError(f"layer {layer}'s values are its keys: k and v must be one array")
            pairs = pairs[:1]
        for arr, x, code in pairs:
            self._op("kv_write", (arr, x, batch.struct), (n_kv, hd, code), writes=(arr,), keep=(batch,), reads=(x,))

    def attention(self, q: np.ndarray, pool, layer: int, batch: BatchSlot, n_head: int, scale: float,
                  window: int = 0, softcap: float = 0.0, causal: bool = True,
                  sinks: np.ndarray | None = None) -> np.ndarray:
        """Attention of q [n, n_head * head_dim] over each token's sequence in the pool's layer: causal, or
        (causal=False) over the whole sequence as this batch holds it; window > 0: the last `window`
        positions only; softcap > 0: cap * tanh(score / cap); sinks [n_head]: each head's logit that joins
        its softmax's denominator (and takes its share of the weight, to no value)."""
        n_kv, hd = pool.dims[layer]
        _f32(q, "q", (batch.n_tokens, n_head * hd))
        if sinks is not None:
            _f32(sinks, "sinks", (n_head,))
        if n_head % n_kv:
            raise ValueError(f"{n_head} heads over {n_kv} KV heads")
        if not causal and window:
            raise ValueError("a sliding window needs causal attention")
        if not causal and batch.both_ways is None:
            batch.both_ways = Batch()
        out = self.tensor(*q.shape)
        self._op("attention", (q, out, pool.k[layer], pool.v[layer], batch.struct if causal else batch.both_ways, sinks),
                 (n_head, n_kv, hd, window, kv_codes(pool.kv)), (scale, softcap),
                 writes=(out,), keep=(batch, pool),
                 reads=(q, pool.k[layer], pool.v[layer]) + (() if sinks is None else (sinks,)))
        return out

    def gated(self, gate: np.ndarray, up: np.ndarray, act: str) -> np.ndarray:
        """gate = act(gate) * up, act one of ops.ACTS ('none': the product)."""
        _f32(gate, "gate"), _f32(up, "up", gate.shape)
        n = self._op("gated", (gate, up), (gate.size, ACTS[act]), writes=(gate,), reads=(gate, up))
        if self.fuse and gate.ndim == 2:
            self._fusable = (n, gate, [gate, up])
        return gate

    def activation(self, x: np.ndarray, act: str) -> np.ndarray:
        """x = act(x) (a non-gated FFN)."""
        if act == "swiglu_oai":
            raise ValueError("swiglu_oai is a gated activation")
        n = self._op("gated", (_f32(x, "x"), None), (x.size, ACTS[act]), writes=(x,), reads=(x,))
        if self.fuse and x.ndim == 2:
            self._fusable = (n, x, [x, None])
        return x

    def add(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """x += y"""
        _f32(x, "x"), _f32(y, "y", x.shape)
        self._op("add", (x, y), (x.size,), writes=(x,), reads=(x, y))
        return x

    def scale(self, x: np.ndarray, s: float) -> np.ndarray:
        """x *= s"""
        self._op("scale", (_f32(x, "x"),), (x.size,), (s,), writes=(x,), reads=(x,))
        return x

    def softcap(self, x: np.ndarray, cap: float) -> np.ndarray:
        """x = cap * tanh(x / cap)"""
        self._op("softcap", (_f32(x, "x"),), (x.size,), (cap,), writes=(x,), reads=(x,))
        return x

    def run(self, nthreads: int):
        if self._arena is None:
            self._g.run(nthreads)
            return
        with self._arena.lock:  # graphs sharing its bytes never run at once
            self._g.run(nthreads)

    def profile(self, nthreads: int) -> list[tuple[str, float]]:
        """(op name, seconds) per node, each node run to completion before the next (bench/profile_ops.py)."""
        return self._g.profile(nthreads)
