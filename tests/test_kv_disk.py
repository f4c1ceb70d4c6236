"""The disk tier's storage (kv/disk.py): pages written as segments come back byte for byte under their
content keys; a torn or corrupted segment is detected (at open, or by the page checksum on reading) and
dropped, never read as K/V; kill -9 in the middle of writing leaves a tier that opens; LRU under the budget."""
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from llamay.kv.disk import SUFFIX, DiskTier, chain_keys, root_key

PAGE = 3 * 1000  # three buffers of 1000 bytes per page


def pages(n: int, seed: int) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [[rng.integers(0, 256, 1000, dtype=np.uint8) for _ in range(3)] for _ in range(n)]


def empty(n: int) -> list[list[np.ndarray]]:
    return [[np.zeros(1000, np.uint8) for _ in range(3)] for _ in range(n)]


def views(page_list):
    return [[memoryview(b) for b in p] for p in page_list]


def keys(n: int, root: str = "model", start: int = 0) -> list[bytes]:
    return chain_keys(root_key(root), list(range(start, start + 4 * n)), 4, n)


def test_keys_name_the_whole_prefix_and_the_root():
    a = chain_keys(root_key("w1"), [1, 2, 3, 4, 5, 6, 7, 8], 4, 2)
    assert chain_keys(root_key("w1"), [1, 2, 3, 4, 5, 6, 7, 8, 9], 4, 2) == a  # only full pages
    assert chain_keys(root_key("w1"), [0, 2, 3, 4, 5, 6, 7, 8], 4, 2)[1] != a[1]  # the first page changes the second's
    assert chain_keys(root_key("w2"), [1, 2, 3, 4, 5, 6, 7, 8], 4, 2)[0] != a[0]  # other weights: other keys
    assert len(set(a)) == 2 and all(len(k) == 16 for k in a)


def test_pages_come_back_byte_for_byte_in_runs(tmp_path):
    tier = DiskTier(tmp_path, 1 << 20, PAGE)
    k, data = keys(6), pages(6, 1)
    tier.write(k[:4], views(data[:4]))
    tier.write(k[4:], views(data[4:]))
    assert tier.find(k) == 6 and tier.find(keys(2, "other")) == 0 and tier.n_pages == 6
    out = empty(6)
    assert tier.read(k, views(out)) == 6
    assert all(np.array_equal(x, y) for p, q in zip(out, data) for x, y in zip(p, q))
    again = DiskTier(tmp_path, 1 << 20, PAGE)  # another process: the same pages found
    out = empty(6)
    assert again.find(k) == 6 and again.read(k, views(out)) == 6
    assert np.array_equal(out[5][2], data[5][2])


def test_a_page_corrupted_on_disk_is_never_read_as_kv(tmp_path):
    tier = DiskTier(tmp_path, 1 << 20, PAGE)
    k, data = keys(4), pages(4, 2)
    tier.write(k, views(data))
    seg = next(tmp_path.glob("*" + SUFFIX))
    raw = bytearray(seg.read_bytes())
    raw[-10] ^= 0xFF  # a byte of the last page's payload
    seg.write_bytes(bytes(raw))
    out = empty(4)
    assert tier.read(k, views(out)) == 3  # the first three verified; the fourth refused
    assert tier.find(k) == 0 and tier.dropped == 1 and not seg.exists()  # the segment went with it


@pytest.mark.parametrize("damage", ["truncate", "header", "magic", "empty"])
def test_a_torn_segment_is_dropped_when_the_tier_opens(tmp_path, damage):
    tier = DiskTier(tmp_path, 1 << 20, PAGE)
    tier.write(keys(3), views(pages(3, 3)))
    tier.write(keys(2, start=100), views(pages(2, 4)))
    seg = sorted(tmp_path.glob("*" + SUFFIX), key=lambda p: p.stat().st_size)[-1]  # the three-page one
    raw = seg.read_bytes()
    seg.write_bytes({"truncate": raw[:-1], "header": raw[:20] + bytes([raw[20] ^ 1]) + raw[21:],
                     "magic": b"X" + raw[1:], "empty": b""}[damage])
    (tmp_path / ".leftover.seg.123.tmp").write_bytes(b"half")
    os.utime(tmp_path / ".leftover.seg.123.tmp", (time.time() - 3600,) * 2)
    again = DiskTier(tmp_path, 1 << 20, PAGE)
    assert again.dropped == 1 and again.find(keys(3)) == 0 and again.find(keys(2, start=100)) == 2
    assert not seg.exists() and not (tmp_path / ".leftover.seg.123.tmp").exists()


def test_lru_keeps_the_tier_within_its_budget(tmp_path):
    seg_bytes = 4 * PAGE + 1000  # four pages and their header, about
    tier = DiskTier(tmp_path, 3 * seg_bytes, PAGE)
    groups = [keys(4, start=100 * i) for i in range(5)]
    for i, k in enumerate(groups):
        tier.write(k, views(pages(4, i)))
        time.sleep(0.01)
        if i == 2:
            assert tier.read(groups[0], views(empty(4))) == 4  # used again: newer than groups 1 and 2
            time.sleep(0.01)
    assert tier.bytes <= 3 * seg_bytes
    held = [tier.find(k) == 4 for k in groups]
    assert held == [True, False, False, True, True]


WRITER = """
import sys, numpy as np
from llamay.kv.disk import DiskTier, chain_keys, root_key
tier = DiskTier(sys.argv[1], 1 << 30, 3000)
rng = np.random.default_rng(0)
i = 0
while True:
    ks = chain_keys(root_key("kill"), list(range(i * 40, i * 40 + 40)), 4, 10)
    tier.write(ks, [[memoryview(np.full(1000, (i + j) % 256, np.uint8)) for _ in range(3)] for j in range(10)])
    print(i, flush=True)
    i += 1
"""


def test_kill_9_while_writing_leaves_a_tier_that_opens_and_reads_true(tmp_path):
    rng = random.Random(0)
    for attempt in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        proc.stdout.readline()  # writing has begun
        time.sleep(rng.uniform(0.0, 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        tier = DiskTier(tmp_path, 1 << 30, PAGE)  # opens, whatever the kill left
        for i in range(200):
            ks = chain_keys(root_key("kill"), list(range(i * 40, i * 40 + 40)), 4, 10)
            n = tier.find(ks)
            if not n:
                continue
            out = empty(n)
            assert tier.read(ks[:n], views(out)) == n, (attempt, i)
            assert all(int(b[0]) == (i + j) % 256 for j, p in enumerate(out) for b in p)
    assert tier.n_pages > 0


def test_pool_prefault_keeps_bytes_and_page_buffers_order():
    """PagePool.prefault backs the first pages without changing a byte (pages already written keep theirs,
    on a kernel without MADV_POPULATE_WRITE it says so and does nothing); page_buffers is K then V of each
    layer in turn, views of the pool's own memory."""
    import platform

    from llamay.kv.pool import KV_TYPES, PagePool
    pool = PagePool(3, 8, 4, 2, 32, KV_TYPES["f16"])
    rng = np.random.default_rng(5)
    for a in pool.k + pool.v:
        a[: 4 * 4] = rng.integers(0, 256, a[: 4 * 4].shape, np.uint8)
    before = [a.copy() for a in pool.k + pool.v]
    ok = pool.prefault(6)
    assert ok or platform.system() != "Linux" or tuple(map(int, platform.release().split(".")[:2])) < (5, 14)
    assert all(np.array_equal(a, b) for a, b in zip(pool.k + pool.v, before))
    bufs = pool.page_buffers(2)
    order = [a for kv in zip(pool.k, pool.v) for a in kv]
    assert [bytes(b) for b in bufs] == [a[8:12].tobytes() for a in order]
    bufs[3][:] = b"\x07" * len(bufs[3])
    assert (pool.v[1][8:12] == 7).all()


def test_prefault_waits_before_each_step(monkeypatch):
    """Each POPULATE_STEP bytes are faulted after wait(their bytes) returns (the caller's pace): a pool
    larger than a step takes a wait a step, and its bytes are faulted in all the same."""
    from llamay.kv import pool as pool_mod
    from llamay.kv.pool import KV_TYPES, PagePool
    monkeypatch.setattr(pool_mod, "POPULATE_STEP", 4096)
    pool = PagePool(1, 8, 16, 2, 64, KV_TYPES["f32"])  # 8 pages of 16 slots x 512 bytes: 64 KB a layer
    waits, calls = [], []
    real = pool_mod.madvise_populate
    monkeypatch.setattr(pool_mod, "madvise_populate", lambda a, w=None: calls.append(a.nbytes) or real(a, w))
    if not pool.prefault(8, waits.append):
        pytest.skip("this kernel has no MADV_POPULATE_WRITE")
    spans = [-(-(a.ctypes.data + a.nbytes) // 4096) * 4096 - a.ctypes.data // 4096 * 4096 for a in pool.k + pool.v]
    assert calls == [64 * 1024] * 2 and len(waits) == sum(s // 4096 for s in spans) and sum(waits) == sum(spans)


class _Clock:
    """time.monotonic and time.sleep of engine/idle.py: sleeping moves the clock (no timing in the test)."""
    def __init__(self, monkeypatch):
        from llamay.engine import idle
        self.now, self.sleeps = 100.0, []
        monkeypatch.setattr(idle.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(idle.time, "sleep", self.sleep)

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += max(s, 1e-6)  # a real sleep takes some time however short it is asked to be


def test_background_work_waits_for_a_moment_without_requests(monkeypatch):
    """when_idle: no wait once the model has been idle for IDLE_GRACE; while a request runs and for
    IDLE_GRACE after its last step, sleeps of at most IDLE_POLL; done() ends the wait however busy."""
    from llamay.engine.idle import IDLE_GRACE, IDLE_POLL, when_idle
    clock = _Clock(monkeypatch)
    ends = [clock.now - 10]  # the last step's end
    ends_at = 100.35  # the running request's last step ends then

    def idle_for():
        if ends[0] is None:  # a request runs
            if clock.now >= ends_at:
                ends[0] = clock.now
            return 0.0
        return clock.now - ends[0]
    wait = when_idle(idle_for)
    for _ in range(3):
        wait()
    assert clock.sleeps == []
    ends[0] = None
    wait()
    assert clock.now >= ends_at + IDLE_GRACE and all(0 < s <= IDLE_POLL for s in clock.sleeps)
    assert clock.now < ends_at + IDLE_GRACE + IDLE_POLL + 1e-5  # it went on as soon as the grace was over
    ends[0], ends_at, start = None, float("inf"), clock.now  # a request that never ends
    wait(lambda: clock.now >= start + 0.5)
    assert start + 0.5 <= clock.now < start + 0.5 + IDLE_POLL + 1e-5


def _tiers(tmp_path, monkeypatch, write_wait: float, idle):
    """A disk tier behind CacheTiers whose writes wait on idle, CACHE.write_wait = write_wait; a pool of
    4 pages to save."""
    import dataclasses
    from llamay.engine import cache_tiers
    from llamay.kv.disk import DiskTier
    from llamay.kv.pool import KV_TYPES, PagePool
    monkeypatch.setattr(cache_tiers, "CACHE", dataclasses.replace(cache_tiers.CACHE, write_wait=write_wait))
    pool = PagePool(1, 4, 16, 2, 64, KV_TYPES["f32"])
    pool.k[0][:] = 3
    tier = DiskTier(tmp_path, 1 << 20, sum(len(b) for b in pool.page_buffers(0)))
    return cache_tiers.CacheTiers({"disk": tier}, lambda lora: b"root", 16, tier.page_bytes, idle=idle), pool


def test_a_tier_writes_nothing_until_the_model_is_idle(tmp_path, monkeypatch):
    """A queued write waits for idle(done); nothing is written before it returns, then all of it."""
    import threading
    asked, called, go = [], threading.Event(), threading.Event()
    tiers, pool = _tiers(tmp_path, monkeypatch, 1e6,
                         lambda done: asked.append(done) or called.set() or go.wait(30))
    tiers.save("me", pool, (), list(range(48)), [0, 1, 2])
    assert called.wait(30) and len(asked) == 1
    assert not asked[0]() and tiers.pages_written["disk"] == 0  # not due, no flush waiting
    go.set()
    assert tiers.flush(timeout=30) and tiers.pages_written["disk"] == 3 and tiers.written("me") == [[0, 1, 2]]
    tiers.close()


def test_a_flush_or_the_write_wait_ends_a_tier_writes_wait_for_idle(tmp_path, monkeypatch):
    """Beside a model that is never idle: a flush gets its pages written (it waited for ever before the
    writer looked at flushes: a reset beside running requests held the scheduler); with CACHE.write_wait 0
    the pages are written with no flush at all."""
    import time
    from llamay.engine.idle import when_idle
    never_idle = when_idle(lambda: 0.0)
    tiers, pool = _tiers(tmp_path, monkeypatch, 1e6, never_idle)
    tiers.save("me", pool, (), list(range(48)), [0, 1, 2])
    assert tiers.flush(timeout=60) and tiers.pages_written["disk"] == 3
    tiers.close()
    tiers, pool = _tiers(tmp_path / "b", monkeypatch, 0.0, never_idle)
    tiers.save("me", pool, (), list(range(48)), [0, 1, 2])
    deadline = time.monotonic() + 60
    while tiers.pages_written["disk"] < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tiers.pages_written["disk"] == 3
    tiers.close()


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's nice value is its own on Linux only")
def test_background_work_runs_at_the_lowest_priority_and_leaves_the_caller_alone():
    """The tiers' writer and the prefault lower their own thread's priority (nice 19), not the process's."""
    import threading

    from llamay.engine.idle import background_priority
    mine, seen = os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), {}

    def worker():
        background_priority()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen["nice"] == 19
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine
