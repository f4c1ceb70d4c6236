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


/* A token's first pass over one head's state S [dk, dv]: S = S * decay; kv = S^T k. */
void ly_delta_pass1_portable(float *S, const float *k, float decay, float *kv, int64_t dk, int64_t dv) {
    for (int64_t j = 0; j < dv; j++) kv[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i];
        for (int64_t j = 0; j < dv; j++) {
            Si[j] = Si[j] * decay;
            kv[j] = kv[j] + Si[j] * ki;
        }
    }
}

/* Its second pass: S += k delta^T; out = S^T q. With kn (the next token of the same state), row by row
 * the next token's first pass too (decay_n, kv_n): each element of S, out and kv_n sees the operations
 * of the two passes run one after the other, in the same order, with half the passes over S. */
void ly_delta_pass2_portable(float *S, const float *k, const float *delta, const float *q, float *out,
                             const float *kn, float decay_n, float *kv_n, int64_t dk, int64_t dv) {
    for (int64_t j = 0; j < dv; j++) out[j] = 0.0f;
    for (int64_t j = 0; j < dv && kn; j++) kv_n[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i], qi = q[i];
        for (int64_t j = 0; j < dv; j++) {
            Si[j] = Si[j] + ki * delta[j];
            out[j] = out[j] + Si[j] * qi;
        }
        if (!kn) continue;
        float kni = kn[i];
        for (int64_t j = 0; j < dv; j++) {
            Si[j] = Si[j] * decay_n;
            kv_n[j] = kv_n[j] + Si[j] * kni;
        }
    }
}

/* What one token of head h needs besides the state: q and k normed, beta, decay. */
typedef struct {
    float q[LY_DELTA_MAX_DIM], k[LY_DELTA_MAX_DIM];
    float beta, decay;
} token_in;

static void token_inputs(const ly_node *nd, int64_t t, int64_t h, int64_t kh, token_in *in) {
    const float *qkv = nd->p[0], *ba = nd->p[1], *par = nd->p[2];
    int64_t n = nd->n[0], Hk = nd->n[1], Hv = nd->n[2], dk = nd->n[3], dv = nd->n[4];
    const float *x = qkv + t * (2 * Hk * dk + Hv * dv);
    unit(x + kh * dk, in->q, dk, nd->f[0], nd->f[1]);
    unit(x + (Hk + kh) * dk, in->k, dk, nd->f[0], 1.0f);
    in->beta = 1.0f / (1.0f + ly_exp(-ba[t * Hv + h]));
    in->decay = ly_exp(par[h] * ly_softplus(ba[(n + t) * Hv + h] + par[Hv + h]));
}

void ly_delta_rule_slice(const ly_node *nd, int ith, int nth) {
    const float *qkv = nd->p[0];
    float *y = nd->p[3], *pool = nd->p[4];
    const ly_batch *b = nd->p[5];
    int64_t n = nd->n[0], Hk = nd->n[1], Hv = nd->n[2], dk = nd->n[3], dv = nd->n[4], tiled = nd->n[5];
    int64_t row = 2 * Hk * dk + Hv * dv, lo, hi;
    token_in bufs[2];
    float kv[LY_DELTA_MAX_DIM], delta[LY_DELTA_MAX_DIM];
    ly_share(Hv, ith, nth, &lo, &hi);
    for (int64_t h = lo; h < hi; h++) {
        int64_t kh = tiled ? h % Hk : h / (Hv / Hk);
        int chained = 0; /* kv holds this token's first pass, run fused into the last token's second */
        for (int64_t t = 0; t < n; t++) {
            token_in *in = &bufs[t & 1], *next = &bufs[(t + 1) & 1];
            int32_t slot = b->state_slots[b->tok_seq[t]];
            float *S = pool + ((int64_t)slot * Hv + h) * dk * dv;
            if (!chained) {
                token_inputs(nd, t, h, kh, in);
                ly_kernels->delta_pass1(S, in->k, in->decay, kv, dk, dv);
            }
            const float *v = qkv + t * row + 2 * Hk * dk + h * dv;
            for (int64_t j = 0; j < dv; j++) delta[j] = (v[j] - kv[j]) * in->beta;
            chained = t + 1 < n && b->state_slots[b->tok_seq[t + 1]] == slot;
            if (chained) token_inputs(nd, t + 1, h, kh, next);
            ly_kernels->delta_pass2(S, in->k, delta, in->q, y + (t * Hv + h) * dv, chained ? next->k : NULL,
                                    chained ? next->decay : 0.0f, kv, dk, dv);
        }
    }
}
