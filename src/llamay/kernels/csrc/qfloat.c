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

/* AVX-512: two rows per register, row A in the low 8 lanes and row B in the high 8, each half the AVX2
 * accumulator of its row; the pair is converted once into [k / 8][A 8 | B 8] floats for all tokens. */
LY_AVX512 static void pair_to_f32(int type, const uint8_t *ra, const uint8_t *rb, int64_t k8, float *out) {
    for (int64_t s = 0; s < k8; s++) {
        __m512 v;
        if (type == LY_F32) {
            __m512d lo = _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps((const float *)ra + 8 * s)));
            v = _mm512_castpd_ps(_mm512_insertf64x4(lo, _mm256_castps_pd(_mm256_loadu_ps((const float *)rb + 8 * s)), 1));
        } else {
            __m256i h = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(rb + 16 * s)),
                                         _mm_loadu_si128((const __m128i *)(ra + 16 * s)));
            v = type == LY_F16 ? _mm512_cvtph_ps(h)
                               : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        }
        _mm512_storeu_ps(out + 16 * s, v);
    }
}

LY_AVX512 static inline __attribute__((always_inline))
void dots_pair(const float *pair, const float *wa, const float *wb, const ly_act *a, int64_t t, int NT, float *y,
               int64_t ldy) {
    const int64_t k = a->k, k8 = k / 8;
    __m512 acc[4];
    for (int u = 0; u < NT; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t s = 0; s < k8; s++) {
        __m512 wv = _mm512_loadu_ps(pair + 16 * s);
        for (int u = 0; u < NT; u++) {
            __m512 xv = _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(a->x + (t + u) * k + 8 * s))));
            acc[u] = _mm512_add_ps(acc[u], _mm512_mul_ps(wv, xv));
        }
    }
    for (int u = 0; u < NT; u++) {
        float l[16];
        const float *x = a->x + (t + u) * k;
        _mm512_storeu_ps(l, acc[u]);
        for (int64_t j = 8 * k8; j < k; j++) {
            l[j & 7] = l[j & 7] + wa[j] * x[j];
            l[8 + (j & 7)] = l[8 + (j & 7)] + wb[j] * x[j];
        }
        y[(t + u) * ldy] = reduce8(l);
        y[(t + u) * ldy + 1] = reduce8(l + 8);
    }
}

LY_AVX512 static void tile_avx512(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                                  const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t k = a->k;
    if (t1 - t0 < 4) { /* few tokens: the pair conversion would cost a memory pass the AVX2 tile avoids */
        tile_avx2(type, w, row_bytes, r0, r1, a, t0, t1, y, ldy);
        return;
    }
    float *pair = aligned_alloc(64, ((size_t)k / 8 * 16 + 16) * sizeof(float)), *wa = malloc(2 * k * sizeof(float));
    float *wb = wa + k;
    int64_t r = r0;
    for (; r + 2 <= r1; r += 2) {
        const uint8_t *ra = w + r * row_bytes, *rb = ra + row_bytes;
        pair_to_f32(type, ra, rb, k / 8, pair);
        if (k % 8) { /* the tails, in float, for the scalar steps after the vector part */
            for (int64_t j = k / 8 * 8; j < k; j++) {
                uint16_t ha, hb;
                if (type == LY_F32) { wa[j] = ((const float *)ra)[j]; wb[j] = ((const float *)rb)[j]; continue; }
                memcpy(&ha, ra + 2 * j, 2);
                memcpy(&hb, rb + 2 * j, 2);
                wa[j] = type == LY_F16 ? ly_f16_to_f32(ha) : ly_bf16_to_f32(ha);
                wb[j] = type == LY_F16 ? ly_f16_to_f32(hb) : ly_bf16_to_f32(hb);
            }
        }
        int64_t t = t0;
        for (; t + 4 <= t1; t += 4) dots_pair(pair, wa, wb, a, t, 4, y + r, ldy);
        for (; t < t1; t++) dots_pair(pair, wa, wb, a, t, 1, y + r, ldy);
    }
    free(pair);
    free(wa);
    if (r < r1) tile_avx2(type, w, row_bytes, r, r1, a, t0, t1, y, ldy); /* an odd last row */
}

#define TILES(NAME, TYPE)                                                                                   \
    static void NAME##_portable(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,        \
                                int64_t t0, int64_t t1, float *y, int64_t ldy) {                             \
        tile_portable(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                              \
    }                                                                                                        \
    static void NAME##_avx2(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,            \
                            int64_t t0, int64_t t1, float *y, int64_t ldy) {                                 \
        tile_avx2(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                                  \
    }                                                                                                        \
    static void NAME##_avx512(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,          \
                              int64_t t0, int64_t t1, float *y, int64_t ldy) {                               \
        tile_avx512(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                                \
    }
TILES(f32, LY_F32)
TILES(f16, LY_F16)
TILES(bf16, LY_BF16)

ly_tile_fn ly_tile_float(int type) {
    switch (type) {
    case LY_F32: return ly_avx512 ? f32_avx512 : ly_avx2 ? f32_avx2 : f32_portable;
    case LY_F16: return ly_avx512 ? f16_avx512 : ly_avx2 ? f16_avx2 : f16_portable;
    case LY_BF16: return ly_avx512 ? bf16_avx512 : ly_avx2 ? bf16_avx2 : bf16_portable;
    default: return NULL;
    }
}
