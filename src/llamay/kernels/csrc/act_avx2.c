/* The AVX2 activation row quantization of act.c, bit-identical to the portable one. */
#include "common.h"
#if LY_X86
#include "x86.h"
#include "kernels.h"

LY_AVX2 static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* x's 32 values' max |x| */
LY_AVX2 static inline __m256 amax32(const float *x, __m256 m) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int j = 0; j < 4; j++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * j)));
    return m;
}

LY_AVX2 void ly_quant_row_avx2(const float *x, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16) {
    for (int64_t b = 0; b < k / bs; b++) {
        const float *xb = x + b * bs;
        __m256 m = _mm256_setzero_ps();
        for (int64_t c = 0; c < bs; c += 32) m = amax32(xb + c, m);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4), db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        const __m256 idv = _mm256_set1_ps(id);
        for (int64_t c = 0; c < bs; c += 32) {
            __m256i iv[4];
            for (int j = 0; j < 4; j++) /* cvtps rounds half to even in the default MXCSR mode, as rint */
                iv[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xb + c + 8 * j), idv));
            int32_t *s = s16 + (b * bs + c) / 16;
            s[0] = hsum_epi32(_mm256_add_epi32(iv[0], iv[1]));
            s[1] = hsum_epi32(_mm256_add_epi32(iv[2], iv[3]));
            /* |q| <= 127: the saturating packs are exact; dwords then hold q[0:4], q[8:12], ..., q[4:8], ... */
            __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
            p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(q + b * bs + c), p8);
        }
    }
}
#endif
