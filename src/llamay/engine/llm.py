"""The Python API: `llamay.load(path)` -> LLM with tokenize, detokenize, logits, generate, and contexts
(create, extend, generate from, fork, save/restore, delete).

Every generation goes through the radix tree: a prompt that shares a prefix with anything computed before
only prefills the new suffix (the last prompt token is always recomputed for its logits)."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import numpy as np

from ..gguf import GGUFReader
from ..kernels.threads import default_threads
from ..kv import kv_type, page_bytes
from ..models import Decoder, arch_spec
from ..models.lora import load_lora
from ..settings import LOAD, SCHEDULER, SPEC, LoadOptions
from .context import Context, GenerationStats
from .digest import weights_digest
from . import snapshots
from .embed import file_tokenizer
from .idle import background_priority, when_idle
from .cache_tiers import cache_tiers
from .draft_model import DraftModel
from .context_store import ContextStore
from .job import Job, Piece
from .scheduler import Scheduler
from .session import Session
from .stops import stop_list
from .sampling import SamplingParams, sampling_params



class ContextOverflow(ValueError):
    """A prompt longer than the context: an error, never silent truncation."""


class LLM:
    def __init__(self, path: str | os.PathLike, options: LoadOptions | None = None, **overrides):
        """options: how it loads (settings.LoadOptions; default: its defaults), fields replaced by keyword
        (LLM(path, n_ctx=512))."""
        opts = self.options = LoadOptions.of(options, **overrides)
        threads, n_ctx, kv, kv_budget, page_size = opts.threads, opts.n_ctx, opts.kv, opts.kv_budget, opts.page_size
        lora, draft_model = opts.lora, opts.draft_model
        self.path = os.fspath(path)
        reader = GGUFReader(self.path)
        self.metadata = reader.metadata
        self.spec = arch_spec(reader.metadata, reader.tensors)
        self.tokenizer = file_tokenizer(reader)
        self.threads = threads or default_threads()
        self.n_ctx = context_length(self.spec, n_ctx)
        names = [n for n, _, _ in lora or ()]
        if len(set(names)) != len(names):
            raise ValueError(f"two LoRA adapters named alike: {sorted(names)}")
        self.loras = [load_lora(n, os.fspath(p), s, self.spec, reader, weights_digest(p)) for n, p, s in lora or ()]
        self.decoder = Decoder(reader, self.spec, self.threads, self.n_ctx, loras=self.loras, repack=opts.repack)
        self._default_lora = self.lora_choice({a.name: a.scale for a in self.loras})
        self.kv, self.page_size = kv, page_size
        self.stats = GenerationStats()
        self.kv_events = None  # where its prefix cache's changes are reported (publish_kv_events)
        idle = when_idle(lambda: self.idle_for)
        self.cache = cache_tiers(self, opts.cache_dir, opts.cache_disk, opts.cache_redis, idle) \
            if opts.cache_disk or opts.cache_redis else None
        self._store = self._new_store(kv_budget)
        states = self._store.states  # a hybrid's slots of its first contexts and of its checkpoints
        n_slots = states.n_slots - LOAD.state_slots + SCHEDULER.concurrency if states is not None else 0
        n_pages = -(-self.n_ctx // page_size) if self.cache is not None else 0  # a prompt read from the tiers
        if n_slots or n_pages:
            prefault(self._store.pool, n_pages, states, n_slots, lambda nbytes: idle())
        self.session = Session(self)  # the server's typed interface to this model's contexts
        self.draft = self._draft_model(os.fspath(draft_model)) if draft_model is not None else None
        speculation = opts.spec or ("draft" if self.draft else SPEC.mode)
        # every generation and every KV change goes through it: stepped here until a server starts it
        self.scheduler = Scheduler(lambda: self._store, self.tokenizer, self.n_ctx, start=False, speculation=speculation,
                                   draft_model=self.draft)

    def _draft_model(self, path: str) -> DraftModel:
        """The draft model, its KV pages as many as the target's (its contexts follow the target's); a draft
        token costs their sizes' ratio of a target step unless SPEC.draft_cost says."""
        cost = SPEC.draft_cost or os.path.getsize(path) / os.path.getsize(self.path)
        return DraftModel(path, self.tokenizer, self.threads, self.n_ctx, self._store.view().n_total, cost,
                          self.kv, self.page_size)

    def _new_store(self, kv_budget: int | None, pool=None, states=None) -> ContextStore:
        per_ctx, one_page = context_pages(self.spec, self.n_ctx, self.kv, self.page_size)
        n_pages = max(per_ctx, kv_budget // one_page) if kv_budget else per_ctx * LOAD.pool_contexts
        self.kv_budget = kv_budget
        store = ContextStore(self.decoder, n_pages, self.page_size, self.kv, pool=pool, states=states,
                             tiers=self.cache, is_control=self.tokenizer.is_control)
        store.default_lora = self.default_lora
        if self.kv_events is not None:
            store.watch(self.kv_events)
        return store

    def publish_kv_events(self, sink):
        """Report the prefix cache's full pages entering and leaving it to sink (server/kv_events.py
        ModelEvents), from now on and across reset."""
        def attach(store):
            self.kv_events = sink
            store.watch(sink)
        self.scheduler.do(attach)

    @property
    def default_lora(self) -> tuple:
        """((name, scale), ...) of a request that does not choose its adapters: every adapter at its
        load scale, until set_default_lora."""
        return self._default_lora

    def set_default_lora(self, scales: dict):
        """New default scales {name: scale} (adapters left out: 0), for contexts opened from now on."""
        choice = self.lora_choice(scales)

        def put(store):
            self._default_lora = store.default_lora = choice
        self.scheduler.do(put)

    def lora_choice(self, choice) -> tuple | None:
        """Adapters for a request: None (the default: every adapter loaded, at its scale), names (at their
        default scales) or {name: scale} -> ((name, scale), ...) in name order, scales of 0 left out.
        ValueError for an adapter not loaded."""
        if choice is None:
            return None
        scales = {a.name: a.scale for a in self.loras}
        items = choice.items() if isinstance(choice, dict) else ((n, None) for n in choice)
        out = {}
        for name, scale in items:
            if name not in scales:
                raise ValueError(f"no LoRA adapter named {name!r} (loaded: {', '.join(sorted(scales)) or 'none'})")
            scale = scales[name] if scale is None else float(scale)
            if not np.isfinite(scale):
                raise ValueError(f"LoRA adapter {name}: the scale must be finite")
            if scale:
                out[name] = scale
        return tuple(sorted(out.items()))

    def serve(self, concurrency: int = SCHEDULER.concurrency, max_queue: int = SCHEDULER.max_queue,
              batch: int = SCHEDULER.batch) -> Scheduler:
        """Starts the scheduler on a thread of its own (a server): from now on it alone changes KV state,
        and the Python API's calls wait for it between steps."""
        s = self.scheduler
        s.concurrency, s.max_queue, s.batch = concurrency, max_queue, batch
        s.start()
        return s

    @property
    def idle_for(self) -> float:
        """Seconds since the last request's last step (0 while one runs; infinite while the model loads)."""
        s = getattr(self, "scheduler", None)
        return float("inf") if s is None else s.idle_for

    @property
    def n_vocab(self) -> int:
        return self.spec.n_vocab

    @property
    def n_ctx_train(self) -> int:
        return self.spec.n_ctx_train

    @property
    def context_store(self) -> ContextStore:
        """The owner of every context's state: the engine's modules call its verbs on the scheduler's
        thread (scheduler.do); the server goes through session (engine/session.py)."""
        return self._store

    def kv_view(self):
        """A read-only view of the context store (context_store.StoreView): pool size, free pages, stats."""
        return self._store.view()

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def check_ids(self, ids: list[int], extra: int = 0):
        """Tokens to evaluate after `extra` already in the context: some, each in the vocabulary, fitting."""
        if not ids:
            raise ValueError("no tokens to evaluate")
        self.check_fits(len(ids) + extra)
        self.check_vocab(ids)

    def check_fits(self, n: int, room: int = 0):
        """The one prompt-fits check: ContextOverflow unless n tokens leave `room` more positions in the
        context (a server asks 1, for the reply). Nothing is ever truncated."""
        if n + room > self.n_ctx:
            what = "over" if n > self.n_ctx else "leaving no room to generate in"
            raise ContextOverflow(f"the prompt is {n} tokens, {what} the context of {self.n_ctx} tokens "
                                  "(nothing was truncated)")

    def check_vocab(self, ids: list[int]):
        bad = [t for t in ids if not 0 <= t < self.n_vocab]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.n_vocab}): {bad[:5]}")

    def _ids(self, prompt: str | list[int]) -> list[int]:
        return self.tokenize(prompt, parse_special=True) if isinstance(prompt, str) else [int(t) for t in prompt]

    def reset(self):
        """Forget every cached prefix and context (the next prompt prefills from scratch). The page pool, the
        recurrent state slots and the graphs built over them are kept: only the bookkeeping starts over."""
        def fresh(store):
            if self.cache is not None:
                self.cache.flush()  # its writer reads pages of this pool the new state will reuse
            if self.kv_events is not None:
                self.kv_events.cleared()
            self._store = self._new_store(self.kv_budget, pool=store.pool, states=store.states)
            if self.draft is not None:
                self.draft.reset()
        self.scheduler.do(fresh)

    def logits(self, ids: list[int]) -> np.ndarray:
        """float32 [len(ids), n_vocab]: the logits after every position, all computed afresh."""
        ids = [int(t) for t in ids]
        self.check_ids(ids)

        def run(store):
            ctx, _ = store.open([])
            try:
                return store.extend(ctx, ids, all_logits=True)
            finally:
                store.free(ctx)
        return self.scheduler.do(run)

    def eval_last(self, ids: list[int]) -> np.ndarray:
        """Logits after the last of ids [n_vocab], reusing any cached prefix."""
        ids = [int(t) for t in ids]
        self.check_ids(ids)

        def run(store):
            before = dict(store.tier_tokens)
            ctx, n_cached = store.create(ids)
            out = store.extend(ctx, [])
            store.free(ctx)
            return out, n_cached, {k: v - before.get(k, 0) for k, v in store.tier_tokens.items()}
        out, n_cached, tiers = self.scheduler.do(run)
        self.stats = GenerationStats(prompt_tokens=len(ids), cached_tokens=n_cached, disk_tokens=tiers.get("disk", 0),
                                     shared_tokens=tiers.get("shared", 0))
        return out

    def create_context(self, prompt: str | list[int], lora=None) -> Context:
        """A named, forkable context holding prompt (its computed prefix reused from the radix tree),
        computed under the adapters chosen (lora_choice; default: every one loaded); what it continues
        with stays under them."""
        ids = self._ids(prompt)
        self.check_ids(ids)
        choice = self.lora_choice(lora)
        ctx, n_cached = self.scheduler.do(lambda store: store.create(ids, choice))
        return Context(self, ctx, n_cached)

    def restore_context(self, path: str | os.PathLike) -> Context:
        """A context from a .llamayctx snapshot made under the same weights (else SnapshotError)."""
        path = os.fspath(path)
        grammar = snapshots.read_grammar(self, path)
        return Context(self, self.scheduler.do(lambda store: snapshots.restore(self, path, grammar)), 0)

    def contexts(self) -> list[Context]:
        return [Context(self, c, 0) for c in self.scheduler.do(lambda store: store.contexts())]

    def generate(self, prompt: str | list[int], max_tokens: int = 128, stop: str | list[str] | None = None,
                 grammar=None, params: SamplingParams | None = None, lora=None, spec: str | None = None,
                 **sampling) -> Iterator[str]:
        """Yields text pieces (never half a UTF-8 character). Ends at an end-of-generation token, a stop
        string (not emitted), max_tokens, the end of the context, or a grammar's complete output
        (grammar: llamay.grammar.Grammar); self.stats says which. params: SamplingParams (default: its
        defaults, llama.cpp's); keyword arguments (temperature=..., seed=...) replace fields of it. lora:
        the adapters to use (lora_choice; default: every one loaded). spec: speculative decoding for this
        generation, one of draft.MODES (default: the LLM's); it changes no token, only the speed."""
        params = sampling_params(params, sampling, self.n_vocab)
        ids = self._ids(prompt)
        self.check_ids(ids)
        return self.drive(Job(ids, params, None, max_tokens, stop_list(stop), grammar=grammar,
                              lora=self.lora_choice(lora), spec=spec))

    def drive(self, job: Job) -> Iterator[str]:
        """Runs one generation job through the scheduler (the same decode loop as the server's), yielding
        its text; self.stats is filled when it ends. An engine error is raised here."""
        self.stats = stats = GenerationStats()
        for ev in self.scheduler.run(job):
            if isinstance(ev, Piece):
                if ev.token >= 0:
                    stats.token_ids.append(ev.token)
                if ev.text:
                    yield ev.text
                continue
            if ev.reason == "error":
                raise ev.error
            stats.prompt_tokens, stats.cached_tokens = ev.prompt_tokens, ev.cached_tokens
            stats.generated_tokens, stats.finish_reason = ev.completion_tokens, ev.reason
            stats.prefill_s, stats.decode_s = ev.prompt_ns / 1e9, ev.eval_ns / 1e9
            stats.drafted_tokens, stats.accepted_tokens = ev.drafted_tokens, ev.accepted_tokens
            stats.draft_steps, stats.disk_tokens, stats.shared_tokens = ev.draft_steps, ev.disk_tokens, ev.shared_tokens


SLOTS_AT_LOAD = 8  # state slots faulted in before load returns: those a conversation's first turns take


def prefault(pool, n_pages: int, states, n_slots: int, wait):
    """Fault the KV pool's first n_pages and the state pool's first n_slots in (PagePool.prefault,
    StatePool.prefault: bytes unchanged, safe beside their users): the pages a first prompt read from a tier
    writes (0.1-0.5 s of a request's time when it faulted them in), and the slots a hybrid's first contexts
    and checkpoints take (a fresh slot's first copy faulted 50 ms in on a request's path, Qwen3.5-0.8B).
    The first SLOTS_AT_LOAD slots now (0.4 s of Qwen3.5-0.8B's load here), the pages (1.1 s for a 3B's
    4096-token KV: not at load) and the other slots on a thread of its own, each step after wait(nbytes)."""
    now = min(n_slots, SLOTS_AT_LOAD) if states is not None else 0
    if now:
        states.prefault(now)

    def run():
        background_priority()
        pool.prefault(n_pages, wait)
        if now < n_slots:
            states.prefault(n_slots, wait, now)
    threading.Thread(target=run, name="llamay-prefault", daemon=True).start()


def context_length(spec, n_ctx: int | None) -> int:
    """The context a model runs with: n_ctx (None: LOAD.n_ctx; 0: its training context), at most its training context."""
    return spec.n_ctx_train if n_ctx == 0 else min(n_ctx or LOAD.n_ctx, spec.n_ctx_train)


def context_pages(spec, n_ctx: int, kv: str, page_size: int = LOAD.page_size) -> tuple[int, int]:
    """(pages one full context takes, bytes of one page): a KV budget is never less than one context."""
    return -(-n_ctx // page_size), page_bytes(spec.kv_dims, page_size, kv_type(kv, *(d for _, d in spec.kv_dims)))


def load(path: str | os.PathLike, options: LoadOptions | None = None, **overrides) -> LLM:
    """The model at path, loaded as options say (settings.LoadOptions: threads, n_ctx, kv, kv_budget,
    page_size, lora, spec, draft_model, cache_disk, cache_dir, cache_redis), fields replaced by keyword:
    load(path, n_ctx=2048, kv="q8"). kv: the KV cache's element type, 'f16' (default), 'f32', 'q8' (int8
    keys and values) or 'vq8' (int8 values). kv_budget: bytes of KV pages (default: room for 4 full
    contexts). lora: (name, adapter GGUF, scale) of LoRA adapters applied unmerged to every request. spec:
    speculative decoding by default: "tree" (continuations other branches of the prefix computed, else
    ngram; the default without a draft model), "ngram" (prompt lookup), "draft" (the default with
    draft_model: a GGUF file of the same vocabulary, DraftMismatch otherwise) or "none"; a generation may
    choose otherwise. cache_disk: bytes of the prefix cache's disk tier (default 0: none; the CLI's default
    is CACHE.disk): computed pages kept under cache_dir (default $LLAMAY_HOME/cache/kv), read back by a
    later prompt of the same prefix, in this process or the next. cache_redis: redis://host:port of a Redis
    or Valkey shared tier: the same pages published there and read back by any server of the same weights."""
    return LLM(path, options, **overrides)
