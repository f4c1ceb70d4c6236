"""The prefix cache's shared tier on a real redis-server (or valkey-server) on 127.0.0.1: a second process's
model reads the pages the first computed, with the same logits (==); other weights never do; a corrupted
value is computed again; a server that goes away costs misses, never a failed request."""
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import llamay

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from fuzz_gguf import Geometry, tiny_decoder  # noqa: E402

SERVER = shutil.which("redis-server") or shutil.which("valkey-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def redis_url():
    if SERVER is None:
        pytest.skip("no redis-server or valkey-server (Debian: apt-get install redis-server; .ci/run installs it)")
    port = free_port()
    proc = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0", client, proc
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shared")
    out = []
    for seed in (1, 2):
        path = folder / f"tiny{seed}.gguf"
        path.write_bytes(tiny_decoder(Geometry(n_ctx=512), seed=seed).to_bytes())
        out.append(path)
    return out


def load(path, url):
    return llamay.load(path, threads=2, n_ctx=512, cache_redis=url)


def prompt(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(10, 250, n).tolist()


def test_a_second_server_reads_what_the_first_computed(tiny, redis_url):
    url, client, _ = redis_url
    ids = prompt(200, 1)
    first = load(tiny[0], url)
    want = first.eval_last(ids)
    first.cache.flush()
    assert len(client.keys(b"llamay:kv:*")) == 200 // 32
    second = load(tiny[0], url)  # another process's model: nothing in its memory, no disk tier
    got = second.eval_last(ids)
    assert np.array_equal(got, want)
    assert second.stats.cached_tokens == second.stats.shared_tokens == 192 and second.stats.disk_tokens == 0
    other = load(tiny[1], url)  # other weights: other keys
    other.eval_last(ids)
    assert other.stats.cached_tokens == 0


def test_a_corrupted_value_is_computed_again(tiny, redis_url):
    url, client, _ = redis_url
    ids = prompt(161, 2)
    first = load(tiny[0], url)
    want = first.eval_last(ids)
    first.cache.flush()
    keys = first.cache.keys_of((), ids, 5)
    bad = bytearray(client.get(b"llamay:kv:" + keys[2]))
    bad[-1] ^= 1
    client.set(b"llamay:kv:" + keys[2], bytes(bad))
    second = load(tiny[0], url)
    assert np.array_equal(second.eval_last(ids), want)
    assert second.stats.shared_tokens == 2 * 32 and second.cache.tiers["shared"].dropped == 1


def test_a_server_gone_away_costs_misses_only(tiny):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    llm = load(tiny[0], url)
    ids = prompt(100, 3)
    want = llamay.load(tiny[0], threads=2, n_ctx=512).eval_last(ids)
    assert np.array_equal(llm.eval_last(ids), want) and llm.stats.cached_tokens == 0
    llm.cache.flush()
    assert llm.cache.tiers["shared"].errors >= 1
    assert list(llm.generate(ids, max_tokens=4, temperature=0))
