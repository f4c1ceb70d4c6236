/* Mamba's selective scan over each sequence's tokens (graph.h SSM_SCAN). Mamba2 (one A per head): a
 * [H, P, N] state, shares are ranges of its H * P rows (head h, channel p), each row's sum over its states
 * in lanes.h order (ly_ssm_row_portable, which the vector rows follow). Mamba1 (one A per channel and
 * state, P = 1): an [N, H] state (state i of every channel together), shares are ranges of channels, a
 * vector takes several channels at once and each channel's sum runs over its states in order
 * (ly_ssm_cols_portable). Every share walks the batch's tokens in order, so a token's output depends only on
 * its slot's state and its own inputs, however the batch is made. The operation order is the one
 * kernels/reference_recurrent.py ssm_scan follows; no FMA (-ffp-contract=off). */
#include "graph.h"
#include "kernels.h"
#include "lanes.h"
#include "mathfn.h"
#include <math.h>

float ly_ssm_row_from(float l[8], float *s, const float *B, const float *C, float dA, float xdt, int64_t from,
                      int64_t N) {
    for (int64_t i = from; i < N; i++) {
        float v = s[i] * dA + B[i] * xdt;
        l[i & 7] = l[i & 7] + v * C[i];
        s[i] = v;
    }
    return ly_lanes_reduce(l);
}

float ly_ssm_row_portable(float *s, const float *B, const float *C, float dA, float xdt, int64_t N) {
    float l[8] = {0};
    return ly_ssm_row_from(l, s, B, C, dA, xdt, 0, N);
}

void ly_ssm_cols_portable(float *s, const float *A, const float *B, const float *C, const float *x, const float *dt,
                          const float *dt_bias, const float *D, float *y, int64_t lo, int64_t hi, int64_t H, int64_t N) {
    for (int64_t r = lo; r < hi; r++) {
        float sp = ly_softplus_poly(dt[r] + dt_bias[r]), xdt = x[r] * sp, acc = 0.0f;
        for (int64_t i = 0; i < N; i++) {
            float v = s[i * H + r] * ly_exp(sp * A[i * H + r]) + B[i] * xdt;
            acc = acc + v * C[i];
            s[i * H + r] = v;
        }
        y[r] = acc + D[r] * x[r];
    }
}

void ly_ssm_scan_slice(const ly_node *nd, int ith, int nth) {
    const float *xbc = nd->p[0], *dt = nd->p[1], *prm = nd->p[2], *bc = nd->p[6];
    float *y = nd->p[3], *pool = nd->p[4];
    const ly_batch *b = nd->p[5];
    int64_t n = nd->n[0], H = nd->n[1], P = nd->n[2], N = nd->n[3], G = nd->n[4], mamba1 = nd->n[5], lo, hi;
    const float *A = prm, *D = prm + H * (mamba1 ? N : 1), *dt_bias = D + H;
    int64_t row = bc ? H * P : H * P + 2 * G * N, per_group = H / G;
    ly_share(H * P, ith, nth, &lo, &hi);
    for (int64_t t = 0; t < n; t++) {
        float *st = pool + (int64_t)b->state_slots[b->tok_seq[t]] * H * P * N;
        const float *x = xbc + t * row, *dtt = dt + t * H, *bct = bc ? bc + t * 2 * G * N : x + H * P;
        if (mamba1) { /* A is [N, H] (the builder's transpose), P = G = 1 */
            ly_kernels->ssm_cols(st, A, bct, bct + N, x, dtt, dt_bias, D, y + t * H, lo, hi, H, N);
            continue;
        }
        float sp = 0.0f, dA = 0.0f;
        for (int64_t r = lo; r < hi; r++) {
            int64_t h = r / P;
            if (r == lo || r % P == 0) {
                sp = ly_softplus(dtt[h] + dt_bias[h]);
                dA = ly_exp(sp * A[h]);
            }
            const float *B = bct + (h / per_group) * N;
            y[t * H * P + r] = ly_kernels->ssm_row(st + r * N, B, B + G * N, dA, x[r] * sp, N) + D[h] * x[r];
        }
    }
}
