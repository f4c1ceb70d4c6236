/* The NEON tiles for F32, F16, BF16 weights: qfloat.c's sequence, lanes 0-3 of the 8 accumulators in one
 * vector and lanes 4-7 in another. F16 and BF16 convert to float exactly. */
#include "common.h"
#if LY_ARM64
#include "arm.h"
#include "kernels.h"
#include "q32.h"
#include <stdlib.h>

static void row_to_f32_neon(int type, const uint8_t *row, int64_t k, float *out) {
    int64_t i = 0;
    for (; i + 4 <= k; i += 4) {
        uint16x4_t h = vld1_u16((const uint16_t *)(row + 2 * i));
        float32x4_t f = type == LY_F16 ? vcvt_f32_f16(vreinterpret_f16_u16(h))
                                       : vreinterpretq_f32_u32(vshll_n_u16(h, 16));
        vst1q_f32(out + i, f);
    }
    ly_half_row_to_f32(type, row + 2 * i, k - i, out + i);
}

/* one token x against one float row wr */
static float dot(const float *wr, const float *x, int64_t k) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        lo = vaddq_f32(lo, vmulq_f32(vld1q_f32(wr + i), vld1q_f32(x + i)));
        hi = vaddq_f32(hi, vmulq_f32(vld1q_f32(wr + i + 4), vld1q_f32(x + i + 4)));
    }
    float l[8];
    vst1q_f32(l, lo);
    vst1q_f32(l + 4, hi);
    for (; i < k; i++) l[i & 7] = l[i & 7] + wr[i] * x[i];
    return ly_lanes_reduce(l);
}

static void tile(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                 int64_t t0, int64_t t1, float *y, int64_t ldy) {
    float *buf = type == LY_F32 ? NULL : malloc(a->k * sizeof(float));
    for (int64_t r = r0; r < r1; r++) {
        const float *wr = (const float *)(w + r * row_bytes);
        if (buf) { row_to_f32_neon(type, w + r * row_bytes, a->k, buf); wr = buf; }
        for (int64_t t = t0; t < t1; t++) y[t * ldy + r] = dot(wr, a->x + t * a->k, a->k);
    }
    free(buf);
}

#define TILE_NEON(NAME, TYPE)                                                                      \
    static void NAME(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,         \
                     int64_t t0, int64_t t1, float *y, int64_t ldy) {                              \
        tile(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                              \
    }
TILE_NEON(f32, LY_F32)
TILE_NEON(f16, LY_F16)
TILE_NEON(bf16, LY_BF16)

ly_tile_fn ly_tiles_float_neon(int type) {
    return type == LY_F32 ? f32 : type == LY_F16 ? f16 : type == LY_BF16 ? bf16 : NULL;
}
#endif
