/* exp for the gated activations, one float operation sequence in scalar and AVX2 form (bit-identical;
 * libm's expf/tanhf have no vector form that is guaranteed to agree with them).
 * exp(x) = 2^n * P(r), n = rint(x * log2 e), r = x - n * ln2 (two-part ln2), P: Cephes expf polynomial
 * (relative error ~1e-7 on the reduced range). x is clamped to [-87.3, 88.3]. */
#ifndef LLAMAY_MATHFN_H
#define LLAMAY_MATHFN_H
#include "common.h"
#include <immintrin.h>

#define LY_EXP_HI 88.3762626647949f
#define LY_EXP_LO -87.3365478515625f
#define LY_LOG2E 1.44269504088896341f
#define LY_LN2_A 0.693359375f
#define LY_LN2_B -2.12194440e-4f
static const float ly_exp_c[6] = {1.9875691500E-4f, 1.3981999507E-3f, 8.3334519073E-3f,
                                  4.1665795894E-2f, 1.6666665459E-1f, 5.0000001201E-1f};

static inline float ly_exp(float x) {
    x = x > LY_EXP_HI ? LY_EXP_HI : x < LY_EXP_LO ? LY_EXP_LO : x;
    float n = nearbyintf(x * LY_LOG2E);
    float r = (x - n * LY_LN2_A) - n * LY_LN2_B;
    float y = ly_exp_c[0];
    for (int i = 1; i < 6; i++) y = y * r + ly_exp_c[i];
    y = ((y * (r * r)) + r) + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return y * scale;
}

LY_AVX2 static inline __m256 ly_exp_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(LY_EXP_LO)), _mm256_set1_ps(LY_EXP_HI));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LY_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(LY_LN2_A))),
                             _mm256_mul_ps(n, _mm256_set1_ps(LY_LN2_B)));
    __m256 y = _mm256_set1_ps(ly_exp_c[0]);
    for (int i = 1; i < 6; i++) y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(ly_exp_c[i]));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}
#endif
