/* Tiles for float weights F32, F16, BF16 against the float input a->x.
 *
 * Canonical sequence per (token, row): 8 lane accumulators starting at 0.0f, lane j takes the elements
 * i with i % 8 == j in increasing i, l[j] = l[j] + w[i] * x[i] (multiply, then add); then
 * y = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) (lanes.h). Weights convert to float exactly.
 * The portable tiles; the AVX2 and AVX-512 ones are in qfloat_avx2.c, qfloat_avx512.c. */
#include "kernels.h"
#include "lanes.h"
#include "q32.h"
#include <stdlib.h>

static void tile_portable(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                          const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy) {
    int64_t k = a->k;
    float *buf = type == LY_F32 ? NULL : malloc(k * sizeof(float));
    for (int64_t r = r0; r < r1; r++) {
        const float *wr = (const float *)(w + r * row_bytes);
        if (buf) { ly_half_row_to_f32(type, w + r * row_bytes, k, buf); wr = buf; }
        for (int64_t t = t0; t < t1; t++) {
            const float *x = a->x + t * k;
            float l[8] = {0};
            for (int64_t i = 0; i < k; i++) l[i & 7] = l[i & 7] + wr[i] * x[i];
            y[t * ldy + r] = ly_lanes_reduce(l);
        }
    }
    free(buf);
}

#define TILE_PORTABLE(NAME, TYPE)                                                                           \
    static void NAME(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a, int64_t t0,       \
                     int64_t t1, float *y, int64_t ldy) {                                                    \
        tile_portable(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                              \
    }
TILE_PORTABLE(f32, LY_F32)
TILE_PORTABLE(f16, LY_F16)
TILE_PORTABLE(bf16, LY_BF16)

ly_tile_fn ly_tiles_float_portable(int type) {
    return type == LY_F32 ? f32 : type == LY_F16 ? f16 : type == LY_BF16 ? bf16 : NULL;
}
