"""Scratch laid out by lifetime (kernels/arena.py): buffers in use at once never share a byte, a buffer's
first node waits for the last user of the bytes it takes, and graphs built over an arena give the bits of
graphs whose buffers are each their own."""
import numpy as np

from llamay.kernels import _lib
from llamay.kernels.arena import Arena, layout
from llamay.kernels.builder import Builder
from llamay.kernels.matmul import QWeight

rng = np.random.default_rng(5)


def test_buffers_in_use_at_once_never_share_a_byte_and_reuse_adds_no_wait():
    for trial in range(200):
        n = int(rng.integers(1, 40))
        first = rng.integers(0, 60, n).tolist()
        last = [f + int(rng.integers(0, 15)) for f in first]
        ready = [int(rng.integers(-1, f)) if f else -1 for f in first]  # what each first node waits for
        sizes = rng.integers(1, 5000, n).tolist()
        offsets, total = layout(sizes, first, last, ready)
        for i in range(n):
            assert offsets[i] % 64 == 0 and offsets[i] + sizes[i] <= total
            for j in range(n):
                shared = offsets[i] < offsets[j] + sizes[j] and offsets[j] < offsets[i] + sizes[i]
                if i == j or not shared:
                    continue
                assert last[j] < first[i] or last[i] < first[j], (trial, i, j)  # never both in use
                if last[j] < first[i]:
                    assert last[j] <= ready[i], (trial, i, j)  # done before buffer i's first node may start
        assert total <= sum(-(-s // 64) * 64 for s in sizes)


def test_a_chain_of_buffers_takes_two_buffers_of_bytes():
    offsets, total = layout([1000] * 10, list(range(10)), list(range(1, 11)), [f - 1 for f in range(10)])
    assert total == 2 * 1024 and offsets == [0, 1024] * 5
    _, alone = layout([1000] * 10, list(range(10)), list(range(1, 11)), [-1] * 10)  # nothing may wait: no reuse
    assert alone == 10 * 1024


def q8_weight(m: int, k: int) -> QWeight:
    raw = rng.integers(0, 256, (m, k // 32, 34), dtype=np.uint8)
    raw[..., :2] = rng.uniform(-0.05, 0.05, (m, k // 32, 1)).astype(np.float16).view(np.uint8)
    return QWeight(raw.reshape(-1), "Q8_0", m, k)


WEIGHTS = [q8_weight(96, 64), q8_weight(96, 64), q8_weight(64, 96)]


def layers(x0: np.ndarray, arena: Arena | None, nthreads: int, n_layers: int = 6,
           unwritten: bool = True) -> tuple[np.ndarray, Builder]:
    """n_layers of norm -> two matmuls -> gated -> matmul into the residual, every output a new buffer; and
    (unwritten) a buffer read before anything writes it: zeros at the first run, as without an arena."""
    b, (w1, w2, w3) = Builder(arena=arena), WEIGHTS
    x = b.tensor(*x0.shape, io=True)
    for _ in range(n_layers):
        h = b.rmsnorm(x, np.ones(64, np.float32), 1e-6)
        g = b.gated(b.matmul(h, w1), b.matmul(h, w2), "silu")
        b.matmul(g, w3, residual=x)
    if unwritten:
        b.add(x, b.add(b.tensor(*x0.shape), x))  # x = x + (0 + x)
    b.finish()
    x[:] = x0
    b.run(nthreads)
    return x, b


def test_graphs_over_an_arena_give_the_bits_of_graphs_without_one():
    x0 = rng.standard_normal((7, 64)).astype(np.float32)
    want, alone = layers(x0, None, 1)
    for path in _lib.available():
        with _lib.using(path):
            arena = Arena()
            for t in (1, 2, 3):
                got, b = layers(x0, arena, t)
                assert np.array_equal(got, want), (path, t)
                got, _ = layers(x0[:3], arena, t)  # a smaller graph over the same arena
                assert np.array_equal(got, layers(x0[:3], None, 1)[0]), (path, t)
    laid, total = b.laid_out
    assert total * 4 < laid  # 6 layers' buffers in the bytes of about one


def test_a_larger_graph_takes_a_new_arena_and_the_smaller_keeps_running_in_its_own():
    arena = Arena()
    x0 = rng.standard_normal((12, 64)).astype(np.float32)
    want = layers(x0[:2], None, 2, unwritten=False)[0]
    x, small = layers(x0[:2], arena, 2, unwritten=False)
    before = arena.buffer(0)
    layers(x0, arena, 2, unwritten=False)
    assert arena.buffer(0).size > before.size
    x[:] = x0[:2]
    small.run(2)
    assert np.array_equal(x, want)
