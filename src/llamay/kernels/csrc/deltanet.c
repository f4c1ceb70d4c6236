/* The gated delta rule (graph.h DELTA_RULE): the recurrence of Qwen3-Next's and Qwen3.5's linear
 * attention (a decay per head), and of Kimi's delta attention (a decay per state row). Shares are v-head
 * ranges; each head walks the batch's tokens in order on its sequence's state slot, so a token's output
 * depends only on that state and its own row, however the batch is made. Reductions over the key dimension
 * run i ascending, one multiply then one add per term (no FMA: -ffp-contract=off); the loops over the value
 * dimension are independent lanes. */
#include "graph.h"
#include "kernels.h"
#include "mathfn.h"
#include <math.h>

/* out = x / sqrt(sum(x^2) + eps) * scale, the sum in lanes.h order */
static void unit(const float *x, float *out, int64_t d, float eps, float scale) {
    float inv = 1.0f / sqrtf(ly_kernels->sumsq(x, d) + eps);
    for (int64_t i = 0; i < d; i++) out[i] = (x[i] * inv) * scale;
}


/* A token's first pass over one head's state S [dk, dv]: row i of S times decay[i]; kv = S^T k. */
void ly_delta_pass1_portable(float *S, const float *k, const float *decay, float *kv, int64_t dk, int64_t dv) {
    for (int64_t j = 0; j < dv; j++) kv[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i], di = decay[i];
        for (int64_t j = 0; j < dv; j++) {
            Si[j] = Si[j] * di;
            kv[j] = kv[j] + Si[j] * ki;
        }
    }
}

/* Its second pass: S += k delta^T; out = S^T q. With kn (the next token of the same state), row by row
 * the next token's first pass too (decay_n, kv_n): each element of S, out and kv_n sees the operations
 * of the two passes run one after the other, in the same order, with half the passes over S. */
void ly_delta_pass2_portable(float *S, const float *k, const float *delta, const float *q, float *out,
                             const float *kn, const float *decay_n, float *kv_n, int64_t dk, int64_t dv) {
    for (int64_t j = 0; j < dv; j++) out[j] = 0.0f;
    for (int64_t j = 0; j < dv && kn; j++) kv_n[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i], qi = q[i];
        for (int64_t j = 0; j < dv; j++) {
            Si[j] = Si[j] + ki * delta[j];
            out[j] = out[j] + Si[j] * qi;
        }
        if (!kn) continue;
        float kni = kn[i], dni = decay_n[i];
        for (int64_t j = 0; j < dv; j++) {
            Si[j] = Si[j] * dni;
            kv_n[j] = kv_n[j] + Si[j] * kni;
        }
    }
}

/* What one token of head h needs besides the state: q and k normed, beta, each state row's decay. */
typedef struct {
    float q[LY_DELTA_MAX_DIM], k[LY_DELTA_MAX_DIM], decay[LY_DELTA_MAX_DIM];
    float beta;
} token_in;

/* Where token t's q, k (of k-head kh) and v (of v-head h) rows start: one row per token, or three planes. */
static const float *q_row(const ly_node *nd, int64_t t, int64_t kh) {
    int64_t Hk = nd->n[1], Hv = nd->n[2], dk = nd->n[3], dv = nd->n[4];
    const float *qkv = nd->p[0];
    return (nd->n[5] & LY_DELTA_PLANAR ? qkv + t * Hk * dk : qkv + t * (2 * Hk * dk + Hv * dv)) + kh * dk;
}

static const float *k_row(const ly_node *nd, int64_t t, int64_t kh) {
    int64_t n = nd->n[0], Hk = nd->n[1], dk = nd->n[3];
    return q_row(nd, t, kh) + (nd->n[5] & LY_DELTA_PLANAR ? n * Hk * dk : Hk * dk);
}

static const float *v_row(const ly_node *nd, int64_t t, int64_t h) {
    int64_t n = nd->n[0], Hk = nd->n[1], dk = nd->n[3], dv = nd->n[4];
    return nd->n[5] & LY_DELTA_PLANAR ? q_row(nd, t, 0) + 2 * n * Hk * dk + h * dv : k_row(nd, t, 0) + Hk * dk + h * dv;
}

static void token_inputs(const ly_node *nd, int64_t t, int64_t h, int64_t kh, token_in *in) {
    const float *ba = nd->p[1], *par = nd->p[2];
    int64_t n = nd->n[0], Hv = nd->n[2], dk = nd->n[3];
    unit(q_row(nd, t, kh), in->q, dk, nd->f[0], nd->f[1]);
    unit(k_row(nd, t, kh), in->k, dk, nd->f[0], 1.0f);
    in->beta = 1.0f / (1.0f + ly_exp(-ba[t * Hv + h]));
    if (nd->n[5] & LY_DELTA_PER_ROW) { /* a gate per state row: a [tokens, Hv dk], dt_bias [Hv dk] */
        const float *a = ba + n * Hv + (t * Hv + h) * dk, *dtb = par + Hv + h * dk;
        for (int64_t i = 0; i < dk; i++) in->decay[i] = ly_exp(par[h] * ly_softplus(a[i] + dtb[i]));
        return;
    }
    float decay = ly_exp(par[h] * ly_softplus(ba[(n + t) * Hv + h] + par[Hv + h]));
    for (int64_t i = 0; i < dk; i++) in->decay[i] = decay;
}

void ly_delta_rule_slice(const ly_node *nd, int ith, int nth) {
    float *y = nd->p[3], *pool = nd->p[4];
    const ly_batch *b = nd->p[5];
    int64_t n = nd->n[0], Hk = nd->n[1], Hv = nd->n[2], dk = nd->n[3], dv = nd->n[4];
    int64_t tiled = nd->n[5] & LY_DELTA_TILED, lo, hi;
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
            const float *v = v_row(nd, t, h);
            for (int64_t j = 0; j < dv; j++) delta[j] = (v[j] - kv[j]) * in->beta;
            chained = t + 1 < n && b->state_slots[b->tok_seq[t + 1]] == slot;
            if (chained) token_inputs(nd, t + 1, h, kh, next);
            ly_kernels->delta_pass2(S, in->k, delta, in->q, y + (t * Hv + h) * dv, chained ? next->k : NULL,
                                    chained ? next->decay : NULL, kv, dk, dv);
        }
    }
}
