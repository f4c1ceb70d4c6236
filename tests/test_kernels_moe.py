"""Mixture-of-experts ops (kernels/builder.py moe_route, gather, matmul_experts, moe_combine): each token's
result equals, with ==, the same token run alone, on every kernel path and thread count; and it is the
float64 mixture within float32 rounding."""
import numpy as np
import pytest

from llamay.kernels import _lib
from llamay.kernels.builder import Builder
from llamay.kernels.matmul import QExperts

rng = np.random.default_rng(5)
E, K, D, FF = 8, 3, 64, 96


def experts(m: int, k: int, qtype: str) -> QExperts:
    if qtype == "MXFP4":  # e8m0 scale byte, 16 bytes of e2m1 nibbles
        raw = rng.integers(0, 256, (E * m, k // 32, 17), dtype=np.uint8)
        raw[..., 0] = rng.integers(118, 126, (E * m, k // 32))
        return QExperts(raw.reshape(-1), "MXFP4", E, m, k)
    if qtype == "F32":
        return QExperts(rng.standard_normal((E, m, k)).astype(np.float32).view(np.uint8).reshape(-1), "F32", E, m, k)
    raw = rng.integers(0, 256, (E * m, k // 32, 34), dtype=np.uint8)  # Q8_0 blocks: f16 scale, 32 int8
    raw[..., :2] = rng.uniform(-0.05, 0.05, (E * m, k // 32, 1)).astype(np.float16).view(np.uint8)
    return QExperts(raw.reshape(-1), "Q8_0", E, m, k)


WEIGHTS = {q: (experts(FF, D, q), experts(FF, D, q), experts(D, FF, q)) for q in ("F32", "Q8_0", "MXFP4")}


def moe(x0: np.ndarray, logits0: np.ndarray, qtype: str, gating: str, nthreads: int = 2):
    up_w, gate_w, down_w = WEIGHTS[qtype]
    b = Builder()
    x, logits = b.tensor(*x0.shape), b.tensor(*logits0.shape)
    route = b.moe_route(logits, K, gating, norm=gating == "softmax")
    xg = b.gather(x, route)
    up = b.matmul_experts(xg, up_w, route)
    h = b.gated(b.matmul_experts(xg, gate_w, route), up, "silu")
    out = b.moe_combine(b.matmul_experts(h, down_w, route), route)
    x[:], logits[:] = x0, logits0
    b.run(nthreads)
    return out.copy(), route


def dense(w: QExperts, e: int) -> np.ndarray:
    return w.raw.view(np.float32).reshape(E, w.m, w.k)[e].astype(np.float64)


@pytest.mark.parametrize("qtype", ["F32", "Q8_0", "MXFP4"])
@pytest.mark.parametrize("gating", ["softmax", "softmax_chosen"])
def test_a_token_gets_the_bits_it_gets_alone(qtype, gating):
    x0 = rng.standard_normal((13, D)).astype(np.float32)
    logits0 = rng.standard_normal((13, E)).astype(np.float32)
    results = _lib.each_path(lambda: moe(x0, logits0, qtype, gating)[0])
    batched = results["portable"]
    assert all(np.array_equal(r, batched) for r in results.values())
    assert np.array_equal(moe(x0, logits0, qtype, gating, nthreads=1)[0], batched)
    for t in (0, 6, 12):
        assert np.array_equal(moe(x0[t:t + 1], logits0[t:t + 1], qtype, gating)[0][0], batched[t])
    reordered = moe(x0[::-1].copy(), logits0[::-1].copy(), qtype, gating)[0]
    assert np.array_equal(reordered[::-1], batched)


@pytest.mark.parametrize("gating", ["softmax", "softmax_chosen"])
def test_the_mixture_is_the_float64_one(gating):
    x0 = rng.standard_normal((9, D)).astype(np.float32)
    logits0 = rng.standard_normal((9, E)).astype(np.float32)
    got, route = moe(x0, logits0, "F32", gating)
    up_w, gate_w, down_w = WEIGHTS["F32"]
    for t in range(9):
        chosen = np.argsort(-logits0[t].astype(np.float64), kind="stable")[:K]
        p = np.exp(logits0[t].astype(np.float64) - logits0[t].max())
        w = p[chosen] / (p.sum() if gating == "softmax" else p[chosen].sum())
        w = w / w.sum() if gating == "softmax" else w  # norm=True for softmax in moe()
        want = np.zeros(D)
        for e, we in zip(chosen, w):
            g, u = dense(gate_w, e) @ x0[t], dense(up_w, e) @ x0[t]
            want += we * (dense(down_w, e) @ (g / (1 + np.exp(-g)) * u))
        np.testing.assert_allclose(got[t], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        np.testing.assert_allclose(route.weights[t], w, rtol=1e-5)


def test_ties_go_to_the_lower_expert_and_groups_are_in_token_order():
    logits0 = np.zeros((4, E), np.float32)
    logits0[:, 5] = 1.0  # expert 5 first; then the tie among the rest: experts 0 and 1
    _, route = moe(rng.standard_normal((4, D)).astype(np.float32), logits0, "F32", "softmax")
    order = route.order.reshape(-1)
    assert list(route.offs) == [0, 4, 8, 8, 8, 8, 12, 12, 12]
    assert [s // K for s in order[:4]] == [0, 1, 2, 3]  # expert 0's rows: tokens ascending
    assert all(order[route.pos[s]] == s for s in range(4 * K))


def test_bad_route_operands_fail_when_built():
    b = Builder()
    with pytest.raises(ValueError, match="experts used"):
        b.moe_route(b.tensor(2, E), E + 1)
    route = b.moe_route(b.tensor(2, E), K)
    with pytest.raises(ValueError, match="route"):
        b.gather(b.tensor(3, D), route)
    with pytest.raises(ValueError, match="shape"):
        b.matmul_experts(b.tensor(2 * K, D + 32), WEIGHTS["F32"][0], route)


def test_sigmoid_scale_is_the_float_math():
    y0 = rng.standard_normal((5, 40)).astype(np.float32)
    g0 = (rng.standard_normal((5, 1)) * 4).astype(np.float32)
    b = Builder()
    y, g = b.tensor(5, 40), b.tensor(5, 1)
    b.sigmoid_scale(y, g)
    y[:], g[:] = y0, g0
    b.run(2)
    np.testing.assert_allclose(y, y0 / (1 + np.exp(-g0.astype(np.float64))), rtol=1e-6)


def test_nan_router_logits_still_route_every_row_once():
    """NaN logits (a hostile file's weights) choose the first k experts and never index out of range."""
    logits0 = np.full((3, E), np.nan, np.float32)
    _, route = moe(rng.standard_normal((3, D)).astype(np.float32), logits0, "F32", "softmax")
    assert list(route.offs[:K + 1]) == [0, 3, 6, 9] and route.offs[-1] == 3 * K
    assert sorted(route.order.tolist()) == list(range(3 * K))


@pytest.mark.parametrize("qtype", ["F32", "Q8_0", "MXFP4"])
def test_fused_gate_up_rows_and_expert_scales(qtype):
    """Gate and up as the row halves of one fused experts' matrix (QExperts.rows: Gemma 4's gate_up_exps)
    give the bits of separate matrices on every path; expert_scale multiplies each chosen weight by its
    expert's factor, exactly."""
    up_w, gate_w, down_w = WEIGHTS[qtype]
    per = [w.raw.reshape(E, -1) for w in (gate_w, up_w)]
    fused = QExperts(np.concatenate(per, axis=1).reshape(-1), qtype, E, 2 * FF, D)
    scale = rng.uniform(0.5, 2.0, E).astype(np.float32)
    x0 = rng.standard_normal((7, D)).astype(np.float32)
    logits0 = rng.standard_normal((7, E)).astype(np.float32)

    def run(gate, up, expert_scale=None):
        b = Builder()
        x, logits = b.tensor(*x0.shape), b.tensor(*logits0.shape)
        route = b.moe_route(logits, K, "softmax", norm=True, expert_scale=expert_scale)
        xg = b.gather(x, route)
        h = b.gated(b.matmul_experts(xg, gate, route), b.matmul_experts(xg, up, route), "gelu_tanh")
        out = b.moe_combine(b.matmul_experts(h, down_w, route), route)
        x[:], logits[:] = x0, logits0
        b.run(2)
        return out.copy(), route.weights.copy()

    want = run(gate_w, up_w)
    got = _lib.each_path(lambda: run(fused.rows(0, FF), fused.rows(FF, 2 * FF))[0])
    assert all(np.array_equal(r, want[0]) for r in got.values())
    scaled = run(gate_w, up_w, scale)
    chosen = np.stack([np.argsort(-logits0[t], kind="stable")[:K] for t in range(7)])  # slot order
    assert np.array_equal(scaled[1], want[1] * scale[chosen])


def test_sigmoid_gating_chooses_by_score_plus_bias_and_weighs_by_score():
    """LFM2-MoE's router: the k largest sigmoid(logit) + bias, weighted by sigmoid(logit), renormalized;
    a bias that overturns the order of the scores moves the choice, never the weights' source."""
    n = 11
    logits0 = rng.standard_normal((n, E)).astype(np.float32)
    bias = (rng.standard_normal(E) * 2).astype(np.float32)
    b = Builder()
    logits = b.tensor(n, E)
    route = b.moe_route(logits, K, "sigmoid", norm=True, scale=2.0, select_bias=bias)
    logits[:] = logits0
    b.run(2)
    moved = 0
    for t in range(n):
        score = 1 / (1 + np.exp(-logits0[t].astype(np.float64)))
        chosen = np.argsort(-(score + bias), kind="stable")[:K]
        moved += set(chosen) != set(np.argsort(-score, kind="stable")[:K])
        w = score[chosen] / score[chosen].sum() * 2.0
        np.testing.assert_allclose(np.sort(route.weights[t]), np.sort(w), rtol=1e-6)
    assert moved  # the bias changed some token's experts
    with pytest.raises(ValueError, match="selection biases"):
        Builder().moe_route(b.tensor(n, E), K, "softmax", select_bias=bias)
