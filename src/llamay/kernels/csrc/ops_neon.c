/* The NEON kernels of ops.c: the reductions with lanes.h's 8 lanes as two vectors (lanes 0-3, 4-7), the
 * activations and softcap with mathfn.h's operations per element, 4 wide (tails by the scalar forms). */
#include "common.h"
#if LY_ARM64
#include "arm.h"
#include "kernels.h"

float ly_sum_neon(const float *x, int64_t d) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        lo = vaddq_f32(lo, vld1q_f32(x + i));
        hi = vaddq_f32(hi, vld1q_f32(x + i + 4));
    }
    float l[8];
    vst1q_f32(l, lo);
    vst1q_f32(l + 4, hi);
    for (; i < d; i++) l[i & 7] = l[i & 7] + x[i];
    return ly_lanes_reduce(l);
}

float ly_sumsq_neon(const float *x, int64_t d) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        lo = vaddq_f32(lo, vmulq_f32(a, a));
        hi = vaddq_f32(hi, vmulq_f32(b, b));
    }
    float l[8];
    vst1q_f32(l, lo);
    vst1q_f32(l + 4, hi);
    for (; i < d; i++) l[i & 7] = l[i & 7] + x[i] * x[i];
    return ly_lanes_reduce(l);
}
/* act(g) of mathfn.h's ly_gated_one for act 0, 1, 4, 5 (2 and 3 are whole steps in ly_gated_neon) */
static inline float32x4_t act4(float32x4_t g, int act) {
    const float32x4_t one = vdupq_n_f32(1.0f), two = vdupq_n_f32(2.0f);
    if (act == 0) return vdivq_f32(g, vaddq_f32(one, ly_exp_neon(vnegq_f32(g))));
    if (act == 4) return vdivq_f32(one, vaddq_f32(one, ly_exp_neon(vnegq_f32(g))));
    if (act == 5) { /* r = g > 0 ? g : 0 */
        float32x4_t r = vbslq_f32(vcgtq_f32(g, vdupq_n_f32(0.0f)), g, vdupq_n_f32(0.0f));
        return vmulq_f32(r, r);
    }
    float32x4_t u = vmulq_n_f32(vaddq_f32(g, vmulq_f32(vmulq_n_f32(g, 0.044715f), vmulq_f32(g, g))),
                                0.7978845608028654f);
    float32x4_t e = ly_exp_neon(vaddq_f32(ly_clamp_neon(u, -10.0f, 10.0f), ly_clamp_neon(u, -10.0f, 10.0f)));
    return vmulq_f32(vmulq_n_f32(g, 0.5f), vsubq_f32(two, vdivq_f32(two, vaddq_f32(e, one))));
}

void ly_gated_neon(float *gate, const float *up, int64_t lo, int64_t hi, int act) {
    int64_t i = lo;
    for (; i + 4 <= hi; i += 4) {
        float32x4_t g = vld1q_f32(gate + i), a;
        if (act == 2) { /* gpt-oss: g = 7 < g ? 7 : g, up clamped to [-7, 7] the same way */
            const float32x4_t seven = vdupq_n_f32(7.0f), one = vdupq_n_f32(1.0f);
            g = vbslq_f32(vcltq_f32(seven, g), seven, g);
            float32x4_t u = vld1q_f32(up + i);
            u = vbslq_f32(vcltq_f32(seven, u), seven, u);
            u = vbslq_f32(vcgtq_f32(vnegq_f32(seven), u), vnegq_f32(seven), u);
            a = vdivq_f32(g, vaddq_f32(one, ly_exp_neon(vmulq_n_f32(g, -1.702f))));
            vst1q_f32(gate + i, vmulq_f32(a, vaddq_f32(u, one)));
            continue;
        }
        a = act == 3 ? g : act4(g, act);
        vst1q_f32(gate + i, up ? vmulq_f32(a, vld1q_f32(up + i)) : a);
    }
    for (; i < hi; i++) gate[i] = up ? ly_gated_one(gate[i], up[i], act) : ly_act_one(gate[i], act);
}

/* mathfn.h's ly_softcap_one: both tanh forms, picked by |u| < 1/8 */
void ly_softcap_neon(float *x, int64_t lo, int64_t hi, float cap) {
    const float32x4_t one = vdupq_n_f32(1.0f), two = vdupq_n_f32(2.0f);
    int64_t i = lo;
    for (; i + 4 <= hi; i += 4) {
        float32x4_t u = vdivq_f32(vld1q_f32(x + i), vdupq_n_f32(cap)), u2 = vmulq_f32(u, u);
        float32x4_t p = vaddq_f32(vdupq_n_f32(LY_TANH_C5), vmulq_n_f32(u2, LY_TANH_C7));
        p = vaddq_f32(vdupq_n_f32(LY_TANH_C3), vmulq_f32(u2, p));
        float32x4_t small = vaddq_f32(u, vmulq_f32(vmulq_f32(u, u2), p));
        float32x4_t c = ly_clamp_neon(u, -10.0f, 10.0f);
        float32x4_t big = vsubq_f32(one, vdivq_f32(two, vaddq_f32(ly_exp_neon(vaddq_f32(c, c)), one)));
        uint32x4_t is_small = vcltq_f32(vabsq_f32(u), vdupq_n_f32(0.125f));
        vst1q_f32(x + i, vmulq_n_f32(vbslq_f32(is_small, small, big), cap));
    }
    for (; i < hi; i++) x[i] = ly_softcap_one(x[i], cap);
}
#endif
