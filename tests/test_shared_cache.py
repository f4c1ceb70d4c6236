"""The prefix cache's shared tier on a real redis-server (or valkey-server) on 127.0.0.1: a second process's
model reads the pages the first computed, with the same logits (==); other weights never do; a corrupted
value is computed again; a server that goes away costs misses, never a failed request."""

import numpy as np

import llamay

from conftest import free_port


def load(path, url):
    return llamay.load(path, threads=2, n_ctx=512, cache_redis=url)


def prompt(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(10, 250, n).tolist()


def test_a_second_server_reads_what_the_first_computed(tiny_pair, redis_url):
    url, client, _ = redis_url
    ids = prompt(200, 1)
    first = load(tiny_pair[0], url)
    want = first.eval_last(ids)
    first.cache.flush()
    assert len(client.keys(b"llamay:kv:*")) == 200 // 32
    second = load(tiny_pair[0], url)  # another process's model: nothing in its memory, no disk tier
    got = second.eval_last(ids)
    assert np.array_equal(got, want)
    assert second.stats.cached_tokens == second.stats.shared_tokens == 192 and second.stats.disk_tokens == 0
    other = load(tiny_pair[1], url)  # other weights: other keys
    other.eval_last(ids)
    assert other.stats.cached_tokens == 0


def test_a_corrupted_value_is_computed_again(tiny_pair, redis_url):
    url, client, _ = redis_url
    ids = prompt(161, 2)
    first = load(tiny_pair[0], url)
    want = first.eval_last(ids)
    first.cache.flush()
    keys = first.cache.keys_of((), ids, 5)
    bad = bytearray(client.get(b"llamay:kv:" + keys[2]))
    bad[-1] ^= 1
    client.set(b"llamay:kv:" + keys[2], bytes(bad))
    second = load(tiny_pair[0], url)
    assert np.array_equal(second.eval_last(ids), want)
    assert second.stats.shared_tokens == 2 * 32 and second.cache.tiers["shared"].dropped == 1


def test_a_server_gone_away_costs_misses_only(tiny_pair):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    llm = load(tiny_pair[0], url)
    ids = prompt(100, 3)
    want = llamay.load(tiny_pair[0], threads=2, n_ctx=512).eval_last(ids)
    assert np.array_equal(llm.eval_last(ids), want) and llm.stats.cached_tokens == 0
    llm.cache.flush()
    shared = llm.cache.tiers["shared"]
    assert shared.errors == 1  # then not asked again for BACKOFF_S: the writer's try costs nothing
    "".join(llm.generate(prompt(100, 4), max_tokens=4, temperature=0))
    assert llm.stats.prompt_tokens == 100 and llm.stats.finish_reason in ("length", "stop")  # answered
    assert shared.errors == 1  # backing off: no lookup tried (and waited on) the absent server


def pages(n: int, page_bytes: int, seed: int) -> list[list[memoryview]]:
    """n pages, each two buffers (as a pool's K and V) of random bytes."""
    rng = np.random.default_rng(seed)
    return [[memoryview(rng.integers(0, 256, page_bytes // 2, np.uint8)) for _ in range(2)] for _ in range(n)]


def test_runs_read_straight_into_buffers_and_the_connection_stays_in_step(redis_url):
    """A missing page or a value of the wrong length ends a run; the reply's rest is consumed, so the next
    read on the same pooled connection gets its own values, == the pages written (RESP2 and RESP3)."""
    from llamay.kv.shared import PREFIX, SharedTier
    url, client, _ = redis_url
    for protocol in (2, 3):
        tier = SharedTier(f"{url}?protocol={protocol}", 4096)
        keys = [bytes([protocol, i]) * 8 for i in range(6)]
        want = pages(6, 4096, protocol)
        tier.write(keys, want)
        client.delete(PREFIX + keys[2])
        client.set(PREFIX + keys[4], b"short")
        got = pages(6, 4096, 99)
        assert tier.read(keys, got) == 2
        assert [[bytes(b) for b in p] for p in got[:2]] == [[bytes(b) for b in p] for p in want[:2]]
        assert tier.read(keys[3:4], got[3:4]) == 1 and [bytes(b) for b in got[3]] == [bytes(b) for b in want[3]]
        assert tier.read(keys[4:], got[4:]) == 0 and tier.dropped == 1
        assert tier.read(keys[5:], got[5:]) == 1 and [bytes(b) for b in got[5]] == [bytes(b) for b in want[5]]
        assert tier.errors == 0
