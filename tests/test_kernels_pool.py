"""The C core's thread pool (csrc/pool.c, no OpenMP): any thread count gives the same bits, concurrent
callers neither share workers nor deadlock, idle workers sleep, a caller's workers leave with it, and a
fork's child starts a pool of its own."""
import os
import sys
import threading
import time

import numpy as np
import pytest

from llamay.kernels.builder import Builder
from llamay.kernels.matmul import QWeight, matmul
from llamay.kernels.quantize import quantize_rows

rng = np.random.default_rng(5)
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
COUNTS = sorted({1, 2, 3, CPUS, CPUS + 3, 16})
LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")


def q8_weight(m: int, k: int) -> QWeight:
    raw = rng.integers(0, 256, (m, k // 32, 34), dtype=np.uint8)
    raw[..., :2] = rng.uniform(-0.05, 0.05, (m, k // 32, 1)).astype(np.float16).view(np.uint8)
    return QWeight(raw.reshape(-1), "Q8_0", m, k)


W = q8_weight(512, 256)  # enough work that matmul keeps every thread asked for
X = rng.standard_normal((16, 256)).astype(np.float32)
ROWS = rng.standard_normal((64, 256)).astype(np.float32)


def graph() -> tuple[Builder, np.ndarray, np.ndarray]:
    b = Builder()
    x, h = b.tensor(8, 256), b.tensor(8, 256)
    b.rmsnorm(x, np.ones(256, np.float32), 1e-6, out=h)
    y = b.matmul(h, W)
    b.scale(y, 0.5)
    x[:] = rng.standard_normal(x.shape).astype(np.float32)
    return b, x, y


def test_every_thread_count_gives_the_same_bits():
    want_y, want_q = matmul(X, W, n_threads=1), quantize_rows(ROWS, "Q4_K", 1)
    b, _, y = graph()
    b.run(1)
    want_g = y.copy()
    for n in COUNTS:
        assert np.array_equal(matmul(X, W, n_threads=n), want_y), n
        assert np.array_equal(quantize_rows(ROWS, "Q4_K", n), want_q), n
        y[:] = 0
        b.run(n)
        assert np.array_equal(y, want_g), n
        y[:] = 0
        times = b.profile(n)  # a barrier after each node
        assert np.array_equal(y, want_g) and all(t >= 0 for _, t in times), n


def test_concurrent_callers_get_the_same_bits_and_finish():
    want_y, want_q = matmul(X, W, n_threads=1), quantize_rows(ROWS, "Q5_K", 1)
    bad, done = [], []

    def work(i):
        b, _, y = graph()
        b.run(1)
        want_g = y.copy()
        for r in range(15):
            n = 2 + (i + r) % 3
            ok = np.array_equal(matmul(X, W, n_threads=n), want_y)
            ok &= np.array_equal(quantize_rows(ROWS, "Q5_K", n), want_q)
            b.run(n)
            ok &= np.array_equal(y, want_g)
            if not ok:
                bad.append((i, r))
        done.append(i)

    ts = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert sorted(done) == [0, 1, 2, 3] and not bad


def cpu_seconds() -> float:
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


@LINUX
def test_idle_workers_sleep():
    matmul(X, W, n_threads=4)
    time.sleep(0.2)  # past the poll before sleeping
    before = cpu_seconds()
    time.sleep(1.0)
    assert cpu_seconds() - before < 0.2  # 3 spinning workers would take ~1 s or more


@LINUX
def test_workers_leave_with_their_calling_thread():
    before = len(os.listdir("/proc/self/task"))
    t = threading.Thread(target=lambda: matmul(X, W, n_threads=5))
    t.start()
    t.join()
    deadline = time.monotonic() + 30
    while len(os.listdir("/proc/self/task")) > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(os.listdir("/proc/self/task")) <= before


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_runs_threaded_kernels():
    want = matmul(X, W, n_threads=3)  # this thread's workers exist before the fork
    pid = os.fork()
    if pid == 0:
        ok = np.array_equal(matmul(X, W, n_threads=3), want)
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while True:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
