"""Saving a context to a .llamayctx file and restoring it into fresh pages (kv/snapshot_format.py is the format).

A snapshot carries the context's tokens, its pages, a hybrid model's recurrent state and the logits after
its last token, so a restored context continues exactly like the original without recomputing anything;
and, for a constrained
generation cut off before its end, the grammar's position (source and consumed tokens), so it continues
under the same grammar."""
from __future__ import annotations

import math

import numpy as np

from ..kv.snapshot_format import (ALIGN, CHECKSUM_BYTES, HEADER, LAYER, KVGeometry, SnapshotError, SnapshotFile, SnapshotHeader,
                           check_compatible, pages_for, write_snapshot)
from .digest import weights_digest


def geometry(llm) -> KVGeometry:
    """The pool's layers (those that write K/V), with a layer table when they differ."""
    pool = llm.context_store.pool
    layers = tuple((h, d, pool.page_size * k.shape[1], pool.page_size * v.shape[1])
                   for (h, d), k, v in zip(pool.dims, pool.k, pool.v))
    first = layers[0] if layers else (0, 0, 0, 0)  # no layer attends: the pages hold no K/V
    return KVGeometry(llm.spec.arch, len(layers), *first[:2], llm.kv, llm.page_size, *first[2:],
                      layers=() if pool.uniform else layers)


def save(llm, ctx_id: int, path: str):
    """On the scheduler's thread: the context (its pending sampled token computed first) into path."""
    store = llm.context_store
    image = store.snapshot(ctx_id)
    pages, pool = np.asarray(image.pages, np.int64), store.pool
    layers = [[pool.page_view(a)[pages].reshape(len(pages), -1) for a in arrs] for arrs in (pool.k, pool.v)]
    meta = {"grammar": image.matcher.state()} if image.matcher is not None else {}
    if llm.decoder.rope_variant:
        meta["rope_factors"] = llm.decoder.rope_variant
    if image.lora:
        meta["lora"] = adapters(llm, image.lora)
    header = SnapshotHeader(weights_digest(llm.path), geometry(llm), np.asarray(image.tokens, np.uint32), meta)
    write_snapshot(path, header, layers[0], layers[1], logits=image.last_logits, state=image.state)


META_SLACK = 1 << 20  # a saved grammar's source (at most 256 KiB) and JSON beside its tokens


def max_bytes(llm) -> int:
    """The largest snapshot this model can restore: a full context's tokens and pages, its logits and a
    grammar position over every token. An upload past it is refused before it is read."""
    n = llm.n_ctx
    store = llm.context_store
    pool, states = store.pool, store.states
    pages = pages_for(n, llm.page_size) * pool.bytes_per_page + (states.bytes_per_slot if states is not None else 0)
    table = LAYER.size * len(pool.k)
    return HEADER.size + table + 4 * n + 4 * llm.n_vocab + 12 * n + META_SLACK + pages + 4 * ALIGN + CHECKSUM_BYTES


def n_tokens(path: str) -> int:
    """How many tokens the snapshot holds (its header only)."""
    with SnapshotFile(path) as f:
        return len(f.header.token_ids)


def read_grammar(llm, path: str):
    """The snapshot's saved grammar position resumed (its tokens replayed: ~13 us each), or None. Runs on
    any thread, so a long replay never holds up the scheduler. SnapshotError if it cannot be resumed."""
    with SnapshotFile(path) as f:
        state, n_tokens = f.header.meta.get("grammar"), len(f.header.token_ids)
    if n_tokens > llm.n_ctx:
        raise SnapshotError(f"snapshot holds {n_tokens} tokens, the context is {llm.n_ctx}")
    if isinstance(state, dict) and isinstance(state.get("tokens"), list) and len(state["tokens"]) > n_tokens:
        raise SnapshotError(f"the grammar state has {len(state['tokens'])} tokens, more than the snapshot's {n_tokens}")
    return _resume_grammar(llm, state)


def restore(llm, path: str, matcher=None, share=None) -> int:
    """On the scheduler's thread -> ctx_id of a new context holding the snapshot, continuing under matcher
    (read_grammar's result for the same file). Other weights or another KV layout: SnapshotError. share:
    ContextStore.restore's."""
    store = llm.context_store
    with SnapshotFile(path) as f:
        check_compatible(f.header, weights_digest(llm.path), geometry(llm))
        made = f.header.meta.get("rope_factors")
        if made != llm.decoder.rope_variant:  # LongRoPE: its keys were rotated with the other factor set
            raise SnapshotError(f"snapshot's keys were rotated with LongRoPE's {made or 'no'} factors, this "
                                f"model runs its {llm.decoder.rope_variant or 'no'} ones (the context size "
                                "picks them): load it with the context the snapshot was made with")
        lora = _lora_of(llm, f.header.meta.get("lora", []))
        tokens = [int(t) for t in f.header.token_ids]
        if len(tokens) > llm.n_ctx:
            raise SnapshotError(f"snapshot holds {len(tokens)} tokens, the context is {llm.n_ctx}")
        pool = store.pool

        def fill(pages: list[int]) -> np.ndarray:
            f.read_pages_into([pool.page_view(a) for a in pool.k], [pool.page_view(a) for a in pool.v], pages)
            return f.read_logits(llm.n_vocab)
        try:
            return store.restore(tokens, lora, fill, matcher, share, f.read_state if f.has_state else None)
        except ValueError as e:  # a recurrent state missing, unexpected or of another size
            if isinstance(e, SnapshotError):
                raise
            raise SnapshotError(f"snapshot does not fit this model: {e}") from None


def adapters(llm, lora: tuple) -> list[dict]:
    """A context's LoRA adapters ((name, scale), ...) as a snapshot records them, with their sha256."""
    digests = {a.name: a.digest for a in llm.loras}
    return [{"name": name, "sha256": digests[name], "scale": scale} for name, scale in lora]


def _lora_of(llm, made) -> tuple:
    """The adapters a snapshot's K/V was computed under, as this model names them; SnapshotError unless
    each is loaded here (same name and file): K/V computed under other adapters is other K/V."""
    digests = {a.name: a.digest for a in llm.loras}
    ok = isinstance(made, list) and all(
        isinstance(a, dict) and digests.get(a.get("name")) == a.get("sha256") and isinstance(a.get("scale"), float)
        and math.isfinite(a["scale"]) for a in made)
    if not ok:
        raise SnapshotError(f"snapshot was made with LoRA adapters {_describe(made)}, and this model has "
                            f"{_describe([{'name': a.name, 'sha256': a.digest, 'scale': a.scale} for a in llm.loras])}"
                            ": load it with the same adapters")
    return tuple((a["name"], a["scale"]) for a in made)


def _describe(adapters) -> str:
    if not isinstance(adapters, list) or not adapters:
        return "none"
    return ", ".join(f"{a.get('name')} (sha256 {str(a.get('sha256'))[:12]}, scale {a.get('scale')})"
                     if isinstance(a, dict) else repr(a) for a in adapters)


def _resume_grammar(llm, state):
    if state is None:
        return None
    from ..grammar import Grammar, GrammarError
    try:
        return Grammar.resume(llm.tokenizer, state)
    except GrammarError as e:
        raise SnapshotError(f"the snapshot's grammar state cannot be resumed: {e}") from None
