"""Embedding models for the server: encoder files (bert family) loaded as Embedders, decoders borrowed from
the Registry.

An encoder is not a Registry model (it has no KV state and no scheduler): Embedders caches one per model
name, each behind an asyncio.Lock (an Embedder is used by one thread at a time), and runs it in a worker
thread. A decoder embeds on its scheduler thread (the only thread that touches its runner), through
Embedder.for_llm."""
from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..engine import GGUFError, GGUFReader, UnsupportedModel
from ..engine import is_encoder as _encoder_metadata
from .protocol.base import ProtocolError


def is_encoder(path: str) -> bool:
    """Whether the file's general.architecture is an encoder the engine runs (bert, nomic-bert)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return _is_encoder_file(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _is_encoder_file(path: str, mtime_ns: int, size: int) -> bool:
    """Cached per file version: reading a header with a large vocabulary takes ~0.1 s."""
    try:
        return _encoder_metadata(GGUFReader(path).metadata)
    except (GGUFError, OSError):
        return False


def load_embedder(path: str, settings):
    """An encoder file -> llamay.engine.embed.Embedder (settings: server.registry.Settings)."""
    from ..engine.embed import open_embedder
    return open_embedder(path, threads=settings.load.threads)


@dataclass
class Used:
    """What one embedding call gave back: fn's result, the model's width and context, the load time
    charged to this request (the first after loading; else 0), and the name the model is served as."""
    result: Any  # whatever the call's fn returned
    n_embd: int
    n_ctx: int
    load_ns: int
    name: str


class Embedders:
    """Encoder Embedders by model name, loaded on first use (set on app.state.embedders)."""

    def __init__(self, settings):
        self.settings = settings
        self.models: dict[str, object] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._fresh: dict[str, int] = {}  # name -> load ns not yet charged to a request

    async def run(self, name: str, path: str, fn: Callable) -> Used:
        """fn(embedder) in a worker thread, holding the model's lock."""
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.models:
                t0 = time.perf_counter_ns()
                self.models[name] = await asyncio.to_thread(_checked_load, path, self.settings)
                self._fresh[name] = time.perf_counter_ns() - t0
            emb = self.models[name]
            result = await asyncio.to_thread(fn, emb)
        return Used(result, emb.n_embd, emb.n_ctx, self._fresh.pop(name, 0), name)

    def unload(self, name: str) -> bool:
        return self.models.pop(name, None) is not None


def _checked_load(path: str, settings):
    try:
        return load_embedder(path, settings)
    except (GGUFError, UnsupportedModel, ValueError) as e:
        raise ProtocolError(400, f"cannot load {path} as an embedding model: {e}", param="model") from None


async def run_embedder(app_state, model: str | None, fn: Callable, keep_alive: float | None = None) -> Used:
    """fn(embedder) for the requested model: an encoder file through app_state.embedders, a decoder on
    its scheduler thread (Embedder.for_llm over the loaded LLM; generation pauses between steps)."""
    registry = app_state.registry
    name = registry.resolve(model)
    path = registry.paths[name]
    if is_encoder(path):
        embedders = getattr(app_state, "embedders", None)
        if embedders is None:
            embedders = app_state.embedders = Embedders(registry.settings)
        used = await embedders.run(name, path, fn)
        if keep_alive == 0:  # Ollama's "unload after this request"; otherwise kept for the server's life
            embedders.unload(name)
        return used
    loaded = await registry.get(name, keep_alive)
    loaded.busy += 1  # not unloaded while embedding
    try:
        load_ns = 0 if loaded.load_charged else loaded.load_ns
        loaded.load_charged = True

        def on_thread():
            from ..engine.embed import Embedder
            emb = Embedder.for_llm(loaded.llm)
            return fn(emb), emb.n_embd, emb.n_ctx

        result, n_embd, n_ctx = await asyncio.wrap_future(loaded.session.exclusive(on_thread))
        return Used(result, n_embd, n_ctx, load_ns, name)
    finally:
        loaded.busy -= 1
        loaded.touch(keep_alive)
