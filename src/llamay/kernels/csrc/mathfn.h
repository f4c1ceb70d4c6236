/* exp for the gated activations, one float operation sequence in scalar and AVX2 (avx2.h) form (bit-identical;
 * libm's expf/tanhf have no vector form that is guaranteed to agree with them), and the scalar activation
 * and softcap steps: the portable kernels and the vector kernels' tails (ops.c, ops_avx2.c).
 * exp(x) = 2^n * P(r), n = rint(x * log2 e), r = x - n * ln2 (two-part ln2), P: Cephes expf polynomial
 * (relative error ~1e-7 on the reduced range). x is clamped to [-87.3, 88.3]. */
#ifndef LLAMAY_MATHFN_H
#define LLAMAY_MATHFN_H
#include "common.h"
#include <math.h>

#define LY_EXP_HI 88.3762626647949f
#define LY_EXP_LO -87.3365478515625f
#define LY_LOG2E 1.44269504088896341f
#define LY_LN2_A 0.693359375f
#define LY_LN2_B -2.12194440e-4f
static const float ly_exp_c[6] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                                  4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};

static inline float ly_exp(float x) {
    x = x > LY_EXP_HI ? LY_EXP_HI : x < LY_EXP_LO ? LY_EXP_LO : x;
    float n = nearbyintf(x * LY_LOG2E);
    float r = (x - n * LY_LN2_A) - n * LY_LN2_B;
    float y = ly_exp_c[0];
    for (int i = 1; i < 6; i++) y = y * r + ly_exp_c[i];
    y = ((y * (r * r)) + r) + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return y * scale;
}

/* log(w) for a finite w >= 1: w = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes logf's polynomial in
 * x = m - 1 (relative error ~1e-7), plus e ln2 in two parts; one float operation sequence, scalar and AVX2
 * (avx2.h), as ly_exp. */
#define LY_SQRTHF 0.707106781186547524f
static const float ly_log_c[9] = {7.0376836292E-2f, -1.1514610310E-1f, 1.1676998740E-1f, -1.2420140846E-1f,
                                  1.4249322787E-1f, -1.6668057665E-1f, 2.0000714765E-1f, -2.4999993993E-1f,
                                  3.3333331174E-1f};

static inline float ly_log_ge1(float w) {
    int32_t bits;
    memcpy(&bits, &w, 4);
    int32_t e = (bits >> 23) - 126; /* w = f 2^e, f in [1/2, 1) */
    bits = (bits & 0x007fffff) | 0x3f000000;
    float f;
    memcpy(&f, &bits, 4);
    int lt = f < LY_SQRTHF;
    e -= lt;
    float x = lt ? (f + f) - 1.0f : f - 1.0f, z = x * x, y = ly_log_c[0];
    for (int i = 1; i < 9; i++) y = y * x + ly_log_c[i];
    y = (y * x) * z;
    float fe = (float)e;
    y = (y + fe * LY_LN2_B) - 0.5f * z;
    return (x + y) + fe * LY_LN2_A;
}

/* softplus as torch's (threshold 20): v above 20 as is, else log1p(exp(v)), libm's log1pf: for ops that run it
 * scalar only (once per head: Mamba2's dt, the delta net's decay) */
static inline float ly_softplus(float v) { return v > 20.0f ? v : log1pf(ly_exp(v)); }

/* The same with a log of the project's own, for ops whose vector paths must agree (Mamba1's dt, one per
 * channel: libm's log1pf was 70% of its scan): log(1 + u), u = exp(v), as log(w) + (u - (w - 1)) / w with
 * w = 1 + u in float (the quotient restores what rounding w lost: a tiny u gives u). */
static inline float ly_softplus_poly(float v) {
    if (v > 20.0f) return v;
    float u = ly_exp(v), w = 1.0f + u;
    return ly_log_ge1(w) + (u - (w - 1.0f)) / w;
}

/* gate = act(gate) * up (up NULL: gate = act(gate)). act 0: SiLU g / (1 + exp(-g)); 1: GELU, tanh approximation
 * 0.5 g (1 + tanh(u)), u = sqrt(2/pi) (g + 0.044715 g^3), with 1 + tanh(u) = 2 - 2 / (exp(2u) + 1) and u
 * clamped to [-10, 10] (tanh is +-1 in float beyond); 2: gpt-oss's clamped SwiGLU (gated only); 5: squared
 * ReLU r * r, r = g > 0 ? g : 0 (Nemotron-H). exp is ly_exp, so all paths agree. */
static inline float ly_gated_one(float g, float up, int act) {
    const float c = 0.7978845608028654f;
    float a;
    if (act == 2) { /* gpt-oss: g = min(g, 7), a = g / (1 + exp(-1.702 g)), times clamp(up, -7, 7) + 1 */
        g = 7.0f < g ? 7.0f : g;
        up = 7.0f < up ? 7.0f : up;
        up = -7.0f > up ? -7.0f : up;
        return (g / (1.0f + ly_exp(-1.702f * g))) * (up + 1.0f);
    }
    if (act == 3) return g * up; /* no activation: a product */
    if (act == 0) {
        a = g / (1.0f + ly_exp(-g));
    } else if (act == 4) {
        a = 1.0f / (1.0f + ly_exp(-g));
    } else if (act == 5) {
        float r = g > 0.0f ? g : 0.0f;
        a = r * r;
    } else {
        float u = c * (g + (0.044715f * g) * (g * g));
        u = u > 10.0f ? 10.0f : u < -10.0f ? -10.0f : u;
        a = (0.5f * g) * (2.0f - 2.0f / (ly_exp(u + u) + 1.0f));
    }
    return a * up;
}

static inline float ly_act_one(float g, int act) { return ly_gated_one(g, 1.0f, act); } /* a * 1.0f == a */

/* x = cap * tanh(x / cap). tanh(u): for |u| < 1/8 the odd series u + u^3 (c3 + u^2 (c5 + u^2 c7)) (error
 * < 2e-9 relative), else 1 - 2 / (exp(2u) + 1) with u clamped to [-10, 10] (tanh is +-1 in float beyond)
 * and ly_exp; all paths compute both forms and pick by |u|, so they agree bit for bit. */
#define LY_TANH_C3 -0.333333333333f
#define LY_TANH_C5 0.133333333333f
#define LY_TANH_C7 -0.053968253968f

static inline float ly_softcap_one(float x, float cap) {
    float u = x / cap, u2 = u * u;
    float small = u + (u * u2) * (LY_TANH_C3 + u2 * (LY_TANH_C5 + u2 * LY_TANH_C7));
    float c = u > 10.0f ? 10.0f : u < -10.0f ? -10.0f : u;
    float big = 1.0f - 2.0f / (ly_exp(c + c) + 1.0f);
    return cap * (fabsf(u) < 0.125f ? small : big);
}

#endif
