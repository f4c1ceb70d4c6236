"""Threads claim each graph node's chunks, so a descheduled thread holds back one chunk, not the node; the
logits stay bit-identical (==) for any thread count and any schedule, a busy machine included."""
import subprocess
import sys

import numpy as np
import pytest

import llamay

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def reference(smollm_path):
    m = llamay.load(smollm_path, threads=1, n_ctx=256)
    ids = m.tokenize("The lighthouse keeper climbed the stairs and looked out over the dark water")
    return ids, m.logits(ids), m.logits(ids[:1])


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_logits_equal_one_threads_under_contention(smollm_path, reference, threads):
    ids, prefill, decode = reference
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        m = llamay.load(smollm_path, threads=threads, n_ctx=256)
        for _ in range(3):  # several schedules: who runs which chunk differs from run to run
            assert np.array_equal(m.logits(ids), prefill)
            m.reset()
            assert np.array_equal(m.logits(ids[:1]), decode)
            m.reset()
    finally:
        for p in busy:
            p.kill()
            p.wait()
