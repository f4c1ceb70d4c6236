"""Session: the server's typed interface to one model's contexts.

Each verb runs on the model's scheduler thread between steps, through the context store's verbs, and
returns a concurrent Future of its result (the server awaits it with asyncio.wrap_future). The server
never sees the store: what it reads goes through view(), a read-only StoreView."""
from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from . import snapshots
from .context_store import PageShare, StoreView

T = TypeVar("T")


class Session:
    def __init__(self, llm):
        self._llm = llm

    def _call(self, fn) -> Future:
        return self._llm.scheduler.call(fn)

    def create(self, ids: list[int], lora: tuple | None = None,
               share: PageShare | None = None) -> Future[tuple[int, int, int]]:
        """A context holding ids (its cached prefix reused) -> (ctx, tokens cached, pages held)."""
        def run(store):
            ctx, n_cached = store.create(ids, lora, share)
            return ctx, n_cached, len(store.pages(ctx))
        return self._call(run)

    def restore(self, path: str, matcher, share: PageShare | None = None) -> Future[int]:
        """A context from the snapshot at path (matcher: snapshots.read_grammar's result for it) -> ctx."""
        return self._call(lambda store: snapshots.restore(self._llm, path, matcher, share))

    def save(self, ctx: int, path: str) -> Future[None]:
        return self._call(lambda store: snapshots.save(self._llm, ctx, path))

    def describe(self, ctx: int) -> Future[dict]:
        return self._call(lambda store: store.describe(ctx))

    def fork(self, ctx: int, n: int) -> Future[list[int]]:
        return self._call(lambda store: store.fork(ctx, n))

    def free(self, ctx: int) -> Future[None]:
        return self._call(lambda store: store.free(ctx))

    def prepare_append(self, ctx: int, ids: list[int], rebase: bool,
                       share: PageShare | None = None) -> Future[tuple[list[int], int]]:
        """Before a generation appends ids to the context (ids: the whole sequence when rebase, cutting the
        context back to what it shares with them; else tokens after its end) -> (tokens to append, tokens
        kept). share: checked for the growth."""
        def run(store):
            if rebase:
                return store.rebase(ctx, ids, share)
            if share is not None:
                store.check_share(share, len(ids), ctx)
            return ids, store.n_tokens(ctx)
        return self._call(run)

    def save_tokens(self, tokens: list[int], lora: tuple | None, path: str) -> Future[None]:
        """tokens (computed under lora; their cached prefix reused) into a snapshot at path, no context kept
        (llama-server's slot save)."""
        def run(store):
            ctx, _ = store.create(tokens, lora)
            try:
                snapshots.save(self._llm, ctx, path)
            finally:
                store.free(ctx)
        return self._call(run)

    def restore_tokens(self, path: str, matcher) -> Future[tuple[list[int], tuple]]:
        """The snapshot at path into the prefix cache, no context kept -> (its tokens, their adapters)
        (llama-server's slot restore)."""
        def run(store):
            ctx = snapshots.restore(self._llm, path, matcher)
            out = store.tokens(ctx), store.lora(ctx)
            store.free(ctx)  # its tokens and pages stay in the radix tree
            return out
        return self._call(run)

    def flush_cache(self) -> Future[int]:
        """The prefix cache's unheld pages in memory freed -> how many."""
        return self._call(lambda store: store.flush_cache())

    def exclusive(self, fn: Callable[[], T]) -> Future[T]:
        """fn() on the scheduler thread between steps, with no access to the store: work that must not run
        beside a forward pass (embeddings through the same decoder)."""
        return self._call(lambda store: fn())

    def view(self, fn: Callable[[StoreView], T]) -> Future[T]:
        """fn(a read-only view of the store), on the scheduler thread: a consistent reading."""
        return self._call(lambda store: fn(store.view()))
