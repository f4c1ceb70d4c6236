"""The recurrent ops against their numpy references, and the equalities that make them canonical: a
sequence's outputs are the same bits token by token as in one pass, alone as batched with others, at
any thread count."""
import numpy as np
import pytest

from llamay.kernels.builder import Builder
from llamay.kernels.ops import BatchMeta
from llamay.kernels.reference_recurrent import conv as conv_ref

RNG = np.random.default_rng(0)


def meta(lengths, slots, start=None) -> BatchMeta:
    """A batch of sequences of these lengths (contiguous), each on its state slot."""
    start = start or [0] * len(lengths)
    pos = np.concatenate([np.arange(s, s + n, dtype=np.int32) for s, n in zip(start, lengths)])
    seq = np.concatenate([np.full(n, i, np.int32) for i, n in enumerate(lengths)])
    return BatchMeta(pos, seq, np.zeros((len(lengths), 1), np.int32), 16, np.asarray(slots, np.int32))


def run_conv(x, w, state, m: BatchMeta, bias=None, nthreads=1):
    b = Builder()
    batch = b.batch(len(x))
    xin = b.tensor(*x.shape)
    out = b.conv(xin, w, state, batch, bias)
    xin[:] = x
    batch.fill(m)
    b.run(nthreads)
    return out.copy()


@pytest.mark.parametrize("K", [2, 3, 4])
def test_conv_matches_reference(K):
    C, n = 40, 9
    x, w = RNG.standard_normal((n, C), np.float32), RNG.standard_normal((C, K), np.float32)
    bias = RNG.standard_normal(C).astype(np.float32)
    init = RNG.standard_normal((K - 1, C)).astype(np.float32)
    pool = np.zeros((3, K - 1, C), np.float32)
    pool[2] = init
    got = run_conv(x, w, pool, meta([n], [2]), bias)
    ref_state = init.copy()
    assert np.array_equal(got, conv_ref(x, w, ref_state, bias))
    assert np.array_equal(pool[2], ref_state) and not pool[:2].any()


def test_conv_is_canonical():
    C, K = 4000, 4  # wide enough to split into chunks
    w = RNG.standard_normal((C, K), np.float32)
    xa, xb = RNG.standard_normal((7, C), np.float32), RNG.standard_normal((5, C), np.float32)
    whole = np.zeros((2, K - 1, C), np.float32)
    ya = run_conv(xa, w, whole, meta([7], [0]))
    steps = np.zeros((2, K - 1, C), np.float32)
    one = np.concatenate([run_conv(xa[t:t + 1], w, steps, meta([1], [1], [t])) for t in range(7)])
    assert np.array_equal(ya, one) and np.array_equal(whole[0], steps[1])
    for nthreads in (1, 2, 3):
        pool = np.zeros((2, K - 1, C), np.float32)
        both = run_conv(np.concatenate([xb, xa]), w, pool, meta([5, 7], [1, 0]), nthreads=nthreads)
        assert np.array_equal(both[5:], ya) and np.array_equal(pool[0], whole[0])


def test_conv_every_kernel_path_gives_the_same_bits():
    """The AVX2 and AVX-512 rows (8 and 16 channels at once) run the portable row's operations per
    channel, the channels past the last whole vector included: outputs and states equal with ==."""
    from llamay.kernels import _lib
    C, K = 1003, 4
    x, w = RNG.standard_normal((6, C), np.float32), RNG.standard_normal((C, K), np.float32)
    bias = RNG.standard_normal(C).astype(np.float32)

    def once():
        pool = np.zeros((1, K - 1, C), np.float32)
        pool[0] = 0.5
        return np.concatenate([run_conv(x, w, pool, meta([6], [0]), bias, nthreads=2).ravel(), pool.ravel()])
    results = _lib.each_path(once)
    first = next(iter(results.values()))
    assert len(results) == len(_lib.available()) and all(np.array_equal(r, first) for r in results.values())
