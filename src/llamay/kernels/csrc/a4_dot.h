/* Exact int32 dots of 4 weight rows with int8 activations, lanes = rows, for the arm64 tile templates
 * (q32_a4.h, qk_a4.h). The includer defines A4_TARGET (a target attribute of arm.h) and A4_DOT: 0 NEON
 * (widening multiplies, pairwise adds), 1 sdot (vdotq_s32), 2 sdot plus smmla for two tokens at once
 * (vmmlaq_s32). Row i's values are at w + i * stride; weights and activations are int8 (|x| <= 127), so
 * every path's integer sums are exact and equal the portable element-order ones. */
#ifndef LLAMAY_A4_DOT_H
#define LLAMAY_A4_DOT_H
#include "arm.h"

#define A4_INLINE A4_TARGET static inline __attribute__((always_inline))

/* 4 int32 partial sums whose total is the dot of 16 values */
A4_INLINE int32x4_t a4_dot16(int32x4_t acc, int8x16_t w, int8x16_t x) {
#if A4_DOT >= 1
    return vdotq_s32(acc, w, x);
#else /* each int16 lane sums 2 products: <= 2 * 128 * 127 */
    return vpadalq_s16(acc, vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(x)), w, x));
#endif
}

/* lanes (p0, p1, p2, p3) -> lane i the total of p_i */
A4_INLINE int32x4_t a4_rows(int32x4_t p0, int32x4_t p1, int32x4_t p2, int32x4_t p3) {
    return vpaddq_s32(vpaddq_s32(p0, p1), vpaddq_s32(p2, p3));
}

/* lane i: dot of the 16 values at w + i * stride with x */
A4_INLINE int32x4_t a4_half(const int8_t *w, int64_t stride, int8x16_t x) {
    int32x4_t p[4];
    for (int i = 0; i < 4; i++) p[i] = a4_dot16(vdupq_n_s32(0), vld1q_s8(w + i * stride), x);
    return a4_rows(p[0], p[1], p[2], p[3]);
}

/* lane i: dot of the 32 values at w + i * stride with x[32] */
A4_INLINE int32x4_t a4_block(const int8_t *w, int64_t stride, const int8_t *x) {
    int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int32x4_t p[4];
    for (int i = 0; i < 4; i++)
        p[i] = a4_dot16(a4_dot16(vdupq_n_s32(0), vld1q_s8(w + i * stride), x0), vld1q_s8(w + i * stride + 16), x1);
    return a4_rows(p[0], p[1], p[2], p[3]);
}

#if A4_DOT == 2
/* 8-byte halves of a and b as the rows of one 2x8 matrix */
A4_INLINE int8x16_t a4_pair_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
A4_INLINE int8x16_t a4_pair_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* rows (i, i + 1) of 16 values at w with tokens x0, x1 -> (r_i t0, r_i t1, r_i+1 t0, r_i+1 t1) added to m */
A4_INLINE int32x4_t a4_mm16(int32x4_t m, const int8_t *w, int64_t stride, int8x16_t xl, int8x16_t xh) {
    int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + stride);
    return vmmlaq_s32(vmmlaq_s32(m, a4_pair_lo(w0, w1), xl), a4_pair_hi(w0, w1), xh);
}

/* a4_half for tokens x0 (-> *t0) and x1 (-> *t1) */
A4_INLINE void a4_half2(const int8_t *w, int64_t stride, int8x16_t x0, int8x16_t x1, int32x4_t *t0,
                        int32x4_t *t1) {
    int8x16_t xl = a4_pair_lo(x0, x1), xh = a4_pair_hi(x0, x1);
    int32x4_t m01 = a4_mm16(vdupq_n_s32(0), w, stride, xl, xh);
    int32x4_t m23 = a4_mm16(vdupq_n_s32(0), w + 2 * stride, stride, xl, xh);
    *t0 = vuzp1q_s32(m01, m23);
    *t1 = vuzp2q_s32(m01, m23);
}

/* a4_block for tokens x0 (-> *t0) and x1 (-> *t1) */
A4_INLINE void a4_block2(const int8_t *w, int64_t stride, const int8_t *x0, const int8_t *x1, int32x4_t *t0,
                         int32x4_t *t1) {
    int32x4_t m01 = vdupq_n_s32(0), m23 = vdupq_n_s32(0);
    for (int h = 0; h < 32; h += 16) {
        int8x16_t a = vld1q_s8(x0 + h), b = vld1q_s8(x1 + h), xl = a4_pair_lo(a, b), xh = a4_pair_hi(a, b);
        m01 = a4_mm16(m01, w + h, stride, xl, xh);
        m23 = a4_mm16(m23, w + 2 * stride + h, stride, xl, xh);
    }
    *t0 = vuzp1q_s32(m01, m23);
    *t1 = vuzp2q_s32(m01, m23);
}
#endif
#endif
