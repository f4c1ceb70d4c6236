/* The NEON kernels of ops.c's reductions: lanes.h's 8 lanes as two vectors (lanes 0-3, 4-7). */
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
#endif
