"""The prefix cache's tiers below memory: the disk (kv/disk.py) and a shared Redis/Valkey (kv/shared.py).

Write-through: when a context's tokens enter the radix tree (ContextStore.free with cache), its full pages go
to every tier that lacks them, on a writer thread of this object's own, off the scheduler's critical path,
once the model is idle (engine/idle.py: a write beside a request took a core from it), CACHE.write_wait
seconds after it was queued, or when a flush waits for it, whichever comes first.
The store pins those pages (not evicted; full pages are never written) until the writer has read them out
of the pool, and unpins them when written() hands them back. This module never touches the KV state.
So the tiers hold what memory holds and what it evicted, and a restarted process, or another server, finds it.

Reading: a prompt whose computed prefix in memory ends before its last full page looks up the following
pages' keys in the disk tier, then the shared one from where the disk's run ends, and reads those runs into
fresh pages of the context instead of prefilling them, where reading is estimated faster than computing
(each tier's read bytes/s and the prefill's tokens/s, measured as they happen; until measured, reading is
assumed to pay). Those pages then enter the tree as if computed. A page that fails to read (missing, torn,
corrupt) ends the run there: the rest is computed. The pool's first pages (those a fresh process hands out
first) are faulted in on a thread at load (prefault), so the first read after a restart does not pay for
backing memory, which costs more than the read itself (bench/cache.py --serve).

Keys (kv/disk.py chain_keys) start from a root naming the weights digest, the adapters and their scales,
the KV type, the page size and the RoPE variant: K/V is only ever read back into the model that made it.

A hybrid model's state checkpoints (engine/checkpoints.py) go to tiers of their own beside the pages' (a
disk folder of fixed-size records, the same Redis): a record is the recurrent state after a prefix of n
tokens plus the K/V page holding its last n % page_size tokens (the full pages before it are the pages'
tiers'), keyed by the prefix. A prompt resumes from the deepest record the tiers hold whose full pages it
has, so a restarted process or another server continues a hybrid conversation too."""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import env
from ..files import write_atomic
from ..kv import kv_type, page_bytes
from ..kv.disk import DiskTier, chain_keys, root_key
from ..kv.pool import PagePool
from ..models.describe import state_bytes
from ..settings import CACHE
from .digest import weights_digest
from .idle import background_priority
from .context_store import EMA

TIERS = ("disk", "shared")  # the order a prompt's pages are looked up in
SCOPE_FILE = "scope.json"  # what a scope's folder holds pages of: `llamay cache ls` names it


@dataclass(frozen=True)
class Found:
    """Pages the tiers hold for a prompt (CacheTiers.find): n_pages from page `start` of its page chain."""
    start: int
    n_pages: int
    keys: list[bytes]  # the chain keys of those pages
    runs: tuple[tuple[str, int, int], ...]  # (tier, first page, pages): read in this order


class CacheTiers:
    def __init__(self, tiers: dict, root_of: Callable[[tuple], bytes], page_size: int, page_bytes: int,
                 states: dict | None = None, idle: Callable[[Callable[[], bool]], None] | None = None):
        """tiers: name (TIERS) -> DiskTier or SharedTier; root_of(lora choice) -> the chain root of K/V
        computed under those adapters (see above); states: name -> the tier of state records (a hybrid
        model's), of state bytes + page_bytes each; idle(done): returns when the model is idle or done() is
        true (engine/idle.py): each write waits for it, at most CACHE.write_wait seconds after it was
        queued, and not at all while a flush waits for it."""
        self.tiers = {name: tiers[name] for name in TIERS if name in tiers}
        self.states = {name: (states or {})[name] for name in TIERS if name in (states or {})}
        self.root_of, self.page_size, self.page_bytes = root_of, page_size, page_bytes
        self.idle = idle
        self.read_bps: dict[str, float] = {}  # measured: bytes read per second, per tier
        self.pages_written = {name: 0 for name in self.tiers}
        self.pages_read = {name: 0 for name in self.tiers}
        self.errors = 0  # writes that failed (a full disk, ...): those pages are simply not there
        self._jobs: queue.Queue = queue.Queue()
        self._done: deque = deque()  # (owner, pages) the writer is through with: handed back by written
        self._busy = threading.Condition()
        self._in_flight = 0
        self._flushing = 0  # flushes waiting: the writer waits for no idle moment meanwhile
        self._thread = threading.Thread(target=self._write_loop, name="llamay-cache-tiers", daemon=True)
        self._thread.start()
        ref = weakref.ref(self)
        atexit.register(lambda: (c := ref()) and c.flush(timeout=30))

    @property
    def disk(self) -> DiskTier | None:
        return self.tiers.get("disk")

    def keys_of(self, lora: tuple, tokens: list[int], n_pages: int) -> list[bytes]:
        return chain_keys(self.root_of(lora), tokens, self.page_size, n_pages)

    # --- the scheduler's thread (called by the context store, which alone changes KV state) ---------

    def save(self, owner, pool: PagePool, lora: tuple, tokens: list[int], pages: list[int]):
        """Queue full pages (pinned by owner, the context store, until written(owner) hands them back)
        holding tokens' K/V for every tier (the ones a tier holds already are skipped)."""
        with self._busy:
            self._in_flight += 1
        self._jobs.put((time.monotonic(), (owner, pool, lora, tokens, pages)))

    def written(self, owner) -> list[list[int] | int]:
        """What of owner's saves the writer is through with: each save's pages to unpin, or a state record's
        slot (an int) to release (those of another owner, a store replaced since by LLM.reset, went with
        it)."""
        out = []
        while self._done:
            who, pages = self._done.popleft()
            if who is owner:
                out.append(pages)
        return out

    def find(self, lora: tuple, tokens: list[int], n_cached: int, prefill_tps: float | None) -> Found | None:
        """The runs of pages the tiers hold after a context's n_cached computed tokens, up to the last full
        page before the last token, worth reading rather than computing (None: none)."""
        ps = self.page_size
        start, usable = n_cached // ps, (len(tokens) - 1) // ps
        if usable <= start:
            return None
        keys = self.keys_of(lora, tokens, usable)[start:]
        runs, at = [], 0  # (tier name, first key, pages)
        for name, tier in self.tiers.items():
            n = tier.find(keys[at:])
            if n and not self._pays(name, n, prefill_tps):
                break
            if n:
                runs.append((name, at, n))
                at += n
        return Found(start, at, keys, tuple(runs)) if at else None

    def state_keys(self, lora: tuple, tokens: list[int], ns: list[int]) -> list[bytes]:
        """The record keys of the prefixes tokens[:n], n in ascending ns: one pass over the tokens."""
        h = hashlib.blake2b(digest_size=16, key=hashlib.blake2b(self.root_of(lora) + b"state").digest())
        raw, at, out = np.asarray(tokens[:ns[-1]], "<u4").tobytes(), 0, []
        for n in ns:
            h.update(raw[4 * at:4 * n])
            at = n
            out.append(h.copy().digest())
        return out

    def save_state(self, owner, lora: tuple, tokens: list[int], n: int, states, slot: int, kv_bytes: bytes):
        """Queue the state record after tokens[:n] for every state tier: slot of states (a StatePool), shared
        by owner until written(owner) hands it back, read in place by the writer, then kv_bytes (a copy,
        the writer's)."""
        if self.states:
            with self._busy:
                self._in_flight += 1
            self._jobs.put((time.monotonic(), ("state", owner, self.state_keys(lora, tokens, [n])[0], states, slot,
                                               kv_bytes)))

    def find_state(self, lora: tuple, tokens: list[int], lo: int, hi: int) -> tuple[int, str] | None:
        """(n, tier) of the deepest state record the tiers hold after tokens[:n], lo < n <= hi."""
        ns = list(range(lo + 1, hi + 1))
        if not ns:
            return None
        keys = self.state_keys(lora, tokens, ns)
        for name, tier in self.states.items():
            held = tier.has(keys)
            if any(held):
                deepest = len(held) - 1 - held[::-1].index(True)
                return ns[deepest], name
        return None

    def read_state(self, lora: tuple, tokens: list[int], n: int, name: str, record: list[memoryview]) -> bool:
        """The state record after tokens[:n] from tier name into the buffers `record` (its bytes in order),
        verified -> whether it was read."""
        return self.states[name].read(self.state_keys(lora, tokens, [n]), [record]) == 1

    def read(self, found: Found, buffers: list[list[memoryview]]) -> tuple[int, dict[str, int]]:
        """Read found's runs into buffers (PagePool.page_buffers of each of its pages, in order) -> (pages read
        whole, from the first; tokens read per tier). A page that fails to read ends the reading there."""
        good, out = 0, {}
        for name, first, n in found.runs:
            t = time.perf_counter()
            got = self.tiers[name].read(found.keys[first:first + n], buffers[first:first + n])
            if got:
                self._measured(name, got * self.page_bytes / max(time.perf_counter() - t, 1e-9))
                out[name] = got * self.page_size
                self.pages_read[name] += got
            good += got
            if got < n:
                break
        return good, out

    def _pays(self, name: str, n_pages: int, prefill_tps: float | None) -> bool:
        bps = self.read_bps.get(name)
        if not prefill_tps or not bps:
            return True
        return n_pages * self.page_bytes / bps < n_pages * self.page_size / prefill_tps

    def _measured(self, name: str, bps: float):
        old = self.read_bps.get(name)
        self.read_bps[name] = bps if old is None else (1 - EMA) * old + EMA * bps

    # --- any thread ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued page is written (or failed) -> whether it finished in time."""
        with self._busy:
            self._flushing += 1
            try:
                return self._busy.wait_for(lambda: self._in_flight == 0, timeout)
            finally:
                self._flushing -= 1

    def close(self, timeout: float = 60.0):
        """Write what is queued (up to timeout), then stop the writer."""
        self.flush(timeout)
        self._jobs.put(None)

    # --- the writer's thread -------------------------------------------------------------------

    def _write_loop(self):
        background_priority()
        while (item := self._jobs.get()) is not None:
            queued, job = item
            if self.idle is not None:
                self.idle(lambda: self._flushing > 0 or time.monotonic() >= queued + CACHE.write_wait)
            if job[0] == "state":
                self._write_state(*job[1:])
                continue
            owner, pool, lora, tokens, pages = job
            try:
                keys = self.keys_of(lora, tokens, len(pages))
                for name, tier in self.tiers.items():
                    todo = [(k, p) for k, p, held in zip(keys, pages, tier.has(keys)) if not held]
                    if todo:
                        tier.write([k for k, _ in todo], [pool.page_buffers(p) for _, p in todo])
                        self.pages_written[name] += len(todo)
            except Exception:  # noqa: BLE001 - a page not written is only a page to compute again
                self.errors += 1
            finally:
                self._done.append((owner, pages))
                with self._busy:
                    self._in_flight -= 1
                    self._busy.notify_all()


    def _write_state(self, owner, key: bytes, states, slot: int, kv_bytes: bytes):
        try:
            for tier in self.states.values():
                if not tier.has([key])[0]:
                    tier.write([key], [states.buffers(slot) + [memoryview(kv_bytes)]])
        except Exception:  # noqa: BLE001 - a record not written is only a prefix to compute again
            self.errors += 1
        finally:
            self._done.append((owner, slot))
            with self._busy:
                self._in_flight -= 1
                self._busy.notify_all()


def cache_root() -> Path:
    """Where the disk tier keeps its scopes unless told: $LLAMAY_HOME/cache/kv."""
    return env.home() / "cache" / CACHE.subdir


def cache_tiers(llm, directory: str | os.PathLike | None, disk_budget: int, redis_url: str | None,
                idle: Callable[[Callable[[], bool]], None] | None = None) -> CacheTiers:
    """The LLM's tiers: a disk folder per weights digest, KV type and page size under directory (default
    cache_root()) holding disk_budget bytes of pages (0: no disk tier), and the Redis/Valkey at redis_url;
    their writes wait for idle (CacheTiers)."""
    from ..kv.shared import SharedTier
    digest, ps = weights_digest(llm.path), llm.page_size
    dims = llm.spec.kv_dims
    one_page = page_bytes(dims, ps, kv_type(llm.kv, *(d for _, d in dims)))
    tiers, states = {}, {}
    record = state_bytes(llm.spec) + one_page if llm.spec.state_layers else 0  # a state record's size
    if disk_budget:
        folder = Path(directory or cache_root()) / f"{digest[:16]}-{llm.kv}-p{ps}"
        tiers["disk"] = DiskTier(folder, disk_budget, one_page)
        if record:
            states["disk"] = DiskTier(folder / "states", int(disk_budget * CACHE.state_share), record)
        _describe(folder, {"model": os.path.basename(llm.path), "path": llm.path, "digest": digest, "kv": llm.kv,
                           "page_size": ps})
    if redis_url:
        tiers["shared"] = SharedTier(redis_url, one_page)
        if record:
            states["shared"] = SharedTier(redis_url, record)
    return CacheTiers(tiers, chain_root(llm, digest), ps, one_page, states, idle)


# The version of the bits a page or state record holds, in every key: bumped when a kernel's results change
# (2: Mamba's selective scan sums in lanes.h order), so a disk or Redis tier written before never resumes a
# context to other bits than computing it would give
KV_NUMERICS = "llamay-kv-2"


def chain_root(llm, digest: str | None = None) -> Callable[[tuple], bytes]:
    """root_of(lora choice) -> the root of the chain keys of the LLM's pages computed under those adapters
    (digest: its weights digest, when known). The pages' identity for the tiers and for KV-cache events."""
    digest, ps = digest or weights_digest(llm.path), llm.page_size
    adapters = {a.name: a.digest for a in llm.loras}
    rope = llm.decoder.rope_variant or ""

    def root_of(lora: tuple) -> bytes:  # KV_NUMERICS: pages and states of another version's kernels never match
        return root_key(KV_NUMERICS, digest, llm.kv, str(ps), rope, *(f"{adapters[n]}*{s!r}" for n, s in lora))
    return root_of


def _describe(folder: Path, meta: dict):
    try:
        if not (folder / SCOPE_FILE).exists():
            write_atomic(folder / SCOPE_FILE, lambda f: f.write(json.dumps(meta, indent=1).encode()))
    except OSError:
        pass  # only `llamay cache ls` reads it
