"""vLLM's KV-cache events (serve --kv-events): what the KV state reports as pages enter and leave the radix
tree, the wire format decoded by msgspec structs declared as vLLM declares its own (array_like tagged
structs; tagged maps for the later format), and a real server's events read by a real ZMQ subscriber,
checked against the pages its prefix cache holds."""

import time

import httpx
import pytest

from llamay.kv.disk import chain_keys
from llamay.kv.state import KVState

from conftest import LiveServer, free_port

zmq = pytest.importorskip("zmq")
msgspec = pytest.importorskip("msgspec")
pytest.importorskip("msgpack")


class Recorder:
    """KVState.listener that keeps every call."""

    def __init__(self):
        self.calls = []

    def stored(self, ns, tokens, first, pages):
        self.calls.append(("stored", ns, list(tokens), first, list(pages)))

    def removed(self, pages):
        self.calls.append(("removed", sorted(pages)))

    def cleared(self):
        self.calls.append(("cleared",))


def cached_context(s: KVState, tokens: list[int]) -> list[int]:
    """A context of tokens computed (what it did not match), cached and freed -> its page table."""
    ctx, n = s.create(tokens)
    s.apply(s.plan_append(ctx, len(tokens) - n))
    s.commit(ctx, tokens[n:])
    table = s.page_table(ctx)
    s.cache(ctx)
    s.free(ctx)
    return table


# -- the KV state's reports

def test_full_pages_entering_the_tree_are_reported_once_with_their_place_in_the_sequence():
    s, rec = KVState(16, 4), Recorder()
    s.listener = rec
    a = list(range(10))  # 2 full pages and a partial one
    table_a = cached_context(s, a)
    assert rec.calls == [("stored", 0, a[:8], 0, table_a[:2])]  # the partial page is never announced
    b = a[:4] + [50, 51, 52, 53, 54]  # shares page 0, then a full page of its own
    table_b = cached_context(s, b)
    assert table_b[0] == table_a[0]
    assert rec.calls[1:] == [("stored", 0, b[:8], 1, [table_b[1]])]
    cached_context(s, a)  # all of it in the tree already
    assert len(rec.calls) == 2
    s.check()


def test_evictions_are_reported_and_an_emptied_tree_is_cleared():
    s, rec = KVState(4, 4), Recorder()
    s.listener = rec
    table = cached_context(s, list(range(13)))  # 3 full pages + a partial: the whole budget
    rec.calls.clear()
    cached_context(s, [90, 91, 92, 93, 94])  # 2 pages: the LRU leaves go (the partial page, then page 2)
    assert rec.calls[0] == ("removed", sorted([table[3], table[2]]))
    rec.calls.clear()
    assert s.evict_unused() == 4
    assert rec.calls[0][0] == "removed" and len(rec.calls[0][1]) == 4 and rec.calls[1:] == [("cleared",)]
    s.check()


def test_a_flush_that_leaves_pages_a_context_holds_is_not_a_clear():
    s, rec = KVState(16, 4), Recorder()
    s.listener = rec
    ctx, _ = s.create(list(range(8)))
    s.apply(s.plan_append(ctx, 8))
    s.commit(ctx, list(range(8)))
    s.cache(ctx)  # still held by the context
    assert s.evict_unused() == 0
    assert [c[0] for c in rec.calls] == ["stored"]


# -- the wire format, decoded as vLLM's subscribers decode it

def vllm_structs(array_like: bool):
    """vLLM's event classes as declared in vllm/distributed/kv_events.py (fields and options; the batch
    positional either way)."""
    opts = {"array_like": True} if array_like else {}

    class Batch(msgspec.Struct, array_like=True, omit_defaults=True):
        ts: float
        events: list
        data_parallel_rank: int | None = None

    class Event(msgspec.Struct, omit_defaults=True, tag=True, **opts):
        pass

    class BlockStored(Event):
        block_hashes: list[int]
        parent_block_hash: int | None
        token_ids: list[int]
        block_size: int
        lora_id: int | None
        medium: str | None
        lora_name: str | None = None

    class BlockRemoved(Event):
        block_hashes: list[int]
        medium: str | None

    class AllBlocksCleared(Event):
        pass

    class KVEventBatch(Batch):
        events: list[BlockStored | BlockRemoved | AllBlocksCleared]

    return KVEventBatch, BlockStored, BlockRemoved, AllBlocksCleared


@pytest.mark.parametrize("fmt", ["array", "map"])
def test_batches_decode_with_vllms_own_struct_declarations(fmt):
    import msgpack

    from llamay.server.kv_events import encode, event, stored
    batch_t, stored_t, removed_t, cleared_t = vllm_structs(fmt == "array")
    big = 2 ** 64 - 1  # hashes are unsigned 64-bit
    events = [stored([big, 7], None, [1, 2, 3, 4], 2), stored([9], 7, [5, 6], 2),
              event("BlockRemoved", block_hashes=[big], medium=None), event("AllBlocksCleared")]
    got = msgspec.msgpack.decode(encode(12.5, events, fmt, msgpack.packb), type=batch_t)
    assert (got.ts, got.data_parallel_rank) == (12.5, 0)
    assert got.events == [stored_t([big, 7], None, [1, 2, 3, 4], 2, None, None), stored_t([9], 7, [5, 6], 2, None, None),
                          removed_t([big], None), cleared_t()]
    raw = msgpack.unpackb(encode(1.0, events[:1], fmt, msgpack.packb))
    first = raw[1][0]
    assert (first[0] if fmt == "array" else first["type"]) == "BlockStored"


# -- a real server and a real subscriber

PS = 32  # the default page size: vLLM's block_size in the events


class Subscriber:
    def __init__(self, topic: bytes):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.port = free_port()
        self.sock.bind(f"tcp://127.0.0.1:{self.port}")  # the server connects, as to llm-d's indexer
        self.sock.setsockopt(zmq.SUBSCRIBE, topic)
        self.decode = msgspec.msgpack.Decoder(vllm_structs(True)[0])
        self.seqs: list[int] = []

    def until(self, done, timeout: float = 60.0) -> list:
        """Events received until done(events so far) or the timeout (bounded poll) -> the events."""
        out, deadline = [], time.monotonic() + timeout
        while not done(out) and time.monotonic() < deadline:
            if self.sock.poll(200):
                topic, seq, payload = self.sock.recv_multipart()
                self.seqs.append(int.from_bytes(seq, "big"))
                out += self.decode.decode(payload).events
        return out

    def close(self):
        self.sock.close(0)
        self.ctx.term()


def kind(events, name):
    return [e for e in events if type(e).__name__ == name]


@pytest.fixture(scope="module")
def served(tiny_pair):
    sub = Subscriber(b"kv@pod@tiny")
    server = LiveServer(["-m", str(tiny_pair[0]), "-a", "tiny", "--threads", "1", "-c", "512", "--cache-disk", "0",
                         "--kv-events", f"tcp://127.0.0.1:{sub.port}", "--kv-events-topic", "kv@pod@{model}"])
    yield server, sub
    server.stop()
    sub.close()


def complete(server, ids: list[int]) -> dict:
    r = httpx.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": ids, "max_tokens": 3,
                                                         "temperature": 0}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def cache_pages(server) -> tuple[int, int]:
    """(pages the prefix cache holds, of them full), from the Studio's views."""
    held = httpx.get(server.url + "/studio/api/contexts", timeout=30).json()["kv"]["tiny"]["pages_cache"]
    seqs = httpx.get(server.url + "/studio/api/cache", timeout=30).json()["models"]["tiny"]
    return held, held - sum(1 for s in seqs if s["tokens"] % PS)  # a sequence's partial page is its leaf


def test_a_zmq_subscriber_sees_the_pages_the_prefix_cache_holds(served):
    from llamay.engine.cache_tiers import chain_root
    server, sub = served
    complete(server, [1])  # loads the model; no full page
    for _ in range(30):  # until the PUB socket's connection carries events: each flush of an emptied tree clears
        httpx.post(server.url + "/flush_cache", timeout=30)
        if kind(sub.until(lambda ev: ev, timeout=1.0), "AllBlocksCleared"):
            break
    else:
        pytest.fail("no AllBlocksCleared from 30 flushes")

    a = list(range(5, 105))  # 100 tokens + 2 generated computed: 3 full pages
    assert complete(server, a)["usage"]["prompt_tokens"] == 100
    (first,) = kind(sub.until(lambda ev: kind(ev, "BlockStored")), "BlockStored")
    assert (first.token_ids, first.parent_block_hash, first.block_size) == (a[:3 * PS], None, PS)
    llm = server.registry.loaded["tiny"].llm
    keys = chain_keys(chain_root(llm)(()), a, PS, 3)  # the tiers' content keys of those pages
    assert first.block_hashes == [int.from_bytes(k[-8:], "big") for k in keys]

    b = a[:2 * PS] + list(range(200, 240))  # shares 2 pages with a, then 1 full page of its own
    complete(server, b)
    (second,) = kind(sub.until(lambda ev: kind(ev, "BlockStored")), "BlockStored")
    assert (second.token_ids, second.parent_block_hash) == (b[2 * PS:3 * PS], first.block_hashes[1])
    assert second.block_hashes[0] not in first.block_hashes

    live = set(first.block_hashes) | set(second.block_hashes)
    held, full = cache_pages(server)
    assert full == len(live) == 4 and held == 6  # a's and b's partial last pages besides

    assert httpx.post(server.url + "/flush_cache", timeout=30).status_code == 200
    events = sub.until(lambda ev: kind(ev, "AllBlocksCleared"))
    removed = {h for e in kind(events, "BlockRemoved") for h in e.block_hashes}
    assert removed == live and type(events[-1]).__name__ == "AllBlocksCleared"
    assert cache_pages(server) == (0, 0)
    assert sub.seqs == sorted(sub.seqs) and len(set(sub.seqs)) == len(sub.seqs)  # one number per message, rising


def test_kv_events_without_pyzmq_is_one_clear_error(monkeypatch):
    import builtins

    from llamay.cli.common import CLIError
    from llamay.cli.main import build_parser
    from llamay.cli.serve import kv_events
    real = builtins.__import__

    def no_zmq(name, *a, **k):
        if name == "zmq":
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_zmq)
    args = build_parser().parse_args(["serve", "--kv-events", "tcp://*:5557"])
    with pytest.raises(CLIError, match=r"pip install 'llamay\[kv-events\]'"):
        kv_events(args)
    assert kv_events(build_parser().parse_args(["serve"])) is None
