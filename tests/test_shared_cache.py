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
