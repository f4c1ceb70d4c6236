/* Tiles for the 32-block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, the lookup formats IQ4_NL, IQ4_XS, MXFP4 and
 * the ternary TQ1_0, TQ2_0: the portable path. The canonical formulas are in q32.h; the ISA tiles
 * (q32_avx2.c, q32_avxvnni.c, q32_avx512.c) and reference.py follow them exactly. */
#include "kernels.h"
#include "q32.h"
#include <stdlib.h>

static const ly_q32_fmt FORMATS[] = {
    {LY_Q4_0, 18, -1, 2, 0, 8}, {LY_Q4_1, 20, -1, 4, 1, 0}, {LY_Q5_0, 22, 2, 6, 0, 16},
    {LY_Q5_1, 24, 4, 8, 1, 0}, {LY_Q8_0, 34, -1, 2, 0, 0}, {LY_IQ4_NL, 18, -1, 2, 0, 0},
    {LY_MXFP4, 17, -1, 1, 0, 0}, {LY_IQ4_XS, 136, -1, 8, 0, 0}, /* IQ4_XS, TQ*: per superblock of 8 blocks */
    {LY_TQ1_0, 54, -1, 0, 0, 0}, {LY_TQ2_0, 66, -1, 0, 0, 0},
};

/* A ternary superblock -> its 256 values (q32.h). */
static void decode_ternary(int type, const uint8_t *sb, int32_t v[256]) {
    if (type == LY_TQ2_0) {
        for (int g = 0; g < 2; g++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) v[128 * g + 32 * l + m] = ((sb[32 * g + m] >> (2 * l)) & 3) - 1;
        return;
    }
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    for (int i = 0; i < 5; i++) {
        for (int m = 0; m < 32; m++) v[32 * i + m] = (((uint8_t)(sb[m] * pow3[i]) * 3) >> 8) - 1;
        for (int m = 0; m < 16; m++) v[160 + 16 * i + m] = (((uint8_t)(sb[32 + m] * pow3[i]) * 3) >> 8) - 1;
    }
    for (int i = 0; i < 4; i++)
        for (int m = 0; m < 4; m++) v[240 + 4 * i + m] = (((uint8_t)(sb[48 + m] * pow3[i]) * 3) >> 8) - 1;
}

const ly_q32_fmt *ly_q32_format(int type) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (FORMATS[i].type == type) return &FORMATS[i];
    return NULL;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* One block -> its 32 integer weight values (signed v, or unsigned u for formats with a min). */
static void decode_block(const ly_q32_fmt *f, const uint8_t *blk, int32_t v[32]) {
    if (f->type == LY_Q8_0) {
        for (int j = 0; j < 32; j++) v[j] = (int8_t)blk[2 + j];
        return;
    }
    if (f->type == LY_IQ4_NL || f->type == LY_MXFP4 || f->type == LY_IQ4_XS) { /* blk: the block's qs */
        const int8_t *kv = f->type == LY_MXFP4 ? LY_KV_MXFP4 : LY_KV_IQ4NL;
        for (int j = 0; j < 16; j++) {
            v[j] = kv[blk[j] & 15];
            v[j + 16] = kv[blk[j] >> 4];
        }
        return;
    }
    uint32_t qh = 0;
    if (f->qh >= 0) memcpy(&qh, blk + f->qh, 4); /* little-endian host */
    for (int j = 0; j < 16; j++) {
        uint8_t b = blk[f->qs + j];
        v[j] = (int32_t)((b & 15) | ((qh >> j) & 1) << 4) - f->offset;
        v[j + 16] = (int32_t)((b >> 4) | ((qh >> (j + 16)) & 1) << 4) - f->offset;
    }
}

/* Weight row -> integer values [k] and float scales dw, mw [k / 32]. */
static void decode_row(const ly_q32_fmt *f, const uint8_t *row, int64_t nb, int32_t *v, float *dw, float *mw) {
    for (int64_t b = 0; b < nb; b++) {
        mw[b] = 0.0f;
        if (f->type == LY_TQ1_0 || f->type == LY_TQ2_0) {
            const uint8_t *sb = row + b / 8 * f->size;
            if (b % 8 == 0) decode_ternary(f->type, sb, v + b * 32);
            dw[b] = ly_f16_to_f32(rd16(sb + f->size - 2));
            continue;
        }
        if (f->type == LY_IQ4_XS) {
            const uint8_t *sb = row + b / 8 * f->size;
            decode_block(f, sb + f->qs + 16 * (b % 8), v + b * 32);
            dw[b] = ly_iq4xs_scale(sb, (int)(b % 8));
            continue;
        }
        const uint8_t *blk = row + b * f->size;
        int lut = f->type == LY_IQ4_NL || f->type == LY_MXFP4;
        decode_block(f, lut ? blk + f->qs : blk, v + b * 32);
        dw[b] = f->type == LY_MXFP4 ? ly_e8m0_half(blk[0]) : ly_f16_to_f32(rd16(blk));
        if (f->has_min) mw[b] = ly_f16_to_f32(rd16(blk + 2));
    }
}

static float dot_row(const ly_q32_fmt *f, const int32_t *v, const float *dw, const float *mw,
                     const ly_act *a, int64_t t, int64_t nb) {
    const int8_t *q = a->q + t * a->k;
    const float *dx = a->d + t * nb;
    const int32_t *s16 = a->s16 + t * nb * 2;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        int32_t isum = 0;
        for (int j = 0; j < 32; j++) isum += v[b * 32 + j] * q[b * 32 + j];
        if (f->has_min)
            acc = acc + ((dw[b] * dx[b]) * (float)isum
                         + (mw[b] * dx[b]) * (float)(s16[2 * b] + s16[2 * b + 1]));
        else
            acc = acc + (dw[b] * dx[b]) * (float)isum;
    }
    return acc;
}

static void tile_portable(const ly_q32_fmt *f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                          const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy) {
    int64_t nb = a->k / 32;
    int32_t *v = malloc(nb * 32 * sizeof *v);
    float *dw = malloc(nb * 2 * sizeof *dw), *mw = dw + nb;
    for (int64_t r = r0; r < r1; r++) {
        decode_row(f, w + r * row_bytes, nb, v, dw, mw);
        for (int64_t t = t0; t < t1; t++) y[t * ldy + r] = dot_row(f, v, dw, mw, a, t, nb);
    }
    free(v);
    free(dw);
}

#define TILE_PORTABLE(NAME, TYPE)                                                                           \
    static void NAME##_portable(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,        \
                                int64_t t0, int64_t t1, float *y, int64_t ldy) {                             \
        tile_portable(ly_q32_format(TYPE), w, rb, r0, r1, a, t0, t1, y, ldy);                               \
    }
TILE_PORTABLE(q4_0, LY_Q4_0)
TILE_PORTABLE(q4_1, LY_Q4_1)
TILE_PORTABLE(q5_0, LY_Q5_0)
TILE_PORTABLE(q5_1, LY_Q5_1)
TILE_PORTABLE(q8_0, LY_Q8_0)
TILE_PORTABLE(iq4_nl, LY_IQ4_NL)
TILE_PORTABLE(iq4_xs, LY_IQ4_XS)
TILE_PORTABLE(mxfp4, LY_MXFP4)
TILE_PORTABLE(tq1_0, LY_TQ1_0)
TILE_PORTABLE(tq2_0, LY_TQ2_0)

ly_tile_fn ly_tiles_q32_portable(int type) {
    switch (type) {
    case LY_Q4_0: return q4_0_portable;
    case LY_Q4_1: return q4_1_portable;
    case LY_Q5_0: return q5_0_portable;
    case LY_Q5_1: return q5_1_portable;
    case LY_Q8_0: return q8_0_portable;
    case LY_IQ4_NL: return iq4_nl_portable;
    case LY_IQ4_XS: return iq4_xs_portable;
    case LY_MXFP4: return mxfp4_portable;
    case LY_TQ1_0: return tq1_0_portable; /* every path: no SIMD tile */
    case LY_TQ2_0: return tq2_0_portable;
    default: return NULL;
    }
}
