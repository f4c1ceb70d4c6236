"""Continuous batching: one thread owns the context store and steps every running sequence together.

Each step is one forward pass holding the next token of every decoding sequence (and its draft, when it
speculates: draft.py) plus a chunk of one or more prompts being prefilled (up to `batch` tokens in all). Up
to `concurrency` sequences run; later jobs queue; a full queue refuses at once (Overloaded). Every kernel is
batch-invariant, so a sequence's logits do not depend on what it was batched with, and a draft token's are
those it would get decoded alone: each position is sampled as plain decoding samples it (one random draw per
emitted token), a draft token kept while it equals the token sampled, so speculation changes no token,
greedy or seeded. Other work on the context store (create, fork, save, restore) goes through do() / call(),
which run it on the same thread between steps: only this thread changes context state, and only through
the store's verbs (context_store.py).

Started (start(): a server), a thread of its own steps it. Not started (the Python API alone), run() steps
it on the caller's thread: one decode loop either way."""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future

import numpy as np

from ..events import Progress
from ..kv import OutOfPages
from ..settings import LOAD, SCHEDULER, SPEC
from ..tokenizer import IncrementalDecoder
from . import constrain, draft
from .job import Done, Job, Piece
from .context_store import ContextStore
from .sampling import Sampler, SamplingParams, logprobs
from .stops import StopMatcher

ALIGN = 32  # prefill chunks end on multiples of this (fewer distinct batch sizes, so fewer graphs to build)


class Overloaded(Exception):
    """The queue is full: the caller answers 503 (or its API's overloaded error) at once."""


class _Seq:
    def __init__(self, job: Job, index: int, ctx: int, todo: list[int], history: list[int], n_cached: int,
                 tokenizer, t_submit: int):
        self.job, self.index, self.ctx, self.todo, self.history = job, index, ctx, todo, history
        params = job.params
        if index and params.seed is not None:  # choices of one request differ even under a seed
            params = SamplingParams(**{**params.__dict__, "seed": params.seed + index})
        self.sampler, self.detok, self.matcher = Sampler(params), IncrementalDecoder(tokenizer), StopMatcher(job.stops)
        self.grammar = job.grammar.matcher() if job.grammar is not None else None
        self.n_prompt, self.n_cached, self.n_gen = len(history) + len(todo), n_cached, 0
        self.next_tok: int | None = None  # sampled, its K/V not computed yet
        self.redo: list[int] = []  # the end of history whose K/V a hybrid's rolled-back draft took back
        self.cuts: list[int] = []  # a hybrid's prompt: len(todo) where a chunk ends at a message's start
        self.drafter = None  # draft.py / draft_model.py; None: no speculation
        self.n_drafted = self.n_accepted = self.n_draft_steps = 0
        self.n_disk = self.n_shared = 0  # of n_cached, tokens read from the disk and the shared tier
        self.t_submit, self.t_start, self.t_prefilled = t_submit, time.perf_counter_ns(), 0


class Scheduler:
    def __init__(self, store_of: Callable[[], ContextStore], tokenizer, n_ctx: int, concurrency: int = SCHEDULER.concurrency,
                 max_queue: int = SCHEDULER.max_queue, batch: int = SCHEDULER.batch, start: bool = True,
                 speculation: str = SPEC.mode, draft_model=None):
        """store_of: the current context store (LLM.reset may replace it). start=False: stepped by run() on the
        caller's thread until start() gives it a thread of its own. speculation: a job's speculative
        decoding unless it chooses (Job.spec; draft.MODES). draft_model: draft_model.DraftModel, for "draft"."""
        self.store_of, self.tokenizer, self.n_ctx = store_of, tokenizer, n_ctx
        self.concurrency, self.max_queue, self.batch = concurrency, max_queue, batch
        self.draft_model = draft_model
        self.speculation = self.check_mode(speculation)
        self.queue: deque[tuple[Job, int]] = deque()
        self.running: list[_Seq] = []
        self.calls: deque[tuple[Callable, Future]] = deque()
        self.cv = threading.Condition()
        self.stopping = False
        self.steps = 0
        self.last_busy = float("-inf")  # time.monotonic() at the end of the last step (idle_for)
        # every sequence's speculation so far: draft tokens verified, accepted, passes verifying a draft
        self.drafted_tokens = self.accepted_tokens = self.draft_steps = 0
        self.thread: threading.Thread | None = None
        if start:
            self.start()

    def start(self):
        """Steps on a thread of its own from now on (the context store belongs to that thread)."""
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, name="llamay-scheduler", daemon=True)
            self.thread.start()

    # --- any thread ----------------------------------------------------------------------------

    def submit(self, job: Job):
        with self.cv:
            if self.stopping:
                raise Overloaded("the model was unloaded; send the request again")
            if len(self.queue) >= self.max_queue:
                raise Overloaded(f"{len(self.queue)} requests are queued (the limit); try again later")
            self.queue.append((job, time.perf_counter_ns()))
            self.cv.notify()

    def do(self, fn: Callable[[ContextStore], object]):
        """fn(store) where context state may change: between steps on the scheduler's thread when it has one
        (waiting for the result), else here."""
        if self.thread is None or threading.current_thread() is self.thread:
            return fn(self.store_of())
        return self.call(fn).result()

    def run(self, job: Job) -> Iterator[Piece | Done]:
        """Submits job and yields its events as they come until its last Done (job.sink is replaced).
        Without a thread it steps the scheduler here, a step per event batch; closing the iterator early
        cancels the job and finishes it (its context freed or kept as a finished job's would be)."""
        events: deque = deque()
        done = 0
        if self.thread is None:
            job.sink = events.append
        else:
            ready = threading.Condition()

            def sink(ev):
                with ready:
                    events.append(ev)
                    ready.notify()
            job.sink = sink
        self.submit(job)
        try:
            while done < job.n:
                if self.thread is None:
                    self._step()
                else:
                    with ready:
                        ready.wait_for(lambda: events)
                while events:
                    ev = events.popleft()
                    done += isinstance(ev, Done)
                    yield ev
        finally:
            if done < job.n:
                job.cancel()  # a thread finishes it at its next step; here, step until it has
                while self.thread is None and done < job.n and (self.running or self.queue):
                    self._step()
                    done += sum(isinstance(ev, Done) for ev in events)
                    events.clear()

    def call(self, fn: Callable[[ContextStore], object]) -> Future:
        """fn(store) on the scheduler thread between steps -> a Future of its result."""
        fut: Future = Future()
        with self.cv:
            self.calls.append((fn, fut))
            self.cv.notify()
        return fut

    @property
    def idle_for(self) -> float:
        """Seconds since the last step ended; 0 while a request runs or waits (background work waits for it)."""
        return 0.0 if self.running or self.queue else time.monotonic() - self.last_busy

    @property
    def queue_depth(self) -> int:
        return len(self.queue)

    @property
    def n_running(self) -> int:
        return len(self.running)

    def close(self):
        with self.cv:
            self.stopping = True
            self.cv.notify()
        if self.thread is not None:
            self.thread.join()
            store = self.store_of()
            if store.owner is self.thread:
                store.claim(None)  # given back: the caller's thread may step it again

    # --- the scheduler thread ------------------------------------------------------------------

    def _loop(self):
        while True:
            store = self.store_of()  # a new store (LLM.reset) is claimed at the next turn
            if store.owner is not self.thread:
                store.claim(self.thread)
            with self.cv:
                while not (self.stopping or self.queue or self.running or self.calls):
                    self.cv.wait()
                if self.stopping:
                    break
                calls, self.calls = list(self.calls), deque()
            for fn, fut in calls:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn(self.store_of()))
                    except BaseException as e:  # handed to the caller
                        fut.set_exception(e)
            try:
                self._step()
            except Exception as e:  # a bug must not leave clients waiting forever
                for seq in list(self.running):
                    self._finish(seq, "error", error=e)
        for seq in list(self.running):
            self._finish(seq, "cancelled")
        for job, _ in self.queue:
            job.sink(Done(0, "cancelled", 0, 0, 0, 0, 0, 0, []))

    def _step(self):
        try:
            self._advance()
        finally:
            self.last_busy = time.monotonic()

    def _advance(self):
        for seq in [s for s in self.running if s.job.cancelled]:
            self._finish(seq, "cancelled")
        self._admit()
        if not self.running:
            return
        decode = [s for s in self.running if s.next_tok is not None]
        drafts = self._drafts(decode)
        try:
            try:
                items, wants, logits = self._pass(decode, drafts)
            except OutOfPages:
                if not any(drafts):
                    raise
                drafts = [[] for _ in decode]  # a draft never costs a sequence its pages: again without
                items, wants, logits = self._pass(decode, drafts)
        except OutOfPages as e:
            victim = max(self.running, key=lambda s: s.t_start)
            self._finish(victim, "error", error=e)
            return
        self.steps += 1
        for seq in decode:
            seq.history.append(seq.next_tok)
            seq.next_tok, seq.redo = None, []
        by_ctx = {s.ctx: s for s in self.running}
        for ctx, chunk in items[len(decode):]:
            by_ctx[ctx].history += chunk
            self._progress(by_ctx[ctx])
        at = 0
        for seq, tokens in zip(wants, drafts + [[]] * (len(wants) - len(decode))):
            self._isolated(seq, self._verify, seq, tokens, logits[at:at + 1 + len(tokens)])
            at += 1 + len(tokens)

    def _drafts(self, decode: list[_Seq]) -> list[list[int]]:
        """Each decoding sequence's draft, no longer than plain decoding could still emit after its next token
        (max_tokens; computed positions stay below n_ctx - 1), fitted to the step (draft.fit)."""
        out: list[list[int]] = [[] for _ in decode]
        groups: dict[int, tuple[object, list]] = {}  # drafters that draft together (a draft model's)
        for i, seq in enumerate(decode):
            room = self.n_ctx - 2 - len(seq.history)
            if seq.job.max_tokens is not None:
                room = min(room, seq.job.max_tokens - seq.n_gen - 1)
            d = seq.drafter
            if d is not None and d.group is None:
                out[i] = d.propose(seq.history, seq.next_tok, room)
            elif d is not None:
                groups.setdefault(id(d.group), (d.group, []))[1].append((i, (d, seq.history, seq.next_tok, room)))
        for group, asks in groups.values():
            for (i, _), tokens in zip(asks, group.propose_many([ask for _, ask in asks])):
                out[i] = tokens
        return draft.fit(out, len(decode), self.batch)

    def _pass(self, decode: list[_Seq], drafts: list[list[int]]) -> tuple[list, list[_Seq], np.ndarray]:
        """One forward pass: each decoding sequence's next token and draft (logits at every position), then
        prompt chunks in the budget left -> (items, the sequences given logits: decoding ones, then prompts
        done; the logits in that order). A failure changes nothing (the chunks are put back)."""
        store, marks = self.store_of(), []
        items, rows, n = [], [], 0
        for s, d in zip(decode, drafts):  # rows: the next token's and the draft's (not a redone token's)
            items.append((s.ctx, s.redo + [s.next_tok] + d))
            rows += range(n + len(s.redo), n + len(s.redo) + 1 + len(d))
            n += len(s.redo) + 1 + len(d)
            if d:
                store.stash(s.ctx)  # a hybrid's state, to roll back to if the draft is cut
        wants, budget = list(decode), self.batch - n
        for seq in self.running:
            if not seq.todo or budget <= 0:
                continue
            take = min(len(seq.todo), budget)
            if take < len(seq.todo) and take > ALIGN:
                take -= (n + take) % ALIGN
            if store.states is not None:
                # a hybrid model's state is checkpointed at each prompt chunk's end: at the starts of the
                # prompt's last messages (where an edit or a branch starts again), and at its end with the
                # logits there (_logits_ready: where a regenerated answer starts again)
                while seq.cuts and seq.cuts[0] >= len(seq.todo):
                    seq.cuts.pop(0)
                take = min(take, len(seq.todo) - (seq.cuts[0] if seq.cuts else 0))
            chunk, seq.todo = seq.todo[:take], seq.todo[take:]
            if store.states is not None and seq.todo:
                marks.append(seq.ctx)
            items.append((seq.ctx, chunk))
            n += take
            budget -= take
            if not seq.todo:
                rows.append(n - 1)
                wants.append(seq)
        try:
            out = store.compute(items, np.asarray(rows, np.int64))
        except OutOfPages:
            self._undo_chunks(items[len(decode):])
            raise
        for ctx in marks:
            store.checkpoint(ctx)
        return items, wants, out

    def _verify(self, seq: _Seq, tokens: list[int], logits: np.ndarray):
        """logits[i]: after the sequence's computed tokens and tokens[:i] (a draft). Each row is sampled as
        plain decoding samples it; tokens[i] is kept, its K/V with it, while it equals the token just sampled.
        The K/V of the rest is cut."""
        if tokens:
            seq.n_drafted += len(tokens)
            seq.n_draft_steps += 1
            self.drafted_tokens += len(tokens)
            self.draft_steps += 1
        kept = 0
        for i, row in enumerate(logits):
            self._logits_ready(seq, row)
            if seq not in self.running or i == len(tokens) or seq.next_tok != tokens[i] or seq.job.cancelled:
                break
            seq.history.append(seq.next_tok)
            seq.next_tok = None
            kept += 1
            seq.n_accepted += 1
            self.accepted_tokens += 1
        if seq in self.running:
            if tokens:
                seq.drafter.verified(len(tokens), kept)
            self._trim(seq)

    def _trim(self, seq: _Seq):
        """Cut the K/V of draft tokens past the sequence's history (rejected, or past its end): pages
        released, nothing copied. The context's last logits stay those after the history's last token. A
        hybrid's state goes back to before the pass: the accepted tokens are computed again by the next."""
        kept = self.store_of().trim(seq.ctx, len(seq.history))
        seq.redo = seq.history[kept:]

    def _undo_chunks(self, items):
        """A failed pass computed nothing: put the prompt chunks back."""
        by_ctx = {s.ctx: s for s in self.running}
        for ctx, chunk in items:
            seq = by_ctx[ctx]
            seq.todo = chunk + seq.todo

    def _admit(self):
        store = self.store_of()
        while self.queue and len(self.running) < self.concurrency:
            with self.cv:
                job, t_submit = self.queue.popleft()
            if job.cancelled:
                job.sink(Done(0, "cancelled", 0, 0, 0, 0, 0, 0, []))
                continue
            try:
                self._start(store, job, t_submit)
            except Exception as e:
                job.sink(Done(0, "error", 0, 0, 0, 0, 0, 0, [], error=e))

    def _start(self, store: ContextStore, job: Job, t_submit: int):
        mode = self.check_mode(job.spec or self.speculation)  # fails here, before any KV change
        before = dict(store.tier_tokens)
        cut, last_logits = None, None
        if job.ctx is None:
            ctx, n_cached = store.open(job.prompt, job.lora)
            history, todo = list(job.prompt[:n_cached]), list(job.prompt[n_cached:])
            last_logits = store.last_logits(ctx)  # a prompt computed before, opened whole
        else:
            ctx, got = job.ctx, store.resume(job.ctx, job.prompt)
            history, todo, n_cached = got.computed, got.todo, len(got.computed)
            cut, last_logits = got.matcher, got.last_logits
        seq = _Seq(job, 0, ctx, todo, history, n_cached, self.tokenizer, t_submit)
        seq.cuts = [len(todo) - k for k in store.prompt_cuts(todo) if k >= LOAD.turn_checkpoint_gap]
        job.cached_tokens, job.prompt_tokens = n_cached, seq.n_prompt
        seq.n_disk = store.tier_tokens.get("disk", 0) - before.get("disk", 0)
        seq.n_shared = store.tier_tokens.get("shared", 0) - before.get("shared", 0)
        seq.drafter = self._drafter(mode, ctx)
        # a named context's cut-off constrained generation continues under its grammar, unless text is added
        if job.grammar is None and not job.prompt:
            seq.grammar = cut
        self.running.append(seq)
        self._progress(seq)
        if not todo:  # a context continued as it is: its last logits are known
            self._isolated(seq, self._logits_ready, seq, last_logits)

    def _progress(self, seq: _Seq):
        """A Progress of how far seq's prompt is, when its job asked."""
        if seq.job.progress:
            done = len(seq.history) > seq.n_cached
            seq.job.sink(Progress(seq.n_prompt, seq.n_cached, len(seq.history),
                                 time.perf_counter_ns() - seq.t_start if done else 0))

    def _logits_ready(self, seq: _Seq, logits: np.ndarray):
        """The sequence's prompt (or last token) is computed: fork choices if first time, then sample."""
        store = self.store_of()
        if seq.job.ctx is not None:
            store.set_logits(seq.ctx, logits)
        if not seq.t_prefilled:
            seq.t_prefilled = time.perf_counter_ns()
            store.checkpoint(seq.ctx, logits)  # the prompt's end: asked again, it samples at once
            for i, kid in enumerate(store.fork(seq.ctx, seq.job.n - 1) if seq.job.n > 1 else (), start=1):
                twin = _Seq(seq.job, i, kid, [], list(seq.history), seq.n_cached, self.tokenizer, seq.t_submit)
                twin.n_disk, twin.n_shared = seq.n_disk, seq.n_shared
                twin.grammar = seq.grammar.clone() if seq.grammar is not None else None
                twin.drafter = self._drafter(seq.job.spec or self.speculation, kid)
                twin.t_start, twin.t_prefilled = seq.t_start, seq.t_prefilled
                self.running.append(twin)
                self._sample(twin, logits)
        self._sample(seq, logits)

    def check_mode(self, mode: str) -> str:
        """mode, if it is one (draft.MODES) this scheduler can run, else ValueError."""
        if draft.check_mode(mode) == "draft" and self.draft_model is None:
            raise ValueError("spec draft needs a draft model (serve/run --draft-model, llamay.load(draft_model=...))")
        return mode

    def _drafter(self, mode: str, ctx: int):
        """A new drafter of mode for the sequence of context ctx (None for mode none)."""
        if mode == "ngram":
            return draft.NgramDrafter()
        if mode == "tree":
            return draft.TreeDrafter(lambda tokens, k: self.store_of().continuation(ctx, tokens, k),
                                     lambda: self.store_of().tree_version)
        return self.draft_model.drafter() if mode == "draft" else None

    def _sample(self, seq: _Seq, logits: np.ndarray):
        self._isolated(seq, self._sample_one, seq, logits)

    def _isolated(self, seq: _Seq, fn, *args):
        """fn(*args); a failure in it (sampling, grammar, detokenizing, forking choices) is seq's alone: seq
        ends with the error and every other sequence runs on."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - isolated to seq, reported through its Done
            if seq in self.running:
                self._finish(seq, "error", error=e)

    def _sample_one(self, seq: _Seq, logits: np.ndarray):
        if seq.job.max_tokens == 0:
            return self._finish(seq, "length")
        tok = constrain.sample(seq.sampler, logits, seq.history, seq.grammar)
        if tok in self.tokenizer.eog_ids:
            return self._finish(seq, "stop")
        complete = constrain.accept(seq.grammar, tok, self.tokenizer.eog_ids)
        seq.n_gen += 1
        k = seq.job.logprobs
        logprob, top = seq.sampler.drawn_logprobs(tok, k) if seq.job.post_sampling and k is not None \
            else logprobs(logits, tok, k)
        text = seq.matcher.feed(seq.detok.add(tok))
        now = time.perf_counter_ns()
        seq.job.sink(Piece(seq.index, text, tok, logprob, top, seq.t_prefilled - seq.t_start, now - seq.t_prefilled))
        seq.next_tok = tok
        if seq.matcher.stopped or complete:
            return self._finish(seq, "stop")
        limit = seq.job.max_tokens
        if (limit is not None and seq.n_gen >= limit) or len(seq.history) + 1 >= self.n_ctx:
            return self._finish(seq, "length")

    def _finish(self, seq: _Seq, reason: str, error: Exception | None = None):
        store = self.store_of()
        self.running.remove(seq)
        self._trim(seq)
        if seq.drafter is not None:
            seq.drafter.close()
        if reason != "error":
            try:
                tail = seq.matcher.feed(seq.detok.flush()) + seq.matcher.flush()
                if tail:
                    seq.job.sink(Piece(seq.index, tail, -1))
            except Exception as e:  # noqa: BLE001 - the sequence still ends, with the error
                reason, error = "error", e
        tokens = seq.history + ([seq.next_tok] if seq.next_tok is not None else [])
        keep = seq.job.ctx is not None and seq.index == 0  # a named context outlives its jobs
        if keep:
            cut = reason == "length" and seq.grammar is not None and not seq.grammar.is_done()
            # the grammar of a cut-off constrained generation: continued by its next job, saved in snapshots
            store.park(seq.ctx, seq.redo + ([seq.next_tok] if seq.next_tok is not None else []),
                       seq.grammar if cut else None)
        else:
            store.free(seq.ctx, cache=reason != "error")
        now = time.perf_counter_ns()
        t_pre = seq.t_prefilled or now
        seq.job.sink(Done(seq.index, reason, seq.n_prompt, seq.n_cached, seq.n_gen, t_pre - seq.t_start,
                          now - t_pre, now - seq.t_submit, tokens, seq.matcher.matched,
                          seq.ctx if keep else None, error, seq.n_drafted, seq.n_accepted, seq.n_draft_steps,
                          seq.n_disk, seq.n_shared))

