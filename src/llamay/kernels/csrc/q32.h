/* Internal interface of the 32-block format kernels (q32.c portable, q32_avx2.c, q32_avxvnni.c, q32_avx512.c)
 * and the float ones (qfloat*.c).
 *
 * Canonical float sequence per (token t, row r), blocks b in index order, acc starting at 0.0f; dw, mw are
 * the block's f16 scale and min as float, dx the activation block scale, isum the exact int32 dot of the
 * block's integer weight values with q, sx = s16[2b] + s16[2b+1]:
 *   Q4_0, Q5_0, Q8_0 (weight = dw * v, v signed):   acc = acc + (dw * dx) * (float)isum
 *   Q4_1, Q5_1       (weight = dw * u + mw, u >= 0):
 *                    acc = acc + ((dw * dx) * (float)isum + (mw * dx) * (float)sx)
 * Integer values: Q4_0 v = nibble - 8; Q5_0 v = (nibble | hbit << 4) - 16; Q8_0 v = int8; Q4_1 u = nibble;
 * Q5_1 u = nibble | hbit << 4. Element j < 16 of a 4/5-bit block is the low nibble of qs[j], element j + 16
 * the high nibble; hbit of element j is bit j of the little-endian uint32 qh.
 * Lookup formats (signed v = table[nibble], nibbles laid out as Q4_0's), acc as Q4_0's:
 *   IQ4_NL: d f16 | qs[16]; dw = d.   MXFP4: e u8 | qs[16]; dw = 2^(e - 128) (ggml's e8m0 "half"; e < 2:
 *   the denormals 2^-127, 2^-126 halved), table = the e2m1 values doubled.
 *   IQ4_XS, 256-element superblocks of 8 such 32-blocks: d f16 | scales_h u16 | scales_l[4] | qs[128];
 *   block ib's 6-bit scale ls = nibble ib % 2 of scales_l[ib / 2] | bits 2 ib, 2 ib + 1 of scales_h << 4,
 *   dw = d * (float)(ls - 32) (exact in float), its qs at 8 + 16 ib, table = IQ4_NL's.
 * Ternary formats, 256-element superblocks, v in {-1, 0, 1}, dw = d for each of the 8 32-blocks (portable only):
 *   TQ2_0: qs[64] | d f16; element 128 g + 32 l + m = bits 2l, 2l + 1 of qs[32 g + m], minus 1.
 *   TQ1_0: qs[48] | qh[4] | d f16; a byte holds 5 (qh: 4) trits, the i-th = ((uint8)(byte * 3^i) * 3) >> 8;
 *   elements 32 i + m from qs[m] (m < 32), 160 + 16 i + m from qs[32 + m], 240 + 4 i + m from qh[m]; minus 1. */
#ifndef LLAMAY_Q32_H
#define LLAMAY_Q32_H
#include "matmul.h"
#include <string.h>

enum { LY_F32 = 0, LY_F16 = 1, LY_Q4_0 = 2, LY_Q4_1 = 3, LY_Q5_0 = 6, LY_Q5_1 = 7, LY_Q8_0 = 8, LY_IQ4_NL = 20,
       LY_IQ4_XS = 23, LY_BF16 = 30, LY_TQ1_0 = 34, LY_TQ2_0 = 35, LY_MXFP4 = 39 };

static const int8_t LY_KV_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t LY_KV_MXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* MXFP4's block scale: 2^(e - 128) as ggml's e8m0-to-float "half" (bit patterns, no rounding). */
static inline float ly_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* IQ4_XS: 32-block ib (0..7) of a superblock at sb: its 6-bit scale minus 32, and that scale times d. */
static inline int ly_iq4xs_ls(const uint8_t *sb, int ib) {
    return (((sb[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((sb[2] | sb[3] << 8) >> (2 * ib)) & 3) << 4) - 32;
}

static inline float ly_iq4xs_scale(const uint8_t *sb, int ib) {
    return ly_f16_to_f32((uint16_t)(sb[0] | sb[1] << 8)) * (float)ly_iq4xs_ls(sb, ib);
}

/* Block geometry: bytes per block, offset of qh (or -1), offset of qs, whether a min follows d. */
typedef struct { int type, size, qh, qs, has_min, offset; } ly_q32_fmt;

/* NULL for a type that is not a 32-block integer format. */
const ly_q32_fmt *ly_q32_format(int type);

/* F16 or BF16 row -> float (exact), the portable conversion (qfloat.c, and the ISA tiles' tails) */
static inline void ly_half_row_to_f32(int type, const uint8_t *row, int64_t k, float *out) {
    for (int64_t i = 0; i < k; i++) {
        uint16_t h;
        memcpy(&h, row + 2 * i, 2);
        out[i] = type == LY_F16 ? ly_f16_to_f32(h) : ly_bf16_to_f32(h);
    }
}

/* qfloat_avx2.c's tile for F32, F16 or BF16 (type), which qfloat_avx512.c runs for few tokens */
void ly_float_tile_avx2(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                        int64_t t0, int64_t t1, float *y, int64_t ldy);
#endif
