/* The AVX-512 grouped f16 attention kernel: the sequence of attention_avx2.c's, with two keys per register
 * (one in each 256-bit half); the score weights are attention_avx2.c's. d % 16 == 0. */
#include "common.h"
#if LY_X86
#include "avx2.h"
#include "kernels.h"

#define LOAD_PH(p) _mm_loadu_si128((const __m128i *)(p))
#define BODY512 LY_AVX512 static inline __attribute__((always_inline))

/* the lanes.h tree of each 256-bit half: (key j, key j + 1) */
LY_AVX512 static inline void reduce_halves(__m512 acc, float *a, float *b) {
    *a = ly_lanes_reduce_avx2(_mm512_castps512_ps256(acc));
    *b = ly_lanes_reduce_avx2(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

/* o[g][i0, i0 + 16 * B) over every key, then / sum[g] */
BODY512 void v_pass(const ly_att *at, const float *s, const float *sum, const int64_t G, const int64_t B,
                    int64_t i0) {
    const int64_t n = at->n_keys, d = at->d;
    __m512 o[LY_MAX_GROUP][4];
    for (int64_t g = 0; g < G; g++)
        for (int64_t c = 0; c < B; c++) o[g][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j++)
        for (int64_t c = 0; c < B; c++) {
            __m512 vv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(at->v[j] + i0 + 16 * c)));
            for (int64_t g = 0; g < G; g++)
                o[g][c] = _mm512_add_ps(o[g][c], _mm512_mul_ps(_mm512_set1_ps(s[g * n + j]), vv));
        }
    for (int64_t g = 0; g < G; g++)
        for (int64_t c = 0; c < B; c++)
            _mm512_storeu_ps(at->o + g * d + i0 + 16 * c, _mm512_div_ps(o[g][c], _mm512_set1_ps(sum[g])));
}

/* 8 floats in both 256-bit halves (AVX-512F only: no DQ) */
LY_AVX512 static inline __m512 both_halves(const float *p) {
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

/* the lanes.h trees of four keys at once: a holds keys (j, j + 1), c keys (j + 2, j + 3), 8 lanes each;
 * l_i + l_{i+4} for all four, then (l0+l4) + (l2+l6) and (l1+l5) + (l3+l7), then their sum, as
 * ly_lanes_reduce adds them -> the four scores in key order */
LY_AVX512 static inline __m128 reduce_four(__m512 a, __m512 c) {
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(a, c, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(a, c, _MM_SHUFFLE(3, 1, 3, 1))); /* key j + k in block k */
    __m512 v = _mm512_add_ps(u, _mm512_shuffle_ps(u, u, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 w = _mm512_add_ps(v, _mm512_movehdup_ps(v));
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                                        12, 8, 4, 0), w));
}

/* the 8 products of dims i .. i + 7 of two keys (one per 256-bit half) with each query head, added */
#define KEY_PAIR_STEP(acc, ka, kb, i)                                                                  \
    do {                                                                                               \
        __m512 kv = _mm512_cvtph_ps(_mm256_set_m128i(LOAD_PH((kb) + (i)), LOAD_PH((ka) + (i))));       \
        for (int64_t g = 0; g < G; g++)                                                                \
            acc[g] = _mm512_add_ps(acc[g], _mm512_mul_ps(both_halves(at->q + g * d + (i)), kv));        \
    } while (0)

BODY512 void group_avx512(const ly_att *at, float *s, const int64_t G) {
    const int64_t n = at->n_keys, d = at->d;
    float sum[LY_MAX_GROUP];
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        __m512 a[LY_MAX_GROUP], c[LY_MAX_GROUP];
        for (int64_t g = 0; g < G; g++) a[g] = c[g] = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) {
            KEY_PAIR_STEP(a, at->k[j], at->k[j + 1], i);
            KEY_PAIR_STEP(c, at->k[j + 2], at->k[j + 3], i);
        }
        for (int64_t g = 0; g < G; g++) _mm_storeu_ps(s + g * n + j, reduce_four(a[g], c[g]));
    }
    for (; j + 2 <= n; j += 2) {
        __m512 acc[LY_MAX_GROUP];
        for (int64_t g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) KEY_PAIR_STEP(acc, at->k[j], at->k[j + 1], i);
        for (int64_t g = 0; g < G; g++) reduce_halves(acc[g], s + g * n + j, s + g * n + j + 1);
    }
    for (; j < n; j++) {
        __m256 acc[LY_MAX_GROUP];
        for (int64_t g = 0; g < G; g++) acc[g] = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) {
            __m256 kv = _mm256_cvtph_ps(LOAD_PH(at->k[j] + i));
            for (int64_t g = 0; g < G; g++)
                acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_loadu_ps(at->q + g * d + i), kv));
        }
        for (int64_t g = 0; g < G; g++) s[g * n + j] = ly_lanes_reduce_avx2(acc[g]);
    }
    ly_att_weights_avx2(s, n, G, at->scale, at->softcap, at->sinks, sum);
    /* B blocks of 16 dims per pass over the keys (G * B independent accumulators hide the add latency),
     * then single blocks for the rest */
    const int64_t B = G >= 4 ? 2 : 4;
    int64_t i0 = 0;
    for (; i0 + 16 * B <= d; i0 += 16 * B) v_pass(at, s, sum, G, B, i0);
    for (; i0 < d; i0 += 16) v_pass(at, s, sum, G, 1, i0);
}

LY_AVX512 void ly_attend_group_f16_avx512(const ly_att *at, float *s) { BY_GROUP(group_avx512) }
#endif
