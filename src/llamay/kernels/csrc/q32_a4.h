/* arm64 tiles for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, MXFP4 (formulas in q32.h, bit-identical to
 * the portable path), built three times: NEON (q32_neon.c), dotprod (q32_dotprod.c) and i8mm (q32_i8mm.c).
 * The includer defines A4_TARGET, A4_DOT (a4_dot.h) and A4_ENTRY (its tile getter's name).
 * Rows go in groups of 4, one row per float lane: a group is decoded once per tile into signed int8 values
 * [block][row][32] and per-row scales, then every token of the tile runs over it (i8mm: two at a time).
 * Lane i follows q32.h's per-block float step for row i, in block order, from 0.0f. */
#include "kernels.h"
#include "q32.h"
#include "a4_dot.h"
#include <stdlib.h>

typedef struct { int type, has_min; } q_fmt;

typedef struct {
    int8_t *v;      /* [nb][4][32] */
    float *dw, *mw; /* [nb][4] */
} group_buf;

/* A row's 32-block at blk (lookup formats: its qs; IQ4_XS: the superblock's) -> 32 signed int8 values */
A4_INLINE void unpack_block(int type, const uint8_t *blk, int ib, int8_t *v) {
    const uint8x16_t m4 = vdupq_n_u8(15);
    if (type == LY_Q8_0) {
        vst1q_s8(v, vld1q_s8((const int8_t *)blk + 2));
        vst1q_s8(v + 16, vld1q_s8((const int8_t *)blk + 18));
        return;
    }
    if (type == LY_IQ4_NL || type == LY_MXFP4 || type == LY_IQ4_XS) {
        const int8x16_t table = vld1q_s8(type == LY_MXFP4 ? LY_KV_MXFP4 : LY_KV_IQ4NL);
        uint8x16_t qs = vld1q_u8(blk + (type == LY_IQ4_XS ? 8 + 16 * ib : type == LY_MXFP4 ? 1 : 2));
        vst1q_s8(v, vqtbl1q_s8(table, vandq_u8(qs, m4)));
        vst1q_s8(v + 16, vqtbl1q_s8(table, vshrq_n_u8(qs, 4)));
        return;
    }
    const int five = type == LY_Q5_0 || type == LY_Q5_1, qs_at = type == LY_Q4_0 ? 2 : type == LY_Q4_1 ? 4
                                                              : type == LY_Q5_0 ? 6 : 8;
    uint8x16_t qs = vld1q_u8(blk + qs_at), lo = vandq_u8(qs, m4), hi = vshrq_n_u8(qs, 4);
    if (five) { /* bit j of qh -> bit 4 of element j */
        uint32_t qh;
        memcpy(&qh, blk + qs_at - 4, 4);
        static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const uint8x16_t sel = vld1q_u8(bit), b4 = vdupq_n_u8(16);
        uint8x16_t h0 = vcombine_u8(vdup_n_u8((uint8_t)qh), vdup_n_u8((uint8_t)(qh >> 8)));
        uint8x16_t h1 = vcombine_u8(vdup_n_u8((uint8_t)(qh >> 16)), vdup_n_u8((uint8_t)(qh >> 24)));
        lo = vorrq_u8(lo, vandq_u8(vtstq_u8(h0, sel), b4));
        hi = vorrq_u8(hi, vandq_u8(vtstq_u8(h1, sel), b4));
    }
    const int offset = type == LY_Q4_0 ? 8 : type == LY_Q5_0 ? 16 : 0;
    vst1q_s8(v, vsubq_s8(vreinterpretq_s8_u8(lo), vdupq_n_s8((int8_t)offset)));
    vst1q_s8(v + 16, vsubq_s8(vreinterpretq_s8_u8(hi), vdupq_n_s8((int8_t)offset)));
}

/* Rows r .. r+3 (missing rows repeat the last one; their lanes are never stored) -> g */
A4_INLINE void unpack_group(q_fmt f, const ly_q32_fmt *geo, const uint8_t *w, size_t row_bytes, int64_t r,
                            int nrows, int64_t nb, group_buf *g) {
    for (int i = 0; i < 4; i++) {
        const uint8_t *row = w + (size_t)(r + (i < nrows ? i : nrows - 1)) * row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            int8_t *v = g->v + (b * 4 + i) * 32;
            if (f.type == LY_IQ4_XS) {
                const uint8_t *sb = row + b / 8 * geo->size;
                unpack_block(f.type, sb, (int)(b % 8), v);
                g->dw[b * 4 + i] = ly_iq4xs_scale(sb, (int)(b % 8));
                continue;
            }
            const uint8_t *blk = row + b * geo->size;
            unpack_block(f.type, blk, 0, v);
            g->dw[b * 4 + i] = f.type == LY_MXFP4 ? ly_e8m0_half(blk[0])
                                                  : ly_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
            if (f.has_min) g->mw[b * 4 + i] = ly_f16_to_f32((uint16_t)(blk[2] | blk[3] << 8));
        }
    }
}

/* acc + q32.h's step for block b of the 4 rows: lanes = rows */
A4_INLINE float32x4_t step(q_fmt f, const group_buf *g, int64_t b, int32x4_t isum, float dx, int32_t sx,
                           float32x4_t acc) {
    float32x4_t v = vmulq_f32(vmulq_n_f32(vld1q_f32(g->dw + b * 4), dx), vcvtq_f32_s32(isum));
    if (f.has_min)
        v = vaddq_f32(v, vmulq_f32(vmulq_n_f32(vld1q_f32(g->mw + b * 4), dx), vdupq_n_f32((float)sx)));
    return vaddq_f32(acc, v);
}

A4_INLINE void store(float *y, float32x4_t acc, int nrows) {
    float out[4];
    vst1q_f32(out, acc);
    memcpy(y, out, nrows * sizeof(float));
}

/* token t: y[t * ldy + r .. + nrows) */
A4_INLINE void kernel1(q_fmt f, const group_buf *g, const ly_act *a, int64_t nb, int64_t t, float *y, int nrows) {
    const int8_t *x = a->q + t * a->k;
    const float *dx = a->d + t * nb;
    const int32_t *s16 = a->s16 + t * nb * 2;
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++)
        acc = step(f, g, b, a4_block(g->v + b * 128, 32, x + b * 32), dx[b], s16[2 * b] + s16[2 * b + 1], acc);
    store(y, acc, nrows);
}

#if A4_DOT == 2
/* tokens t, t + 1 (the integer dots of both by smmla; each token's float steps as kernel1's) */
A4_INLINE void kernel2(q_fmt f, const group_buf *g, const ly_act *a, int64_t nb, int64_t t, float *y,
                       int64_t ldy, int nrows) {
    const int8_t *x0 = a->q + t * a->k, *x1 = x0 + a->k;
    const float *dx0 = a->d + t * nb, *dx1 = dx0 + nb;
    const int32_t *s0 = a->s16 + t * nb * 2, *s1 = s0 + nb * 2;
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        int32x4_t i0, i1;
        a4_block2(g->v + b * 128, 32, x0 + b * 32, x1 + b * 32, &i0, &i1);
        acc0 = step(f, g, b, i0, dx0[b], s0[2 * b] + s0[2 * b + 1], acc0);
        acc1 = step(f, g, b, i1, dx1[b], s1[2 * b] + s1[2 * b + 1], acc1);
    }
    store(y, acc0, nrows);
    store(y + ldy, acc1, nrows);
}
#endif

A4_INLINE void tile(q_fmt f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    int64_t nb = a->k / 32;
    const ly_q32_fmt *geo = ly_q32_format(f.type);
    group_buf g = {malloc(nb * 128), malloc(nb * 8 * sizeof(float)), NULL};
    g.mw = g.dw + nb * 4;
    for (int64_t r = r0; r < r1; r += 4) {
        int nrows = r1 - r < 4 ? (int)(r1 - r) : 4;
        unpack_group(f, geo, w, row_bytes, r, nrows, nb, &g);
        int64_t t = t0;
#if A4_DOT == 2
        for (; t + 2 <= t1; t += 2) kernel2(f, &g, a, nb, t, y + t * ldy + r, ldy, nrows);
#endif
        for (; t < t1; t++) kernel1(f, &g, a, nb, t, y + t * ldy + r, nrows);
    }
    free(g.v);
    free(g.dw);
}

/* One entry per type: the format's constants are literals in each. */
#define A4_TILE(name, ...)                                                                                  \
    A4_TARGET static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,         \
                               int64_t t0, int64_t t1, float *y, int64_t ldy) {                              \
        tile((q_fmt){__VA_ARGS__}, w, rb, r0, r1, a, t0, t1, y, ldy);                                       \
    }
A4_TILE(q4_0, LY_Q4_0, 0)
A4_TILE(q4_1, LY_Q4_1, 1)
A4_TILE(q5_0, LY_Q5_0, 0)
A4_TILE(q5_1, LY_Q5_1, 1)
A4_TILE(q8_0, LY_Q8_0, 0)
A4_TILE(iq4_nl, LY_IQ4_NL, 0)
A4_TILE(iq4_xs, LY_IQ4_XS, 0)
A4_TILE(mxfp4, LY_MXFP4, 0)

ly_tile_fn A4_ENTRY(int type) {
    switch (type) {
    case LY_Q4_0: return q4_0;
    case LY_Q4_1: return q4_1;
    case LY_Q5_0: return q5_0;
    case LY_Q5_1: return q5_1;
    case LY_Q8_0: return q8_0;
    case LY_IQ4_NL: return iq4_nl;
    case LY_IQ4_XS: return iq4_xs;
    case LY_MXFP4: return mxfp4;
    default: return NULL;
    }
}
