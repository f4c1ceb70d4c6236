"""Graphs of C ops run in one parallel region (csrc/graph.h), threads claiming each node's chunks. A Graph keeps every buffer its nodes point
at alive; nodes are built once and rerun, so a forward pass costs one foreign call."""
from __future__ import annotations

import ctypes

import numpy as np

from ._lib import I32, I64, P, declare

OPS = {"rmsnorm": 1, "quant": 2, "matmul": 3, "rope": 4, "kv_write": 5, "attention": 6, "gated": 7,
       "add": 8, "scale": 9, "softcap": 10, "layernorm": 11, "moe_route": 12, "gather": 13, "moe_matmul": 14,
       "moe_combine": 15, "pos_scale": 16, "sigmoid_scale": 17,
       "row_scale": 18, "conv": 19, "ssm_scan": 20, "delta_rule": 21, "head_matmul": 22,
       "copy_rows": 23}


class NodeStruct(ctypes.Structure):
    _fields_ = [("op", I64), ("p", P * 7), ("n", I64 * 6), ("f", ctypes.c_float * 3), ("after", I64)]


class Batch(ctypes.Structure):
    """ly_batch: where each token lives (positions, sequence rows, page tables)."""
    _fields_ = [("tok_pos", P), ("tok_seq", P), ("page_tables", P), ("n_tokens", I64), ("max_pages", I64),
                ("page_size", I64), ("state_slots", P)]


_run = declare("ly_graph_run", ctypes.POINTER(NodeStruct), I64, I32, restype=I64)
_profile = declare("ly_graph_profile", ctypes.POINTER(NodeStruct), I64, I32, P, restype=I64)
OP_NAMES = {v: k for k, v in OPS.items()}


def addr(a) -> int:
    """Data address of a numpy array (writeable or not) or of a ctypes object; None is NULL."""
    if a is None:
        return 0
    if isinstance(a, np.ndarray):
        return ctypes.addressof(ctypes.c_char.from_buffer(a)) if a.flags.writeable else a.ctypes.data
    return ctypes.addressof(a)


class Graph:
    def __init__(self):
        self._specs: list[tuple[int, list, list, list]] = []
        self._keep: list = []  # everything a node points at
        self._nodes = None

    def add(self, op: str, ptrs=(), sizes=(), floats=(), keep=(), after: int | None = None):
        """ptrs: up to 7 arrays or ctypes objects; keep: more objects that must outlive the graph; after:
        the latest earlier node this one depends on (-1: none; None: the one before it)."""
        self._keep.extend(ptrs)
        self._keep.extend(keep)
        after = len(self._specs) - 1 if after is None else after
        self._specs.append((OPS[op], [addr(p) for p in ptrs], list(sizes), list(floats), after))
        self._nodes = None

    def replace_last(self, ptrs, after: int, keep=()):
        """Gives the last node new pointers (same op and sizes) and dependency: the builder's fusions."""
        self._keep.extend(ptrs)
        self._keep.extend(keep)
        op, _, sizes, floats, _ = self._specs[-1]
        self._specs[-1] = (op, [addr(p) for p in ptrs], sizes, floats, after)
        self._nodes = None

    def move_pointers(self, move):
        """Every node pointer p becomes move(p) (the builder's scratch laid out in its arena)."""
        self._specs = [(op, [move(p) for p in ptrs], sizes, floats, after)
                       for op, ptrs, sizes, floats, after in self._specs]
        self._nodes = None

    def keep_only(self, keep, more=()):
        """Holds only the objects keep(o) says are still pointed at, and `more`."""
        self._keep = [o for o in self._keep if keep(o)] + list(more)

    def _build(self):
        nodes = (NodeStruct * len(self._specs))()
        for node, (op, ptrs, sizes, floats, after) in zip(nodes, self._specs):
            node.op, node.after = op, after
            node.p[:len(ptrs)], node.n[:len(sizes)], node.f[:len(floats)] = ptrs, sizes, floats
        self._nodes = nodes

    def run(self, nthreads: int):
        if self._nodes is None:
            self._build()
        self._check(_run(self._nodes, len(self._specs), nthreads))

    def profile(self, nthreads: int) -> list[tuple[str, float]]:
        """Runs the graph with a barrier after each node; (op name, seconds) per node, in order."""
        if self._nodes is None:
            self._build()
        seconds = np.zeros(len(self._specs))
        self._check(_profile(self._nodes, len(self._specs), nthreads, seconds.ctypes.data))
        return [(OP_NAMES[spec[0]], float(t)) for spec, t in zip(self._specs, seconds)]

    @staticmethod
    def _check(bad: int):
        if bad == -2:
            raise MemoryError("no memory for the graph's progress counters")
        if bad >= 0:
            raise ValueError(f"graph node {bad} has an unknown op")
