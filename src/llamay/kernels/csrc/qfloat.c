/* Tiles for float weights F32, F16, BF16 against the float input a->x.
 *
 * Canonical sequence per (token, row): 8 lane accumulators starting at 0.0f, lane j takes the elements
 * i with i % 8 == j in increasing i, l[j] = l[j] + w[i] * x[i] (multiply, then add); then
 * y = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). Weights convert to float exactly. */
#include "q32.h"
#include <immintrin.h>
#include <stdlib.h>

static float reduce8(const float l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static void row_to_f32(int type, const uint8_t *row, int64_t k, float *out) {
    for (int64_t i = 0; i < k; i++) {
        uint16_t h;
        memcpy(&h, row + 2 * i, 2);
        out[i] = type == LY_F16 ? ly_f16_to_f32(h) : ly_bf16_to_f32(h);
    }
}

static void tile_portable(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                          const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy) {
    int64_t k = a->k;
    float *buf = type == LY_F32 ? NULL : malloc(k * sizeof(float));
    for (int64_t r = r0; r < r1; r++) {
        const float *wr = (const float *)(w + r * row_bytes);
        if (buf) { row_to_f32(type, w + r * row_bytes, k, buf); wr = buf; }
        for (int64_t t = t0; t < t1; t++) {
            const float *x = a->x + t * k;
            float l[8] = {0};
            for (int64_t i = 0; i < k; i++) l[i & 7] = l[i & 7] + wr[i] * x[i];
            y[t * ldy + r] = reduce8(l);
        }
    }
    free(buf);
}

LY_AVX2 static void row_to_f32_avx2(int type, const uint8_t *row, int64_t k, float *out) {
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(row + 2 * i));
        __m256 f = type == LY_F16 ? _mm256_cvtph_ps(h)
                                  : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        _mm256_storeu_ps(out + i, f);
    }
    row_to_f32(type, row + 2 * i, k - i, out + i);
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
        y[(t + u) * ldy] = reduce8(l);
    }
}

LY_AVX2 static void tile_avx2(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
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

#define TILES(NAME, TYPE)                                                                                   \
    static void NAME##_portable(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,        \
                                int64_t t0, int64_t t1, float *y, int64_t ldy) {                             \
        tile_portable(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                              \
    }                                                                                                        \
    static void NAME##_avx2(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,            \
                            int64_t t0, int64_t t1, float *y, int64_t ldy) {                                 \
        tile_avx2(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                                  \
    }
TILES(f32, LY_F32)
TILES(f16, LY_F16)
TILES(bf16, LY_BF16)

ly_tile_fn ly_tile_float(int type) {
    switch (type) {
    case LY_F32: return ly_avx2 ? f32_avx2 : f32_portable;
    case LY_F16: return ly_avx2 ? f16_avx2 : f16_portable;
    case LY_BF16: return ly_avx2 ? bf16_avx2 : bf16_portable;
    default: return NULL;
    }
}
