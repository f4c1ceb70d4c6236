/* The gated delta rule (graph.h DELTA_RULE): the recurrence of Qwen3-Next's and Qwen3.5's linear
 * attention. Shares are v-head ranges; each head walks the batch's tokens in order on its sequence's
 * state slot, so a token's output depends only on that state and its own row, however the batch is made.
 * Reductions over the key dimension run i ascending, one multiply then one add per term (no FMA:
 * -ffp-contract=off); the loops over the value dimension are independent lanes. */
#include "graph.h"
#include "kernels.h"
#include "mathfn.h"
#include <math.h>

/* out = x / sqrt(sum(x^2) + eps) * scale, the sum in lanes.h order */
static void unit(const float *x, float *out, int64_t d, float eps, float scale) {
    float inv = 1.0f / sqrtf(ly_kernels->sumsq(x, d) + eps);
    for (int64_t i = 0; i < d; i++) out[i] = (x[i] * inv) * scale;
}

/* softplus as torch computes it: x above 20, else log(1 + exp(x)) */
static float softplus(float x) { return x > 20.0f ? x : log1pf(ly_exp(x)); }

/* One token of one head on its state S [dk, dv]: S = S * decay; kv = S^T k; delta = (v - kv) * beta;
 * S += k delta^T; out = S^T q. Per value column j the operations run in this order in every path
 * (recurrent_avx2.c, recurrent_avx512.c run 8 or 16 columns at once). */
void ly_delta_step_portable(float *S, const float *q, const float *k, const float *v, float beta, float decay,
                            float *out, int64_t dk, int64_t dv) {
    float delta[LY_DELTA_MAX_DIM];
    for (int64_t j = 0; j < dv; j++) delta[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i];
        for (int64_t j = 0; j < dv; j++) {
            Si[j] = Si[j] * decay;
            delta[j] = delta[j] + Si[j] * ki;
        }
    }
    for (int64_t j = 0; j < dv; j++) {
        delta[j] = (v[j] - delta[j]) * beta;
        out[j] = 0.0f;
    }
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i], qi = q[i];
        for (int64_t j = 0; j < dv; j++) {
            Si[j] = Si[j] + ki * delta[j];
            out[j] = out[j] + Si[j] * qi;
        }
    }
}

void ly_delta_rule_slice(const ly_node *nd, int ith, int nth) {
    const float *qkv = nd->p[0], *ba = nd->p[1], *par = nd->p[2];
    float *y = nd->p[3], *pool = nd->p[4];
    const ly_batch *b = nd->p[5];
    int64_t n = nd->n[0], Hk = nd->n[1], Hv = nd->n[2], dk = nd->n[3], dv = nd->n[4], tiled = nd->n[5];
    int64_t row = 2 * Hk * dk + Hv * dv, lo, hi;
    float q[LY_DELTA_MAX_DIM], k[LY_DELTA_MAX_DIM];
    ly_share(Hv, ith, nth, &lo, &hi);
    for (int64_t h = lo; h < hi; h++) {
        int64_t kh = tiled ? h % Hk : h / (Hv / Hk);
        for (int64_t t = 0; t < n; t++) {
            const float *x = qkv + t * row;
            float *S = pool + ((int64_t)b->state_slots[b->tok_seq[t]] * Hv + h) * dk * dv;
            unit(x + kh * dk, q, dk, nd->f[0], nd->f[1]);
            unit(x + (Hk + kh) * dk, k, dk, nd->f[0], 1.0f);
            float beta = 1.0f / (1.0f + ly_exp(-ba[t * Hv + h]));
            float decay = ly_exp(par[h] * softplus(ba[(n + t) * Hv + h] + par[Hv + h]));
            ly_kernels->delta_step(S, q, k, x + 2 * Hk * dk + h * dv, beta, decay, y + (t * Hv + h) * dv, dk, dv);
        }
    }
}
