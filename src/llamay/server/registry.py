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
from typing import TYPE_CHECKING

from ..defaults import DEFAULT_NAME, default_model_path
from ..engine import GGUFError, GGUFReader, Scheduler, Session, UnsupportedModel
from ..engine.digest import weights_digest
from ..engine.draft_model import DraftMismatch
from ..settings import SCHEDULER, SERVER, LoadOptions
from ..store import FILE_TYPES
from .protocol.base import ModelInfo, ProtocolError
from .routes_gate import Routes

if TYPE_CHECKING:
    from ..engine import LLM
    from ..store import StoredModel

@dataclass
class Settings:
    """What `llamay serve` was started with; every default from llamay/settings.py."""
    load: LoadOptions = LoadOptions()  # how every generating model loads (the CLI's: CACHE.disk of disk tier)
    concurrency: int = SCHEDULER.concurrency
    batch: int = SCHEDULER.batch
    max_queue: int = SCHEDULER.max_queue
    keep_alive: float = SERVER.keep_alive
    grammar: str | None = None  # --grammar-file's text
    max_contexts: int = SERVER.max_contexts  # named contexts (context routes), all models together
    context_ttl: float = SERVER.context_ttl  # seconds a named context may stay unused; <= 0: forever
    alias: str | None = None  # --alias: the name the default (first pinned) model is served under
    strict_model_names: bool = False  # True: an unknown name is 404 even when one model is served
    # llama-server's flags (cli/serve_llamacpp.py): SamplingParams fields and max_tokens a request that sets
    # none gets, the chat template every chat renders with, the reasoning split, embedding pooling, slot files
    sampling: dict = field(default_factory=dict)
    n_predict: int | None = None
    chat_template: str | None = None
    reasoning_format: str = SERVER.reasoning_format
    enable_thinking: bool | None = None  # --reasoning: the templates' enable_thinking; None: not passed
    pooling: str | None = None  # None: each model's own
    slot_save_path: str | None = None  # None: no slot save / restore
    routes: Routes = Routes()  # the optional routes that are on
    tags: tuple[str, ...] = ()  # --tags: listed by /models for the default model
    verbose: bool = False  # -v: chat results carry __verbose unless a request says verbose false


@dataclass
class Loaded:
    info: ModelInfo
    llm: LLM
    scheduler: Scheduler
    load_ns: int
    default_keep_alive: float = SERVER.keep_alive  # the server's --keep-alive
    keep_alive: float = SERVER.keep_alive  # seconds after last use, as the last request asked; < 0: forever
    last_used: float = field(default_factory=time.time)
    busy: int = 0  # requests in flight
    contexts: set[str] = field(default_factory=set)  # named context ids living on this model
    load_charged: bool = False  # the first request after loading reports load_ns (Ollama's load_duration)
    stored: StoredModel | None = None  # the stored model's system / params layers; None for a file
    default_grammar: str | None = None  # serve --grammar-file: GBNF for requests that ask for no format

    @property
    def session(self) -> Session:
        """The model's contexts: typed verbs run on its scheduler thread."""
        return self.llm.session

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


def describe(name: str, path: str, stored=None) -> ModelInfo:
    """A model file's listing entry (reads the header only). A stored model's digest is its manifest's
    (Ollama's model ID); a file's is its sha256 (cached per file)."""
    reader = GGUFReader(path)
    md = reader.metadata
    n_params = sum(math.prod(t.shape) for t in reader.tensors.values())
    st = os.stat(path)
    small = {k: v for k, v in md.items() if not hasattr(v, "__len__") or isinstance(v, str)}
    template = (stored.template if stored is not None and stored.template else None) or md.get("tokenizer.chat_template", "")
    return ModelInfo(name=name, path=path, size=stored.size if stored is not None else st.st_size,
                     digest=stored.digest if stored is not None else weights_digest(path),
                     modified_at=stored.modified if stored is not None else st.st_mtime,
                     architecture=str(md.get("general.architecture", "")),
                     parameter_size=md.get("general.size_label") or _param_size(n_params),
                     quantization_level=FILE_TYPES.get(md.get("general.file_type"), "unknown"),
                     context_length=int(md.get(f"{md.get('general.architecture')}.context_length", 0)),
                     metadata=small, template=str(template))


def name_for(path: str) -> str:
    default = default_model_path()
    if default is not None and os.path.realpath(default) == os.path.realpath(path):
        return DEFAULT_NAME
    stem = os.path.basename(path)
    return (stem[:-5] if stem.lower().endswith(".gguf") else stem).lower()


def split_adapters(name: str | None) -> tuple[str | None, list[str] | None]:
    """'base@a,b' -> ('base', ['a', 'b']): a request's choice of LoRA adapters ('base@none': none; no '@':
    None, every adapter the model loaded)."""
    if not name or "@" not in name:
        return name, None
    base, _, names = name.rpartition("@")
    chosen = [n for n in names.split(",") if n]
    return base, [] if chosen == ["none"] else chosen


class Registry:
    def __init__(self, pinned: list[str], settings: Settings, use_store: bool = True, fallback: str | None = None):
        """pinned: model files or stored model names (-m), the first the default. With use_store, every
        model in llamay's store and Ollama's is served by name too (the first stored one is the default
        when nothing is pinned). fallback: a file served as DEFAULT_NAME when nothing is pinned or stored."""
        self.settings, self.use_store = settings, use_store
        # --alias a,b,c (llama-server's): the model is listed as the first in sorted order, answers to each
        aliases = sorted({a.strip() for a in (settings.alias or "").split(",") if a.strip()})
        alias = aliases[0] if aliases else None
        self.aliases: dict[str, str] = {a: alias for a in aliases[1:]}  # another alias -> the listed one
        self.pinned: dict[str, str] = {}
        for i, spec in enumerate(pinned):
            name, path = self._pin(spec)
            self.pinned.setdefault(alias if i == 0 and alias else name, path)
        self.stored: dict[str, object] = {}  # name -> store.StoredModel
        self.hidden: set[str] = set()  # pinned names taken off by /api/delete
        self.loaded: dict[str, Loaded] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._infos: dict[tuple[str, str], ModelInfo] = {}
        self._mutex = threading.Lock()
        from .upstream import Upstreams  # it reads requests through prepare.py, which imports this module
        self.upstreams = Upstreams()  # serve --upstream: models answered elsewhere (none by default)
        self.refresh()
        if fallback is not None and not self.paths:
            self.pinned[DEFAULT_NAME] = fallback
        if alias and alias not in self.pinned and self.paths:  # no -m: the default's alias
            self.pinned = {alias: next(iter(self.paths.values())), **self.pinned}

    def _pin(self, spec: str) -> tuple[str, str]:
        from ..store import StoreError, find, looks_like_path
        if os.path.exists(spec) or not self.use_store:
            return name_for(spec), spec
        if looks_like_path(spec):
            raise ValueError(f"no such file: {spec}")
        try:
            model = find(spec)
        except StoreError as e:
            raise ValueError(str(e)) from None
        if model is None and spec.removesuffix(":latest") == DEFAULT_NAME and default_model_path() is not None:
            return DEFAULT_NAME, str(default_model_path())
        if model is None or model.model_path is None:
            raise ValueError(f"{spec} is neither a GGUF file nor a stored model (llamay list)")
        return model.name, str(model.model_path)

    def refresh(self):
        """Re-read the stores (a pull, rm or cp elsewhere shows up at the next lookup)."""
        if not self.use_store:
            return
        from ..store import StoreError, all_models
        try:
            models = all_models()
        except (StoreError, OSError):
            models = []
        self.stored = {}
        for m in models:
            if m.model_path is not None:
                self.stored.setdefault(m.name, m)

    @property
    def paths(self) -> dict[str, str]:
        """Every servable name -> its GGUF file: pinned first, then stored."""
        out = {name: path for name, path in self.pinned.items() if name not in self.hidden}
        for name, model in self.stored.items():
            out.setdefault(name, str(model.model_path))
        return out

    def resolve(self, name: str | None, exact: bool = False) -> str:
        """A request's model name -> our name; ProtocolError 404 when nobody has that model. A LoRA
        choice after '@' (split_adapters) names the same model. A name nobody has goes to the default
        model where _any_name allows, unless exact (routes that show, copy, delete or unload a model)."""
        name = split_adapters(name)[0]
        if self.upstreams.find(name, self.has) is not None:
            raise ProtocolError(400, f"model '{name}' is answered by an upstream (serve --upstream): this route "
                                "serves local models only", param="model")
        for attempt in range(2):
            found = self._lookup(name)
            if found is not None:
                return found
            self.refresh()
        paths = self.paths
        if name and not exact and self._any_name() and paths:  # llama-server's way: one model answers every name
            return next(iter(paths))
        if not name:
            raise ProtocolError(404, "no model is being served (llamay pull one)", "not_found", "model")
        raise ProtocolError(404, f"model '{name}' not found; available: {', '.join(paths) or 'none'}",
                            "not_found", "model")

    def _any_name(self) -> bool:
        """Unknown names go to the default model: one model is pinned (or, none pinned, one is servable),
        unless --strict-model-names. Names of one model (one file, or one stored manifest) count once."""
        if self.settings.strict_model_names:
            return False
        pinned = {os.path.realpath(p) for n, p in self.pinned.items() if n not in self.hidden}
        return len(pinned) == 1 or not pinned and len({self._model_key(n, p) for n, p in self.paths.items()}) == 1

    def _model_key(self, name: str, path: str) -> str:
        """What two names of one model share: a stored model's manifest digest, else the file's real path."""
        stored = self.stored.get(name) if name not in self.pinned else None
        return stored.digest if stored is not None else os.path.realpath(path)

    def reply_name(self, requested: str | None, name: str) -> str:
        """The model name a response shows: the one requested when it names a served model (the client's
        own spelling, as Ollama echoes it), else the real name of the model that answered."""
        if requested and self._lookup(split_adapters(requested)[0]) is not None:
            return requested
        return name

    def has(self, name: str) -> bool:
        """A local model (pinned or stored) answers to this name."""
        return self._lookup(split_adapters(name)[0]) is not None

    def _lookup(self, name: str | None) -> str | None:
        paths = self.paths
        if not name:
            return next(iter(paths), None)
        name = self.aliases.get(name, name)
        for key in (name, name.removesuffix(":latest"), name.lower(), name.lower().removesuffix(":latest")):
            if key in paths:
                return key
        for ours, path in paths.items():
            if name in (path, os.path.basename(path)) or ours.lower() == f"{name.lower()}:latest":
                return ours
        return None

    def info(self, name: str) -> ModelInfo:
        path = self.paths[name]
        stored = self.stored.get(name)
        with self._mutex:
            key = (name, path)
            if key not in self._infos:
                self._infos[key] = describe(name, path, stored)
            info = self._infos[key]
        loaded = self.loaded.get(name)
        info.loaded = loaded is not None
        info.expires_at = loaded.expires_at() if loaded else None
        if loaded:
            info.context_length = loaded.llm.n_ctx
        return info

    def infos(self) -> list[ModelInfo]:
        self.refresh()
        return [self.info(name) for name in self.paths]

    def listing(self, name: str) -> dict:
        """llama-server's /models fields of a model beside OpenAI's: the default model's aliases and tags."""
        if name != next(iter(self.pinned), None):
            return {}
        out = {"aliases": sorted([name, *self.aliases])} if self.settings.alias else {}
        return {**out, "tags": list(self.settings.tags)} if self.settings.tags else out

    def defaults(self, name: str):
        """The stored model's system / params layers (None for a pinned file)."""
        return self.stored.get(name) if name not in self.pinned else None

    async def get(self, name: str | None, keep_alive: float | None = None) -> Loaded:
        """The loaded model (loading it in a worker thread on first use)."""
        name = self.resolve(name)
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name not in self.loaded:
                try:
                    self.loaded[name] = await asyncio.to_thread(self._load, name)
                except (UnsupportedModel, GGUFError, ValueError) as e:
                    raise ProtocolError(400, f"model '{name}' cannot generate: {e}", param="model") from None
        loaded = self.loaded[name]
        loaded.touch(keep_alive)
        return loaded

    def _load(self, name: str) -> Loaded:
        import llamay

        from .embed_models import is_encoder
        if is_encoder(self.paths[name]):
            raise ProtocolError(400, f"{name} is an embedding model: it cannot generate", param="model")
        s, opts = self.settings, self.settings.load
        t0 = time.perf_counter_ns()
        try:
            llm = llamay.load(self.paths[name], opts)
        except DraftMismatch:  # a model of another vocabulary runs without it (its default spec)
            llm = llamay.load(self.paths[name], opts, draft_model=None, spec=None if opts.spec == "draft" else opts.spec)
        sched = llm.serve(s.concurrency, s.max_queue, s.batch)
        return Loaded(self.info(name), llm, sched, time.perf_counter_ns() - t0, s.keep_alive, s.keep_alive,
                      stored=self.defaults(name), default_grammar=s.grammar)

    def unload(self, name: str) -> bool:
        loaded = self.loaded.pop(name, None)
        if loaded is None:
            return False
        loaded.scheduler.close()
        if loaded.llm.cache is not None:
            loaded.llm.cache.close()  # its queued pages written first
        return True

    def reap(self, now: float | None = None) -> list[str]:
        """Unload models idle past their keep_alive (not those busy or holding named contexts)."""
        now = time.time() if now is None else now
        gone = [name for name, m in list(self.loaded.items())
                if not m.busy and not m.contexts and m.expires_at() is not None and m.expires_at() <= now]
        for name in gone:
            self.unload(name)
        return gone

    def close(self):
        for name in list(self.loaded):
            self.unload(name)
