/* Mamba's selective scan over each sequence's tokens (Mamba2's: one A per head; Mamba1's: one per channel
 * and state), its [H, P, N] state kept in a slot (graph.h SSM_SCAN). Shares are ranges of the H * P state
 * rows (head h, channel p); each row walks the batch's tokens in order, so a token's output depends only on its slot's state and its own inputs, however the
 * batch is made. The operation order below (and each row's: ly_ssm_row_portable, which the vector rows follow)
 * is the one kernels/reference_recurrent.py ssm_scan follows; no FMA (-ffp-contract=off). */
#include "graph.h"
#include "kernels.h"
#include "lanes.h"
#include "mathfn.h"
#include <math.h>

/* softplus as torch's (threshold 20): v above 20 is returned as is. exp is the project's own (mathfn.h),
 * as in every other op, not the platform's libm. */
static float softplus(float v) { return v > 20.0f ? v : log1pf(ly_exp(v)); }

float ly_ssm_row_portable(float *s, const float *B, const float *C, const float *A, float sp, float dA, float xdt,
                          int64_t N) {
    float l[8] = {0};
    for (int64_t i = 0; i < N; i++) {
        float v = s[i] * (A ? ly_exp(sp * A[i]) : dA) + B[i] * xdt;
        l[i & 7] = l[i & 7] + v * C[i];
        s[i] = v;
    }
    return ly_lanes_reduce(l);
}

void ly_ssm_scan_slice(const ly_node *nd, int ith, int nth) {
    const float *xbc = nd->p[0], *dt = nd->p[1], *prm = nd->p[2], *bc = nd->p[6];
    float *y = nd->p[3], *pool = nd->p[4];
    const ly_batch *b = nd->p[5];
    int64_t n = nd->n[0], H = nd->n[1], P = nd->n[2], N = nd->n[3], G = nd->n[4], A_n = nd->n[5], lo, hi;
    const float *A = prm, *D = prm + H * A_n, *dt_bias = D + H;
    int64_t row = bc ? H * P : H * P + 2 * G * N, per_group = H / G;
    ly_share(H * P, ith, nth, &lo, &hi);
    for (int64_t t = 0; t < n; t++) {
        float *st = pool + (int64_t)b->state_slots[b->tok_seq[t]] * H * P * N;
        const float *x = xbc + t * row, *dtt = dt + t * H, *bct = bc ? bc + t * 2 * G * N : x + H * P;
        float sp = 0.0f, dA = 0.0f;
        for (int64_t r = lo; r < hi; r++) {
            int64_t h = r / P;
            if (r == lo || r % P == 0) {
                sp = softplus(dtt[h] + dt_bias[h]);
                dA = A_n == 1 ? ly_exp(sp * A[h]) : 0.0f;
            }
            const float *B = bct + (h / per_group) * N;
            float acc = ly_kernels->ssm_row(st + r * N, B, B + G * N, A_n == 1 ? NULL : A + h * N, sp, dA, x[r] * sp,
                                            N);
            y[t * H * P + r] = acc + D[h] * x[r];
        }
    }
}
