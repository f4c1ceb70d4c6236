/* The AVX-512 tiles for F32, F16, BF16 weights (qfloat.c's sequence): two rows per register, row A in the
 * low 8 lanes and row B in the high 8, each half the AVX2 accumulator of its row; the pair is converted
 * once into [k / 8][A 8 | B 8] floats for all tokens. Few tokens and an odd last row: qfloat_avx2.c. */
#include "common.h"
#if LY_X86
#include "kernels.h"
#include "lanes.h"
#include "q32.h"
#include "x86.h"
#include <stdlib.h>

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
        y[(t + u) * ldy] = ly_lanes_reduce(l);
        y[(t + u) * ldy + 1] = ly_lanes_reduce(l + 8);
    }
}

LY_AVX512 static void tile_avx512(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                                  const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t k = a->k;
    if (t1 - t0 < 4) { /* few tokens: the pair conversion would cost a memory pass the AVX2 tile avoids */
        ly_float_tile_avx2(type, w, row_bytes, r0, r1, a, t0, t1, y, ldy);
        return;
    }
    float *pair = ly_aligned_alloc(64, ((size_t)k / 8 * 16 + 16) * sizeof(float)), *wa = malloc(2 * k * sizeof(float));
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
    ly_aligned_free(pair);
    free(wa);
    if (r < r1) ly_float_tile_avx2(type, w, row_bytes, r, r1, a, t0, t1, y, ldy); /* an odd last row */
}

#define TILE_AVX512(NAME, TYPE)                                                                      \
    LY_AVX512 static void NAME(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a, \
                         int64_t t0, int64_t t1, float *y, int64_t ldy) {                            \
        tile_avx512(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                         \
    }
TILE_AVX512(f32, LY_F32)
TILE_AVX512(f16, LY_F16)
TILE_AVX512(bf16, LY_BF16)

ly_tile_fn ly_tiles_float_avx512(int type) {
    return type == LY_F32 ? f32 : type == LY_F16 ? f16 : type == LY_BF16 ? bf16 : NULL;
}
#endif
