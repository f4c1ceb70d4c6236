"""vLLM's KV-cache events over ZMQ (`serve --kv-events`): the prefix cache's full pages as they enter and
leave memory, for gateways that route by the cache each worker holds (llm-d's KV-cache indexer, Dynamo).

Wire format, as vLLM's ZmqEventPublisher sends it (ref: vllm/distributed/kv_events.py; cross-checked with
llm-d-kv-cache-manager's pkg/kvcache/kvevents reader): a PUB socket that binds when the endpoint has `*` or
`::` (tcp://*:5557) and connects otherwise (tcp://indexer:5557, to a subscriber that binds). Each message is
three frames: the topic (UTF-8), a sequence number (8 bytes big-endian unsigned, from 0, one per message)
and a msgpack payload, the batch [ts, events, data_parallel_rank] (ts: seconds since the epoch; rank 0).
An event is a tagged positional array, as msgspec encodes vLLM's array_like structs (vLLM up to 0.23):
    ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]
    ["BlockRemoved", block_hashes, medium]
    ["AllBlocksCleared"]
or, with format "map" (vLLM after its PR 42892), a map of the same fields tagged by "type".

A block is a full page (page_size tokens = block_size): BlockStored carries a run of them, each a child of
the one before, the first a child of parent_block_hash (None: the sequence's first page), token_ids their
tokens. A block's hash is its page's chain key (kv/disk.py chain_keys: the tiers' key over the weights,
adapters, KV type, page size, RoPE variant and every token up to the page's end), the key's last 8 bytes as a
big-endian unsigned integer (as llm-d reads byte hashes). Partial pages are never announced. lora_id, medium
and lora_name are None (medium None: the engine's own cache, which consumers take as vLLM's GPU tier).

Threads: the scheduler's thread only puts records on a bounded queue (never blocking: past the bound they
are dropped and counted); one publisher thread hashes, encodes and sends, a batch per wake-up per topic."""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from ..engine.cache_tiers import chain_keys, chain_root
from ..settings import KV_EVENTS

FORMATS = ("array", "map")
BATCH_MAX = 1024  # queued records turned into one wake-up's batches
_log = logging.getLogger("llamay.server")


class KVEventsUnavailable(RuntimeError):
    """--kv-events without pyzmq and msgpack, or an endpoint ZMQ refuses."""


def _modules():
    try:
        import msgpack
        import zmq
    except ImportError:
        raise KVEventsUnavailable("--kv-events needs pyzmq and msgpack: pip install 'llamay[kv-events]'") from None
    return zmq, msgpack


def binds(endpoint: str) -> bool:
    """vLLM's rule: a wildcard address, ipc:// or inproc:// is bound; any other endpoint is connected to."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def event(tag: str, **fields) -> tuple[str, dict]:
    return tag, fields


def stored(hashes: list[int], parent: int | None, token_ids: list[int], block_size: int) -> tuple[str, dict]:
    return event("BlockStored", block_hashes=hashes, parent_block_hash=parent, token_ids=token_ids,
                 block_size=block_size, lora_id=None, medium=None, lora_name=None)


def encode(ts: float, events: list[tuple[str, dict]], fmt: str, packb) -> bytes:
    """The payload of one message: events (tag, fields in wire order) in format fmt (FORMATS)."""
    body = [[tag, *fields.values()] if fmt == "array" else {"type": tag, **fields} for tag, fields in events]
    return packb([ts, body, 0])


def block_hash(key: bytes) -> int:
    return int.from_bytes(key[-8:], "big")


class ModelEvents:
    """One served model's events: records from its scheduler's thread, turned into events on the publisher's."""

    def __init__(self, publisher: Publisher, topic: str, root_of: Callable[[tuple], bytes], page_size: int):
        self.publisher, self.topic = publisher, topic.encode()
        self.root_of, self.page_size = root_of, page_size
        self._hashes: dict[int, int] = {}  # page -> hash of the pages announced and not removed (publisher thread)

    # --- the scheduler's thread: KVState.listener, through ContextStore.watch ---------------------

    def listener(self, lora_of: Callable[[int], tuple]) -> _Listener:
        return _Listener(self, lora_of)

    def cleared(self):
        """Every page of the model left memory (a reset, an unload)."""
        self.publisher.put((self, "cleared", None))

    # --- the publisher's thread ---------------------------------------------------------------

    def events(self, kind: str, args) -> list[tuple[str, dict]]:
        if kind == "stored":
            lora, tokens, first, pages = args
            ps = self.page_size
            hashes = [block_hash(k) for k in chain_keys(self.root_of(lora), tokens, ps, first + len(pages))]
            self._hashes.update(zip(pages, hashes[first:]))
            return [stored(hashes[first:], hashes[first - 1] if first else None, tokens[first * ps:], ps)]
        if kind == "removed":
            gone = [self._hashes.pop(p) for p in args if p in self._hashes]
            return [event("BlockRemoved", block_hashes=gone, medium=None)] if gone else []
        self._hashes.clear()
        return [event("AllBlocksCleared")]


class _Listener:
    """KVState.listener for one store: namespaces named by their adapters, records queued."""

    def __init__(self, model: ModelEvents, lora_of: Callable[[int], tuple]):
        self.model, self.lora_of = model, lora_of

    def stored(self, ns: int, tokens: list[int], first: int, pages: list[int]):
        self.model.publisher.put((self.model, "stored", (self.lora_of(ns), tokens, first, list(pages))))

    def removed(self, pages: list[int]):
        self.model.publisher.put((self.model, "removed", pages))

    def cleared(self):
        self.model.cleared()


class Publisher:
    def __init__(self, endpoint: str, topic: str = KV_EVENTS.topic, fmt: str = KV_EVENTS.format,
                 max_queue: int = KV_EVENTS.queue, hwm: int = KV_EVENTS.hwm):
        """A PUB socket on endpoint (bound or connected: binds) and its thread. topic: every message's first
        frame, {model} replaced by the served model's name. KVEventsUnavailable when it cannot be."""
        zmq, msgpack = _modules()
        if fmt not in FORMATS:
            raise KVEventsUnavailable(f"--kv-events-format {fmt}: one of {', '.join(FORMATS)}")
        self.endpoint, self.topic, self.fmt, self._packb = endpoint, topic, fmt, msgpack.packb
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUB)
        self._sock.setsockopt(zmq.SNDHWM, hwm)
        self._sock.setsockopt(zmq.LINGER, 1000)  # ms to flush queued messages at close
        try:
            self._sock.bind(endpoint) if binds(endpoint) else self._sock.connect(endpoint)
        except zmq.ZMQError as e:
            self._sock.close(0)
            self._ctx.term()
            raise KVEventsUnavailable(f"--kv-events {endpoint}: {e}") from None
        self._queue: queue.Queue = queue.Queue(max_queue)
        self.seq = 0  # messages sent
        self.dropped = 0  # records the full queue turned away
        self._thread = threading.Thread(target=self._run, name="llamay-kv-events", daemon=True)
        self._thread.start()

    def model(self, name: str, llm) -> ModelEvents:
        """The events of a loaded model (its pages keyed as its tiers key them)."""
        root_of = llm.cache.root_of if llm.cache is not None else chain_root(llm)
        return ModelEvents(self, self.topic.replace("{model}", name), root_of, llm.page_size)

    def put(self, record):
        try:
            self._queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                _log.warning("KV events: the publisher's queue is full; events are being dropped")

    def close(self, timeout: float = 5.0):
        """Send what is queued, then close the socket."""
        self._queue.put(None, timeout=timeout)
        self._thread.join(timeout)
        self._sock.close()
        self._ctx.term()

    def _run(self):
        while True:
            records = [self._queue.get()]
            while records[-1] is not None and len(records) < BATCH_MAX:
                try:
                    records.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._send([r for r in records if r is not None])
            if records[-1] is None:
                return

    def _send(self, records):
        by_topic: dict[bytes, list] = {}
        for model, kind, args in records:
            try:
                by_topic.setdefault(model.topic, []).extend(model.events(kind, args))
            except Exception:  # noqa: BLE001 - one bad record must not stop the thread
                _log.exception("KV events: a %s record failed", kind)
        ts = time.time()
        for topic, events in by_topic.items():
            if events:
                payload = encode(ts, events, self.fmt, self._packb)
                self._sock.send_multipart([topic, self.seq.to_bytes(8, "big"), payload])
                self.seq += 1
