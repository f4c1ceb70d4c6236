/* The AVX2 kernels of ops.c: the same float operation sequence per element (mathfn.h), 8 wide. */
#include "common.h"
#if LY_X86
#include "avx2.h"
#include "kernels.h"

LY_AVX2 float ly_sum_avx2(const float *x, int64_t d) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
    float l[8];
    _mm256_storeu_ps(l, acc);
    for (; i < d; i++) l[i & 7] = l[i & 7] + x[i];
    return ly_lanes_reduce(l);
}

LY_AVX2 float ly_sumsq_avx2(const float *x, int64_t d) {
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

LY_AVX2 void ly_gated_avx2(float *gate, const float *up, int64_t lo, int64_t hi, int act) {
    const __m256 one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f), c = _mm256_set1_ps(0.7978845608028654f);
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i), a;
        if (act == 2) { /* as ly_gated_one: min_ps(7, x) is 7 < x ? 7 : x, max_ps(-7, x) is -7 > x ? -7 : x */
            const __m256 seven = _mm256_set1_ps(7.0f);
            g = _mm256_min_ps(seven, g);
            __m256 u = _mm256_max_ps(_mm256_set1_ps(-7.0f), _mm256_min_ps(seven, _mm256_loadu_ps(up + i)));
            a = _mm256_div_ps(g, _mm256_add_ps(one, ly_exp_avx2(_mm256_mul_ps(_mm256_set1_ps(-1.702f), g))));
            _mm256_storeu_ps(gate + i, _mm256_mul_ps(a, _mm256_add_ps(u, one)));
            continue;
        }
        if (act == 3) { /* a product */
            _mm256_storeu_ps(gate + i, up ? _mm256_mul_ps(g, _mm256_loadu_ps(up + i)) : g);
            continue;
        }
        if (act == 0) {
            a = _mm256_div_ps(g, _mm256_add_ps(one, ly_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        } else if (act == 4) {
            a = _mm256_div_ps(one, _mm256_add_ps(one, ly_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        } else if (act == 5) { /* max_ps(g, 0) is g > 0 ? g : 0 */
            __m256 r = _mm256_max_ps(g, _mm256_setzero_ps());
            a = _mm256_mul_ps(r, r);
        } else {
            __m256 u = _mm256_mul_ps(c, _mm256_add_ps(g, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g),
                                                                       _mm256_mul_ps(g, g))));
            u = _mm256_min_ps(_mm256_max_ps(u, _mm256_set1_ps(-10.0f)), _mm256_set1_ps(10.0f));
            __m256 e = ly_exp_avx2(_mm256_add_ps(u, u));
            a = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g),
                              _mm256_sub_ps(two, _mm256_div_ps(two, _mm256_add_ps(e, one))));
        }
        _mm256_storeu_ps(gate + i, up ? _mm256_mul_ps(a, _mm256_loadu_ps(up + i)) : a);
    }
    for (; i < hi; i++) gate[i] = up ? ly_gated_one(gate[i], up[i], act) : ly_act_one(gate[i], act);
}

LY_AVX2 void ly_softcap_avx2(float *x, int64_t lo, int64_t hi, float cap) {
    const __m256 k = _mm256_set1_ps(cap), one = _mm256_set1_ps(1.0f), two = _mm256_set1_ps(2.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int64_t i = lo;
    for (; i + 8 <= hi; i += 8) {
        __m256 u = _mm256_div_ps(_mm256_loadu_ps(x + i), k), u2 = _mm256_mul_ps(u, u);
        __m256 p = _mm256_add_ps(_mm256_set1_ps(LY_TANH_C5), _mm256_mul_ps(u2, _mm256_set1_ps(LY_TANH_C7)));
        p = _mm256_add_ps(_mm256_set1_ps(LY_TANH_C3), _mm256_mul_ps(u2, p));
        __m256 small = _mm256_add_ps(u, _mm256_mul_ps(_mm256_mul_ps(u, u2), p));
        __m256 c = _mm256_min_ps(_mm256_max_ps(u, _mm256_set1_ps(-10.0f)), _mm256_set1_ps(10.0f));
        __m256 big = _mm256_sub_ps(one, _mm256_div_ps(two, _mm256_add_ps(ly_exp_avx2(_mm256_add_ps(c, c)), one)));
        __m256 is_small = _mm256_cmp_ps(_mm256_and_ps(u, abs_mask), _mm256_set1_ps(0.125f), _CMP_LT_OQ);
        _mm256_storeu_ps(x + i, _mm256_mul_ps(k, _mm256_blendv_ps(big, small, is_small)));
    }
    for (; i < hi; i++) x[i] = ly_softcap_one(x[i], cap);
}
#endif
