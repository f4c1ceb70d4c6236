/* Internal interface of the 32-block format kernels (q32.c portable, q32_avx2.c, qfloat.c).
 *
 * Canonical float sequence per (token t, row r), blocks b in index order, acc starting at 0.0f; dw, mw are
 * the block's f16 scale and min as float, dx the activation block scale, isum the exact int32 dot of the
 * block's integer weight values with q, sx = s16[2b] + s16[2b+1]:
 *   Q4_0, Q5_0, Q8_0 (weight = dw * v, v signed):   acc = acc + (dw * dx) * (float)isum
 *   Q4_1, Q5_1       (weight = dw * u + mw, u >= 0):
 *                    acc = acc + ((dw * dx) * (float)isum + (mw * dx) * (float)sx)
 * Integer values: Q4_0 v = nibble - 8; Q5_0 v = (nibble | hbit << 4) - 16; Q8_0 v = int8; Q4_1 u = nibble;
 * Q5_1 u = nibble | hbit << 4. Element j < 16 of a 4/5-bit block is the low nibble of qs[j], element j + 16
 * the high nibble; hbit of element j is bit j of the little-endian uint32 qh. */
#ifndef LLAMAY_Q32_H
#define LLAMAY_Q32_H
#include "matmul.h"

enum { LY_F32 = 0, LY_F16 = 1, LY_Q4_0 = 2, LY_Q4_1 = 3, LY_Q5_0 = 6, LY_Q5_1 = 7, LY_Q8_0 = 8, LY_BF16 = 30 };

/* Block geometry: bytes per block, offset of qh (or -1), offset of qs, whether a min follows d. */
typedef struct { int type, size, qh, qs, has_min, offset; } ly_q32_fmt;

/* NULL for a type that is not a 32-block integer format. */
const ly_q32_fmt *ly_q32_format(int type);

void ly_tile_q32_avx2(const ly_q32_fmt *f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                      const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy);

void ly_tile_q32_avxvnni(const ly_q32_fmt *f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                         const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy);

void ly_tile_q32_avx512(const ly_q32_fmt *f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                        const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy);

ly_tile_fn ly_tile_float(int type); /* F32, F16, BF16 in the current path (qfloat.c) */
#endif
