/* Elementwise and normalisation ops: RMSNorm, LayerNorm, RoPE, (gated) activations, residual add, bias,
 * scale, softcap.
 *
 * Reductions (the RMSNorm sum of squares) use the canonical 8-lane order of lanes.h, so all paths agree bit
 * for bit. The portable kernels of the table are here, the AVX2 ones in ops_avx2.c. */
#include "graph.h"
#include "kernels.h"
#include "lanes.h"
#include "mathfn.h"

float ly_sum_portable(const float *x, int64_t d) {
    float l[8] = {0};
    for (int64_t i = 0; i < d; i++) l[i & 7] = l[i & 7] + x[i];
    return ly_lanes_reduce(l);
}

float ly_sumsq_portable(const float *x, int64_t d) {
    float l[8] = {0};
    for (int64_t i = 0; i < d; i++) l[i & 7] = l[i & 7] + x[i] * x[i];
    return ly_lanes_reduce(l);
}

/* y[r] = (x[r] * (1 / sqrt(mean(x[r]^2) + eps))) * w, rows of length d; y may alias x. With p[3] (an
 * ly_act over y, rows of d) each row is quantized as soon as it is normed: one node and one pass fewer.
 * n[2] = G > 1: w holds G rows of d and row r takes w row r % G (Mamba2's per-group norm weights). */
void ly_rmsnorm_slice(const ly_node *nd, int ith, int nth) {
    const float *x = nd->p[0], *w = nd->p[1];
    float *y = nd->p[2];
    int64_t d = nd->n[1], G = nd->n[2] > 1 ? nd->n[2] : 1, lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * d, *wr = w + (r % G) * d;
        float *yr = y + r * d;
        float ss = ly_kernels->sumsq(xr, d);
        float scale = 1.0f / sqrtf(ss / (float)d + nd->f[0]);
        for (int64_t i = 0; i < d; i++) yr[i] = (xr[i] * scale) * wr[i];
        if (nd->p[3]) ly_quant_rows(nd->p[3], r, r + 1);
    }
}

/* LayerNorm of rows of length d: mean = sum(x) / d, c = x - mean, var = sum(c * c) / d (sums in lanes.h
 * order), y = (c * (1 / sqrt(var + eps))) * w + b; y may alias x. */
void ly_layernorm_slice(const ly_node *nd, int ith, int nth) {
    const float *x = nd->p[0], *w = nd->p[1], *b = nd->p[2];
    float *y = nd->p[3];
    int64_t d = nd->n[1], lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float mean = ly_kernels->sum(xr, d) / (float)d;
        for (int64_t i = 0; i < d; i++) yr[i] = xr[i] - mean;
        float var = ly_kernels->sumsq(yr, d) / (float)d;
        float scale = 1.0f / sqrtf(var + nd->f[0]);
        for (int64_t i = 0; i < d; i++) yr[i] = (yr[i] * scale) * w[i] + b[i];
    }
}

/* In place on x [tokens, heads, head_dim], first n_rot dims of each head. neox = 0: pairs (2i, 2i+1)
 * (llama); 1: pairs (i, i + n_rot/2) (gemma, qwen2). theta_i = pos * base^(-2i / n_rot) / (ff_i * linear)
 * in double (ff: Llama 3's or LongRoPE's per-pair frequency factors, or none; linear: linear RoPE scaling,
 * 1 = none), cos/sin times mscale (1 = none) rounded to float. Shares: (token, head) pairs. */
void ly_rope_slice(const ly_node *nd, int ith, int nth) {
    float *x = nd->p[0];
    const int32_t *pos = nd->p[1];
    int64_t n_heads = nd->n[1], head_dim = nd->n[2], n_rot = nd->n[3], half = n_rot / 2, lo, hi;
    int neox = (int)nd->n[4];
    ly_share(nd->n[0] * n_heads, ith, nth, &lo, &hi);
    float cs[512], sn[512];
    double inv_freq[512]; /* base^(-2i / n_rot), the same for every token */
    const float *ff = nd->p[2];
    const double mscale = (double)nd->f[2];
    for (int64_t i = 0; i < half && lo < hi; i++)
        inv_freq[i] = pow((double)nd->f[0], -2.0 * (double)i / (double)n_rot)
                      / ((ff ? (double)ff[i] : 1.0) * (double)nd->f[1]);
    int64_t cached_t = -1;
    for (int64_t w = lo; w < hi; w++) {
        int64_t t = w / n_heads;
        if (t != cached_t) {
            for (int64_t i = 0; i < half; i++) {
                double theta = (double)pos[t] * inv_freq[i];
                cs[i] = (float)(cos(theta) * mscale);
                sn[i] = (float)(sin(theta) * mscale);
            }
            cached_t = t;
        }
        float *v = x + w * head_dim;
        for (int64_t i = 0; i < half; i++) {
            int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * cs[i] - x1 * sn[i];
            v[b] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

/* gate[i] = act(gate[i]) * up[i] (up NULL: act(gate[i])) for i in [lo, hi): mathfn.h's ly_gated_one */
void ly_gated_portable(float *gate, const float *up, int64_t lo, int64_t hi, int act) {
    for (int64_t i = lo; i < hi; i++) gate[i] = up ? ly_gated_one(gate[i], up[i], act) : ly_act_one(gate[i], act);
}

void ly_gated_slice(const ly_node *nd, int ith, int nth) {
    float *gate = nd->p[0];
    const float *up = nd->p[1];
    int act = (int)nd->n[1];
    const ly_act *q = nd->p[2];
    int64_t lo, hi, k = q ? q->k : 1; /* fused with the quantization of rows of k: shares are rows */
    ly_share(nd->n[0] / k, ith, nth, &lo, &hi);
    int64_t a = lo * k, b = hi * k;
    ly_kernels->gated(gate, up, a, b, act);
    if (q) ly_quant_rows(q, lo, hi);
}

void ly_add_slice(const ly_node *nd, int ith, int nth) {
    float *x = nd->p[0];
    const float *y = nd->p[1];
    int64_t lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) x[i] = x[i] + y[i];
}

void ly_scale_slice(const ly_node *nd, int ith, int nth) {
    float *x = nd->p[0];
    const float s = nd->f[0];
    int64_t lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) x[i] = x[i] * s;
}

/* x[i] = cap * tanh(x[i] / cap) for i in [lo, hi): mathfn.h's ly_softcap_one */
void ly_softcap_portable(float *x, int64_t lo, int64_t hi, float cap) {
    for (int64_t i = lo; i < hi; i++) x[i] = ly_softcap_one(x[i], cap);
}

void ly_softcap_slice(const ly_node *nd, int ith, int nth) {
    float *x = nd->p[0];
    int64_t lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    ly_kernels->softcap(x, lo, hi, nd->f[0]);
}

/* Llama 4's attention temperature on the queries (POS_SCALE). Shares: tokens. */
void ly_pos_scale_slice(const ly_node *nd, int ith, int nth) {
    float *x = nd->p[0];
    const int32_t *pos = nd->p[1];
    int64_t d = nd->n[1], lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float s = (float)(1.0 + (double)nd->f[0] * log(1.0 + floor((double)pos[t] / (double)nd->n[2])));
        for (int64_t i = 0; i < d; i++) x[t * d + i] = x[t * d + i] * s;
    }
}

/* A shared expert's gate (SIGMOID_SCALE): exp is mathfn.h's. Shares: rows. */
void ly_sigmoid_scale_slice(const ly_node *nd, int ith, int nth) {
    float *y = nd->p[0];
    const float *g = nd->p[1];
    int64_t d = nd->n[1], lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        float s = 1.0f / (1.0f + ly_exp(-g[t]));
        for (int64_t i = 0; i < d; i++) y[t * d + i] = y[t * d + i] * s;
    }
}

void ly_row_scale_slice(const ly_node *nd, int ith, int nth) {
    float *y = nd->p[0];
    const float *s = nd->p[1];
    const float alpha = nd->f[0], rank = nd->f[1];
    int64_t d = nd->n[1], lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        const float f = alpha != 0.0f ? s[t] * alpha / rank : s[t]; /* llama.cpp's scale * alpha / rank */
        for (int64_t i = 0; i < d; i++) y[t * d + i] = f != 0.0f ? y[t * d + i] * f : 0.0f;
    }
}
