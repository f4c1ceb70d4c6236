"""One generic decoder for every ArchSpec: embeddings, N pre-norm blocks, output head.

A forward pass takes a batch of tokens (any mix of sequences, described by BatchMeta), writes their K/V
into the page pool, and returns logits for the requested rows. Every op is canonical (kernels/), so a
token's logits do not depend on how the batch was split. The blocks run as one C graph per batch size
(forward.py), built on first use and kept."""
from __future__ import annotations

import math
import time
from collections import OrderedDict

import numpy as np

from ..gguf import GGUFReader
from ..kernels import pathpick
from ..kernels.ops import BatchMeta
from ..kernels.arena import Arena
from ..kernels.threads import Governor
from ..kv import PagePool, kv_type
from ..kv.state_pool import StatePool
from ..settings import LOAD
from .forward import ForwardGraph, Head
from .lora import layer_terms
from .recurrent import MIXERS
from .arch import ArchSpec
from .describe import state_bytes
from .weights import Embedding, load_weights, matrices, regrouped, repacked

MAX_PLANS = 16  # batch sizes kept: decode steps of 1..concurrency sequences, prefill chunks


class Decoder:
    def __init__(self, reader: GGUFReader, spec: ArchSpec, nthreads: int, n_ctx: int, loras=(),
                 repack: bool = LOAD.repack):
        """n_ctx: the longest context it will run (picks LongRoPE's factors; at most a learned position
        table's length). loras: LoRA adapters (models/lora.py) added to every projection they adapt.
        repack: matrices regrouped for the kernel path (QWeight.repacked)."""
        self.spec, self.nthreads = spec, nthreads  # the full count; the governor may run fewer
        self.governor = Governor()
        self.arena = Arena()  # the scratch every plan of this model shares (one runs at a time)
        (self.layers, self.embed, self.output_norm, self.output, self.rope_factors,
         self.ple) = load_weights(reader, spec, n_ctx)
        if repack:
            old = self.layers + [self.output[0]]
            type_bytes: dict[str, int] = {}
            for w in matrices(old):
                type_bytes[w.qtype.name] = type_bytes.get(w.qtype.name, 0) + w.raw.nbytes
            pathpick.choose(type_bytes)  # before the regrouping: the layout follows the path
            self.layers = [repacked(layer, reader, nthreads) for layer in self.layers]
            self.output = (regrouped(self.output[0], reader, nthreads), self.output[1])
            for was, now in zip(matrices(old), matrices(self.layers + [self.output[0]])):
                if now.x16 and not was.x16:  # the file's pages of what was copied leave resident memory
                    reader.release(was.raw)
        self.positions = Embedding(reader, "position_embd.weight") if spec.learned_pos else None
        self.lora = layer_terms(list(loras)) if loras else None
        # which LongRoPE factors rotated the cached keys: a snapshot must be restored under the same
        self.rope_variant = spec.long_short(n_ctx) if spec.rope.long_short and self.rope_factors is not None else None
        self._plans: OrderedDict = OrderedDict()

    def new_pool(self, n_pages: int, page_size: int, kv: str = LOAD.kv) -> PagePool:
        dims = self.spec.kv_dims  # () when no layer attends (Mamba2): pages hold nothing, positions only
        return PagePool(len(dims), n_pages, page_size, *(dims[0] if dims else (0, 0)), kv_type(kv, *(d for _, d in dims)),
                        dims=dims, values_are_keys=self.spec.values_are_keys)

    def new_states(self, n_slots: int, checkpoint_bytes: int = 0) -> StatePool | None:
        """The recurrent layers' state slots (None: the model has none): n_slots for contexts and as many
        more as checkpoint_bytes of state checkpoints hold (each shares a slot; at most LOAD.max_checkpoints)."""
        s = self.spec
        shapes = {il: MIXERS[s.layers[il].mixer].state_shapes(s, s.layers[il]) for il in s.state_layers}
        if not shapes:
            return None
        return StatePool(n_slots + min(checkpoint_bytes // state_bytes(s), LOAD.max_checkpoints), shapes)

    def _cached(self, key, make):
        if key not in self._plans:
            self._plans[key] = make()
            if len(self._plans) > MAX_PLANS:
                self._plans.popitem(last=False)
        self._plans.move_to_end(key)
        return self._plans[key]

    def new_plan(self, n: int, pool: PagePool, fuse: bool = True, states: StatePool | None = None) -> ForwardGraph:
        """The layers' graph for batches of n tokens over pool and states (not cached: forward keeps its own)."""
        return ForwardGraph(self.spec, self.layers, pool, n, fuse, rope_factors=self.rope_factors, ple=self.ple,
                            lora=self.lora, states=states, arena=self.arena)

    def fill_inputs(self, plan: ForwardGraph, tokens: np.ndarray, positions: np.ndarray):
        """A plan's inputs for these tokens: token embeddings, plus learned position embeddings (GPT-2),
        and per-layer inputs' token rows [n, n_layer * width] as [n_layer, n, width] times sqrt(width)."""
        x = self.embed(tokens)
        if self.positions is not None:
            x += self.positions(positions)
        plan.x[:] = x
        if self.ple is not None:
            s = self.spec
            rows = self.ple.table(tokens).reshape(len(tokens), s.n_layer, s.n_embd_per_layer).transpose(1, 0, 2)
            np.multiply(rows, np.float32(math.sqrt(s.n_embd_per_layer)), out=plan.ple)

    def forward(self, tokens: np.ndarray, meta: BatchMeta, pool: PagePool,
                out_rows: np.ndarray | None = None, lora: dict | None = None,
                states: StatePool | None = None) -> np.ndarray:
        """tokens int32 [n]; returns float32 logits [len(out_rows), n_vocab] (all rows when None).
        lora: adapter name -> float32 [n], each token's scale (absent: 0, the adapter unused). states: the
        recurrent state slots, each sequence's named by meta.state_slots (a model with recurrent layers).
        The result is a fresh array."""
        s, n = self.spec, len(tokens)
        if s.state_layers and (states is None or meta.state_slots is None):
            raise ValueError(f"{s.arch}: its recurrent layers need state slots")
        plan = self._cached(("plan", n, id(pool), id(states)), lambda: self.new_plan(n, pool, states=states))
        self.fill_inputs(plan, tokens, meta.tok_pos)
        for name, scales in plan.lora_scale.items():
            scales[:] = lora[name] if lora and name in lora else 0.0
        full = self.nthreads
        threads, start = self.governor.pick(full, n), time.perf_counter()
        plan.run(meta, threads)
        rows = plan.x if out_rows is None else plan.x[out_rows]
        if len(rows) == 0:
            return np.zeros((0, s.n_vocab), np.float32)
        head = self._cached(("head", len(rows)), lambda: Head(s, *self.output_norm, *self.output, len(rows)))
        head.x[:] = rows
        logits = head.run(threads).copy()
        self.governor.record(n, threads, time.perf_counter() - start, full)
        return logits
