"""The named contexts the context routes keep: bounded in number and in the KV pages they hold, and expired
after an idle time, so clients that create and forget contexts cannot take a model's memory from others."""
from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field

from ..engine import PageShare
from ..settings import SERVER
from .protocol.base import ProtocolError

# Named contexts of one model may hold at most this share of its KV pages; the rest stays free for the
# generations (and their prefix cache) that every other client runs.
CONTEXT_PAGE_SHARE = 0.75

log = logging.getLogger("llamay.server")


@dataclass
class NamedContext:
    id: str
    model: str
    ctx: int  # the engine's context id
    messages: list[dict] | None = None  # the conversation so far, when made from messages
    parent: str | None = None  # the context it was forked from
    owner: str | None = None  # "studio": the Studio's, freed least recently used first when it needs room
    created: int = field(default_factory=lambda: int(time.time()))
    busy: bool = False
    last_used: float = field(default_factory=time.monotonic)


class ContextTable:
    """Id -> NamedContext. Route handlers run on the event loop, so no lock: only the loop touches it."""

    def __init__(self, max_contexts: int = SERVER.max_contexts, ttl: float = SERVER.context_ttl):
        self.max_contexts, self.ttl = max_contexts, ttl
        self.by_id: dict[str, NamedContext] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def values(self) -> list[NamedContext]:
        return list(self.by_id.values())

    def get(self, cid: str) -> NamedContext:
        nc = self.by_id.get(cid)
        if nc is None:
            raise ProtocolError(404, f"no context '{cid}'", "not_found", "id")
        nc.last_used = time.monotonic()
        return nc

    def check_room(self, n_new: int = 1):
        """429 unless n_new more contexts fit under --max-contexts."""
        if len(self.by_id) + n_new > self.max_contexts:
            raise ProtocolError(429, f"{len(self.by_id)} contexts are open and {n_new} more would pass the limit "
                                     f"of {self.max_contexts} (--max-contexts): delete some first", "rate_limit")

    def add(self, loaded, ctx: int, messages: list[dict] | None, parent: NamedContext | None = None,
            owner: str | None = None) -> NamedContext:
        # random, not a counter: ids stay unique across servers behind `llamay route`, and unguessable
        nc = NamedContext(f"ctx_{secrets.token_hex(8)}", loaded.info.name, ctx, messages,
                          parent.id if parent else None, owner=owner)
        self.by_id[nc.id] = nc
        loaded.contexts.add(nc.id)
        return nc

    def remove(self, nc: NamedContext, loaded) -> None:
        self.by_id.pop(nc.id, None)
        if loaded is not None:
            loaded.contexts.discard(nc.id)

    def share(self, model: str) -> PageShare:
        """The pages model's named contexts may hold together: a verb growing one of them past it is a 429
        (sessions.settle)."""
        return PageShare(tuple(nc.ctx for nc in self.by_id.values() if nc.model == model), CONTEXT_PAGE_SHARE)

    def reclaimable(self, owner: str, cap: int, n_new: int, keep: tuple[str, ...] = ()) -> list[NamedContext]:
        """owner's idle contexts to free, least recently used first, so that n_new more leave owner at most cap
        contexts and the table within --max-contexts."""
        mine = sorted((nc for nc in self.by_id.values() if nc.owner == owner and not nc.busy and nc.id not in keep),
                      key=lambda nc: nc.last_used)
        held = sum(nc.owner == owner for nc in self.by_id.values())
        n = max(held + n_new - cap, len(self.by_id) + n_new - self.max_contexts, 0)
        return mine[:n]

    def expired(self, now: float | None = None) -> list[NamedContext]:
        if self.ttl <= 0:
            return []
        now = time.monotonic() if now is None else now
        return [nc for nc in self.by_id.values() if not nc.busy and nc.last_used + self.ttl <= now]


async def free(table: ContextTable, registry, contexts: list[NamedContext]) -> list[str]:
    """Drop contexts (their tokens stay in the prefix cache) -> their ids."""
    gone = []
    for nc in contexts:
        if nc.busy or table.by_id.get(nc.id) is not nc:  # taken up, or gone, while an earlier one was freed
            continue
        loaded = registry.loaded.get(nc.model)
        table.remove(nc, loaded)
        gone.append(nc.id)
        if loaded is not None:
            await asyncio.wrap_future(loaded.session.free(nc.ctx))
    return gone


async def expire(table: ContextTable, registry) -> list[str]:
    """Free the contexts idle past the TTL -> their ids."""
    gone = await free(table, registry, table.expired())
    if gone:
        log.info("expired idle contexts: %s", ", ".join(gone))
    return gone
