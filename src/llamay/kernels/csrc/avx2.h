/* AVX2 forms of the portable helpers of lanes.h and mathfn.h, equal bit for bit. x86 ISA units only. */
#ifndef LLAMAY_AVX2_H
#define LLAMAY_AVX2_H
#include "x86.h"
#include "lanes.h"
#include "mathfn.h"

/* ly_lanes_reduce of the 8 lanes of acc, in registers (a store and eight scalar loads stalled on
 * store-to-load forwarding): halves give l_i + l_{i+4}, then (l0+l4) + (l2+l6) and (l1+l5) + (l3+l7),
 * then their sum: the tree of lanes.h, add for add. */
LY_AVX2 static inline float ly_lanes_reduce_avx2(__m256 acc) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* ly_exp, 8 wide */
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

/* ly_log_ge1, 8 wide */
LY_AVX2 static inline __m256 ly_log_ge1_avx2(__m256 w) {
    __m256i bits = _mm256_castps_si256(w);
    __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126));
    __m256 f = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)),
                                                   _mm256_set1_epi32(0x3f000000)));
    __m256 lt = _mm256_cmp_ps(f, _mm256_set1_ps(LY_SQRTHF), _CMP_LT_OQ), one = _mm256_set1_ps(1.0f);
    e = _mm256_sub_epi32(e, _mm256_and_si256(_mm256_castps_si256(lt), _mm256_set1_epi32(1)));
    __m256 x = _mm256_blendv_ps(_mm256_sub_ps(f, one), _mm256_sub_ps(_mm256_add_ps(f, f), one), lt);
    __m256 z = _mm256_mul_ps(x, x), y = _mm256_set1_ps(ly_log_c[0]);
    for (int i = 1; i < 9; i++) y = _mm256_add_ps(_mm256_mul_ps(y, x), _mm256_set1_ps(ly_log_c[i]));
    y = _mm256_mul_ps(_mm256_mul_ps(y, x), z);
    __m256 fe = _mm256_cvtepi32_ps(e);
    y = _mm256_sub_ps(_mm256_add_ps(y, _mm256_mul_ps(fe, _mm256_set1_ps(LY_LN2_B))),
                      _mm256_mul_ps(_mm256_set1_ps(0.5f), z));
    return _mm256_add_ps(_mm256_add_ps(x, y), _mm256_mul_ps(fe, _mm256_set1_ps(LY_LN2_A)));
}

/* ly_softplus_poly, 8 wide */
LY_AVX2 static inline __m256 ly_softplus_poly_avx2(__m256 v) {
    __m256 u = ly_exp_avx2(v), one = _mm256_set1_ps(1.0f), w = _mm256_add_ps(one, u);
    __m256 r = _mm256_add_ps(ly_log_ge1_avx2(w), _mm256_div_ps(_mm256_sub_ps(u, _mm256_sub_ps(w, one)), w));
    return _mm256_blendv_ps(r, v, _mm256_cmp_ps(v, _mm256_set1_ps(20.0f), _CMP_GT_OQ));
}
#endif
