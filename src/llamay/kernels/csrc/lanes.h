/* The canonical float reduction: 8 lane accumulators (lane j sums the terms i with i % 8 == j, in index
 * order, multiply then add), then the fixed tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
 * The portable functions spell the lanes out; the AVX2 ones hold them in one register. Equal bit for bit. */
#ifndef LLAMAY_LANES_H
#define LLAMAY_LANES_H
#include "common.h"
#include <immintrin.h>

static inline float ly_lanes_reduce(const float l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

LY_AVX2 static inline float ly_lanes_reduce_avx2(__m256 acc) {
    float l[8];
    _mm256_storeu_ps(l, acc);
    return ly_lanes_reduce(l);
}

static inline float ly_sumsq_portable(const float *x, int64_t d) {
    float l[8] = {0};
    for (int64_t i = 0; i < d; i++) l[i & 7] = l[i & 7] + x[i] * x[i];
    return ly_lanes_reduce(l);
}

LY_AVX2 static inline float ly_sumsq_avx2(const float *x, int64_t d) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_add_ps(acc, _mm256_mul_ps(v, v));
    }
    float l[8];
    _mm256_storeu_ps(l, acc);
    for (; i < d; i++) l[i & 7] = l[i & 7] + x[i] * x[i];
    return ly_lanes_reduce(l);
}

static inline float ly_sum_portable(const float *x, int64_t d) {
    float l[8] = {0};
    for (int64_t i = 0; i < d; i++) l[i & 7] = l[i & 7] + x[i];
    return ly_lanes_reduce(l);
}

LY_AVX2 static inline float ly_sum_avx2(const float *x, int64_t d) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
    float l[8];
    _mm256_storeu_ps(l, acc);
    for (; i < d; i++) l[i & 7] = l[i & 7] + x[i];
    return ly_lanes_reduce(l);
}

static inline float ly_dot_f32_portable(const float *a, const float *b, int64_t d) {
    float l[8] = {0};
    for (int64_t i = 0; i < d; i++) l[i & 7] = l[i & 7] + a[i] * b[i];
    return ly_lanes_reduce(l);
}

LY_AVX2 static inline float ly_dot_f32_avx2(const float *a, const float *b, int64_t d) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    float l[8];
    _mm256_storeu_ps(l, acc);
    for (; i < d; i++) l[i & 7] = l[i & 7] + a[i] * b[i];
    return ly_lanes_reduce(l);
}

/* dot of float a with f16 b (K cache rows) */
static inline float ly_dot_f16_portable(const float *a, const uint16_t *b, int64_t d) {
    float l[8] = {0};
    for (int64_t i = 0; i < d; i++) l[i & 7] = l[i & 7] + a[i] * ly_f16_to_f32(b[i]);
    return ly_lanes_reduce(l);
}

LY_AVX2 static inline float ly_dot_f16_avx2(const float *a, const uint16_t *b, int64_t d) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        __m256 vb = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), vb));
    }
    float l[8];
    _mm256_storeu_ps(l, acc);
    for (; i < d; i++) l[i & 7] = l[i & 7] + a[i] * ly_f16_to_f32(b[i]);
    return ly_lanes_reduce(l);
}
#endif
