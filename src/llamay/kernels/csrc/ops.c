/* Elementwise and normalisation ops: RMSNorm, LayerNorm, RoPE, (gated) activations, residual add, bias,
 * scale, softcap.
 *
 * Reductions (the RMSNorm sum of squares) use the canonical 8-lane order of lanes.h, so the portable and
 * AVX2 paths agree bit for bit. Transcendentals are scalar libm calls in both paths. */
#include "graph.h"
#include "lanes.h"
#include "mathfn.h"
#include "matmul.h"

/* y[r] = (x[r] * (1 / sqrt(mean(x[r]^2) + eps))) * w, rows of length d; y may alias x. With p[3] (an
 * ly_act over y, rows of d) each row is quantized as soon as it is normed: one node and one pass fewer. */
void ly_rmsnorm_slice(const ly_node *nd, int ith, int nth) {
    const float *x = nd->p[0], *w = nd->p[1];
    float *y = nd->p[2];
    int64_t d = nd->n[1], lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float ss = ly_avx2 ? ly_sumsq_avx2(xr, d) : ly_sumsq_portable(xr, d);
        float scale = 1.0f / sqrtf(ss / (float)d + nd->f[0]);
        for (int64_t i = 0; i < d; i++) yr[i] = (xr[i] * scale) * w[i];
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
        float mean = (ly_avx2 ? ly_sum_avx2(xr, d) : ly_sum_portable(xr, d)) / (float)d;
        for (int64_t i = 0; i < d; i++) yr[i] = xr[i] - mean;
        float var = (ly_avx2 ? ly_sumsq_avx2(yr, d) : ly_sumsq_portable(yr, d)) / (float)d;
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

/* gate = act(gate) * up (up NULL: gate = act(gate)). act 0: SiLU g / (1 + exp(-g)); 1: GELU, tanh approximation
 * 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), with 1 + tanh(u) = 2 - 2 / (exp(2u) + 1) and u
 * clamped to [-10, 10] (tanh is +-1 in float beyond); 2: gpt-oss's clamped SwiGLU (gated only). exp is
 * mathfn.h's, so both paths agree. */
static inline float gated_one(float g, float up, int act) {
    const float c = 0.7978845608028654f;
    float a;
    if (act == 2) { /* gpt-oss: g = min(g, 7), a = g / (1 + exp(-1.702 g)), times clamp(up, -7, 7) + 1 */
        g = 7.0f < g ? 7.0f : g;
        up = 7.0f < up ? 7.0f : up;
        up = -7.0f > up ? -7.0f : up;
        return (g / (1.0f + ly_exp(-1.702f * g))) * (up + 1.0f);
    }
    if (act == 0) {
        a = g / (1.0f + ly_exp(-g));
    } else {
        float u = c * (g + (0.044715f * g) * (g * g));
        u = u > 10.0f ? 10.0f : u < -10.0f ? -10.0f : u;
        a = (0.5f * g) * (2.0f - 2.0f / (ly_exp(u + u) + 1.0f));
    }
    return a * up;
}

static inline float act_one(float g, int act) { return gated_one(g, 1.0f, act); } /* a * 1.0f == a */

LY_AVX2 static void gated_avx2(float *gate, const float *up, int64_t lo, int64_t hi, int act) {
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), c = _mm256_set1_ps(0.7978845608028654f);
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i), a;
        if (act == 2) { /* as gated_one: min_ps(7, x) is 7 < x ? 7 : x, max_ps(-7, x) is -7 > x ? -7 : x */
            const __m256 seven = _mm256_set1_ps(7.0f);
            g = _mm256_min_ps(seven, g);
            __m256 u = _mm256_max_ps(_mm256_set1_ps(-7.0f), _mm256_min_ps(seven, _mm256_loadu_ps(up + i)));
            a = _mm256_div_ps(g, _mm256_add_ps(one, ly_exp_avx2(_mm256_mul_ps(_mm256_set1_ps(-1.702f), g))));
            _mm256_storeu_ps(gate + i, _mm256_mul_ps(a, _mm256_add_ps(u, one)));
            continue;
        }
        if (act == 0) {
            a = _mm256_div_ps(g, _mm256_add_ps(one, ly_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        } else {
            __m256 u = _mm256_mul_ps(c, _mm256_add_ps(g, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g),
                                                                       _mm256_mul_ps(g, g))));
            u = _mm256_min_ps(_mm256_max_ps(u, _mm256_set1_ps(-10.0f)), _mm256_set1_ps(10.0f));
            __m256 e = ly_exp_avx2(_mm256_add_ps(u, u));
            a = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g),
                              _mm256_sub_ps(two, _mm256_div_ps(two, _mm256_add_ps(e, one))));
        }
        _mm256_storeu_ps(gate + i, up ? _mm256_mul_ps(a, _mm256_loadu_ps(up + i)) : a);
    }
    for (; i < hi; i++) gate[i] = up ? gated_one(gate[i], up[i], act) : act_one(gate[i], act);
}

void ly_gated_slice(const ly_node *nd, int ith, int nth) {
    float *gate = nd->p[0];
    const float *up = nd->p[1];
    int act = (int)nd->n[1];
    const ly_act *q = nd->p[2];
    int64_t lo, hi, k = q ? q->k : 1; /* fused with the quantization of rows of k: shares are rows */
    ly_share(nd->n[0] / k, ith, nth, &lo, &hi);
    int64_t a = lo * k, b = hi * k;
    if (ly_avx2) gated_avx2(gate, up, a, b, act);
    else for (int64_t i = a; i < b; i++) gate[i] = up ? gated_one(gate[i], up[i], act) : act_one(gate[i], act);
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

/* x = cap * tanh(x / cap). tanh(u): for |u| < 1/8 the odd series u + u^3 (c3 + u^2 (c5 + u^2 c7)) (error
 * < 2e-9 relative), else 1 - 2 / (exp(2u) + 1) with u clamped to [-10, 10] (tanh is +-1 in float beyond)
 * and mathfn.h's exp; both paths compute both forms and pick by |u|, so they agree bit for bit. */
#define TANH_C3 -0.333333333333f
#define TANH_C5 0.133333333333f
#define TANH_C7 -0.053968253968f

static inline float softcap_one(float x, float cap) {
    float u = x / cap, u2 = u * u;
    float small = u + (u * u2) * (TANH_C3 + u2 * (TANH_C5 + u2 * TANH_C7));
    float c = u > 10.0f ? 10.0f : u < -10.0f ? -10.0f : u;
    float big = 1.0f - 2.0f / (ly_exp(c + c) + 1.0f);
    return cap * (fabsf(u) < 0.125f ? small : big);
}

LY_AVX2 static void softcap_avx2(float *x, int64_t lo, int64_t hi, float cap) {
    const __m256 k = _mm256_set1_ps(cap), one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 u = _mm256_div_ps(_mm256_loadu_ps(x + i), k), u2 = _mm256_mul_ps(u, u);
        __m256 p = _mm256_add_ps(_mm256_set1_ps(TANH_C5), _mm256_mul_ps(u2, _mm256_set1_ps(TANH_C7)));
        p = _mm256_add_ps(_mm256_set1_ps(TANH_C3), _mm256_mul_ps(u2, p));
        __m256 small = _mm256_add_ps(u, _mm256_mul_ps(_mm256_mul_ps(u, u2), p));
        __m256 c = _mm256_min_ps(_mm256_max_ps(u, _mm256_set1_ps(-10.0f)), _mm256_set1_ps(10.0f));
        __m256 big = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(ly_exp_avx2(_mm256_add_ps(c, c)), one)));
        __m256 is_small = _mm256_cmp_ps(_mm256_and_ps(u, abs_mask), _mm256_set1_ps(0.125f), _CMP_LT_OQ);
        _mm256_storeu_ps(x + i, _mm256_mul_ps(k, _mm256_blendv_ps(big, small, is_small)));
    }
    for (; i < hi; i++) x[i] = softcap_one(x[i], cap);
}

void ly_softcap_slice(const ly_node *nd, int ith, int nth) {
    float *x = nd->p[0];
    int64_t lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    if (ly_avx2) { softcap_avx2(x, lo, hi, nd->f[0]); return; }
    for (int64_t i = lo; i < hi; i++) x[i] = softcap_one(x[i], nd->f[0]);
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
