/* The AVX2 tiles for F32, F16, BF16 weights: qfloat.c's sequence, the vector lane j being accumulator l[j]. */
#include "common.h"
#if LY_X86
#include "kernels.h"
#include "lanes.h"
#include "q32.h"
#include "x86.h"
#include <stdlib.h>

LY_AVX2 static void row_to_f32_avx2(int type, const uint8_t *row, int64_t k, float *out) {
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * i));
        __m256 f = type == LY_F16 ? _mm256_cvtph_ps(h)
                                  : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        _mm256_storeu_ps(out + i, f);
    }
    ly_half_row_to_f32(type, row + 2 * i, k - i, out + i);
}

/* NT tokens from t against one float row; the vector lane j is accumulator l[j]. */
LY_AVX2 static inline __attribute__((always_inline))
void dots(const float *wr, const ly_act *a, int64_t t, int NT, float *y, int64_t ldy) {
    int64_t k = a->k, i = 0;
    __m256 acc[4];
    for (int u = 0; u < NT; u++) acc[u] = _mm256_setzero_ps();
    for (; i + 8 <= k; i += 8) {
        __m256 wv = _mm256_loadu_ps(wr + i);
        for (int u = 0; u < NT; u++)
            acc[u] = _mm256_add_ps(acc[u], _mm256_mul_ps(wv, _mm256_loadu_ps(a->x + (t + u) * k + i)));
    }
    for (int u = 0; u < NT; u++) {
        float l[8];
        const float *x = a->x + (t + u) * k;
        _mm256_storeu_ps(l, acc[u]);
        for (int64_t j = i; j < k; j++) l[j & 7] = l[j & 7] + wr[j] * x[j];
        y[(t + u) * ldy] = ly_lanes_reduce(l);
    }
}

LY_AVX2 void ly_float_tile_avx2(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                                const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy) {
    float *buf = type == LY_F32 ? NULL : malloc(a->k * sizeof(float));
    for (int64_t r = r0; r < r1; r++) {
        const float *wr = (const float *)(w + r * row_bytes);
        if (buf) { row_to_f32_avx2(type, w + r * row_bytes, a->k, buf); wr = buf; }
        int64_t t = t0;
        for (; t + 4 <= t1; t += 4) dots(wr, a, t, 4, y + r, ldy);
        for (; t < t1; t++) dots(wr, a, t, 1, y + r, ldy);
    }
    free(buf);
}

#define TILE_AVX2(NAME, TYPE)                                                                      \
    LY_AVX2 static void NAME(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a, \
                         int64_t t0, int64_t t1, float *y, int64_t ldy) {                          \
        ly_float_tile_avx2(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                \
    }
TILE_AVX2(f32, LY_F32)
TILE_AVX2(f16, LY_F16)
TILE_AVX2(bf16, LY_BF16)

ly_tile_fn ly_tiles_float_avx2(int type) {
    return type == LY_F32 ? f32 : type == LY_F16 ? f16 : type == LY_BF16 ? bf16 : NULL;
}
#endif
