/* arm64 K-quant tiles (Q2_K .. Q6_K; qk.h's canonical sequence, bit-identical to the portable path), built
 * three times like q32_a4.h: NEON, dotprod, i8mm (the includer defines A4_TARGET, A4_DOT, A4_ENTRY).
 * Rows go in groups of 4, one row per float lane: a group's super-blocks are decoded once per tile (the
 * q bytes of qk.c's unpackers, <= 63, held as int8; scales by qk.c's) into [super-block][row][256] and
 * [sub-block][row] scale tables, then every token runs over them (i8mm: two at a time): per super-block the
 * exact int32 raw and corr of the 4 rows, then one float step. */
#include "kernels.h"
#include "qk.h"
#include "a4_dot.h"
#include <stdlib.h>

typedef struct {               /* one super-block of a row group, [sub-block][row] */
    int32_t sc[16][4], cm[16][4];
    float d[4], dmin[4];
} group_tab;

/* bits shift .. shift + width - 1 of each byte */
A4_INLINE uint8x16_t bits(uint8x16_t v, int shift, int mask) {
    return vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)-shift)), vdupq_n_u8((uint8_t)mask));
}

/* value where bit `bit` of h is set, else 0 */
A4_INLINE uint8x16_t bit_as(uint8x16_t h, int bit, int value) {
    return vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1 << bit))), vdupq_n_u8((uint8_t)value));
}

/* One super-block -> its 256 q bytes, as qk.c's unpacker of the type (layouts there); 16 bytes at a time */
A4_INLINE void unpack(int type, const uint8_t *blk, uint8_t *q) {
    for (int l = 0; l < 32; l += 16) {
        if (type == QK_Q2_K || type == QK_Q3_K) {
            const uint8_t *qs = blk + (type == QK_Q2_K ? 16 : 32);
            uint8x16_t hm = vld1q_u8(blk + l);
            for (int n = 0; n < 8; n++) { /* block n: bits 2 (n % 4) of qs[32 (n / 4) + l] (Q3_K: hmask bit n as 4) */
                uint8x16_t v = bits(vld1q_u8(qs + 32 * (n / 4) + l), 2 * (n % 4), 3);
                vst1q_u8(q + 32 * n + l, type == QK_Q3_K ? vorrq_u8(v, bit_as(hm, n, 4)) : v);
            }
        } else if (type == QK_Q4_K || type == QK_Q5_K) {
            const uint8_t *qs = blk + (type == QK_Q4_K ? 16 : 48);
            uint8x16_t qh = vld1q_u8(blk + 16 + l);
            for (int n = 0; n < 8; n++) { /* block n: nibble n % 2 of qs[32 (n / 2) + l] (Q5_K: qh bit n as 16) */
                uint8x16_t v = bits(vld1q_u8(qs + 32 * (n / 2) + l), 4 * (n % 2), 15);
                vst1q_u8(q + 32 * n + l, type == QK_Q5_K ? vorrq_u8(v, bit_as(qh, n, 16)) : v);
            }
        } else { /* Q6_K: block n = 4 half + j: nibble j / 2 of ql[64 half + 32 (j % 2) + l], qh bits 2j as 16, 32 */
            for (int half = 0; half < 2; half++) {
                uint8x16_t qh = vld1q_u8(blk + 128 + 32 * half + l);
                for (int j = 0; j < 4; j++) {
                    uint8x16_t lo = bits(vld1q_u8(blk + 64 * half + 32 * (j % 2) + l), 4 * (j / 2), 15);
                    vst1q_u8(q + 128 * half + 32 * j + l, vorrq_u8(lo, vshlq_n_u8(bits(qh, 2 * j, 3), 4)));
                }
            }
        }
    }
}

/* Rows r .. r + 3 (missing rows repeat the last one) -> q [nsb][4][256] and tab [nsb] */
A4_INLINE void decode_group(int type, const qk_format *f, const uint8_t *w, size_t row_bytes, int64_t r,
                            int nrows, int64_t nsb, int8_t *q, group_tab *tab) {
    for (int i = 0; i < 4; i++) {
        const uint8_t *row = w + (size_t)(r + (i < nrows ? i : nrows - 1)) * row_bytes;
        for (int64_t s = 0; s < nsb; s++) {
            const uint8_t *blk = row + s * f->type_size;
            qk_scales c;
            unpack(type, blk, (uint8_t *)q + (s * 4 + i) * 256);
            f->scales(blk, &c);
            for (int h = 0; h < 16; h++) {
                tab[s].sc[h][i] = c.sc[h];
                tab[s].cm[h][i] = c.cm[h];
            }
            tab[s].d[i] = c.d;
            tab[s].dmin[i] = c.dmin;
        }
    }
}

/* acc + qk.h's float step for one super-block (lanes = rows): raw its 4 rows' exact sum of sc[h] * dot16,
 * corr computed here from the token's 16 s16 sums. Separate multiplies, subtract and add (no FMA). */
A4_INLINE float32x4_t step(int has_min, const group_tab *t, int32x4_t raw, float dx, const int32_t *s16,
                           float32x4_t acc) {
    int32x4_t corr = vmulq_n_s32(vld1q_s32(t->cm[0]), s16[0]);
    for (int h = 1; h < 16; h++) corr = vmlaq_n_s32(corr, vld1q_s32(t->cm[h]), s16[h]);
    float32x4_t ddx = vmulq_n_f32(vld1q_f32(t->d), dx), c;
    if (has_min)
        c = vsubq_f32(vmulq_f32(ddx, vcvtq_f32_s32(raw)),
                      vmulq_f32(vmulq_n_f32(vld1q_f32(t->dmin), dx), vcvtq_f32_s32(corr)));
    else
        c = vmulq_f32(ddx, vcvtq_f32_s32(vsubq_s32(raw, corr)));
    return vaddq_f32(acc, c);
}

A4_INLINE void store(float *y, float32x4_t acc, int nrows) {
    float out[4];
    vst1q_f32(out, acc);
    memcpy(y, out, nrows * sizeof(float));
}

/* token t: y[t * ldy + r .. + nrows) */
A4_INLINE void kernel1(int has_min, const int8_t *q, const group_tab *tab, int64_t nsb, const ly_act *a,
                       int64_t t, float *y, int nrows) {
    const int64_t k = a->k;
    const int8_t *x = a->q + t * k;
    const float *dx = a->d + t * nsb;
    const int32_t *s16 = a->s16 + t * (k / 16);
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t s = 0; s < nsb; s++) {
        const int8_t *qs = q + s * 1024, *xs = x + s * 256;
        int32x4_t raw = vdupq_n_s32(0);
        for (int h = 0; h < 16; h++)
            raw = vmlaq_s32(raw, a4_half(qs + h * 16, 256, vld1q_s8(xs + h * 16)), vld1q_s32(tab[s].sc[h]));
        acc = step(has_min, &tab[s], raw, dx[s], s16 + 16 * s, acc);
    }
    store(y, acc, nrows);
}

#if A4_DOT == 2
/* tokens t, t + 1 (the integer dots of both by smmla; each token's float steps as kernel1's) */
A4_INLINE void kernel2(int has_min, const int8_t *q, const group_tab *tab, int64_t nsb, const ly_act *a,
                       int64_t t, float *y, int64_t ldy, int nrows) {
    const int64_t k = a->k;
    const int8_t *x0 = a->q + t * k, *x1 = x0 + k;
    const float *dx0 = a->d + t * nsb, *dx1 = dx0 + nsb;
    const int32_t *s0 = a->s16 + t * (k / 16), *s1 = s0 + k / 16;
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
    for (int64_t s = 0; s < nsb; s++) {
        const int8_t *qs = q + s * 1024, *xs0 = x0 + s * 256, *xs1 = x1 + s * 256;
        int32x4_t raw0 = vdupq_n_s32(0), raw1 = vdupq_n_s32(0);
        for (int h = 0; h < 16; h++) {
            int32x4_t d0, d1, sc = vld1q_s32(tab[s].sc[h]);
            a4_half2(qs + h * 16, 256, vld1q_s8(xs0 + h * 16), vld1q_s8(xs1 + h * 16), &d0, &d1);
            raw0 = vmlaq_s32(raw0, d0, sc);
            raw1 = vmlaq_s32(raw1, d1, sc);
        }
        acc0 = step(has_min, &tab[s], raw0, dx0[s], s0 + 16 * s, acc0);
        acc1 = step(has_min, &tab[s], raw1, dx1[s], s1 + 16 * s, acc1);
    }
    store(y, acc0, nrows);
    store(y + ldy, acc1, nrows);
}
#endif

A4_INLINE void tile(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const qk_format *f = qk_format_of(type); /* type a literal: unpack's branches fold */
    const int has_min = f->has_min;
    int64_t nsb = a->k / 256;
    int8_t *q = malloc((size_t)nsb * 1024);
    group_tab *tab = malloc((size_t)nsb * sizeof *tab);
    for (int64_t r = r0; r < r1; r += 4) {
        int nrows = r1 - r < 4 ? (int)(r1 - r) : 4;
        decode_group(type, f, w, row_bytes, r, nrows, nsb, q, tab);
        int64_t t = t0;
#if A4_DOT == 2
        for (; t + 2 <= t1; t += 2) /* has_min a literal in each call: its branch folds */
            if (has_min) kernel2(1, q, tab, nsb, a, t, y + t * ldy + r, ldy, nrows);
            else kernel2(0, q, tab, nsb, a, t, y + t * ldy + r, ldy, nrows);
#endif
        for (; t < t1; t++)
            if (has_min) kernel1(1, q, tab, nsb, a, t, y + t * ldy + r, nrows);
            else kernel1(0, q, tab, nsb, a, t, y + t * ldy + r, nrows);
    }
    free(q);
    free(tab);
}

#define A4_QK(name, type)                                                                                \
    A4_TARGET static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,     \
                               int64_t t0, int64_t t1, float *y, int64_t ldy) {                           \
        tile(type, w, rb, r0, r1, a, t0, t1, y, ldy);                                                     \
    }
QK_ENTRIES(A4_QK)

ly_tile_fn A4_ENTRY(int type) { QK_PICK(type); }
