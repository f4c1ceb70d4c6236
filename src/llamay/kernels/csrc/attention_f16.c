/* Attention for the G query heads that share one KV head, f16 K and V, AVX2 and AVX-512 (attention.c
 * dispatches here). Per head the float operations are exactly attention.c's canonical sequence:
 * scores by ly_dot_f16's 8 lanes and tree, times scale, optional softcap, m = max, p_j = ly_att_weight(s_j - m),
 * sum of p_j in key order, o_i = sum over keys in order of p_j * v_ji, then o_i / sum.
 * Speed comes from layout only: each key is converted once for all G heads (AVX-512: two keys per
 * register, one in each 256-bit half), exp runs 8 wide, and o is accumulated in registers one block of
 * dims at a time over all keys instead of read and written back per key. d % 16 == 0. */
#include "attention.h"
#include "lanes.h"
#include "mathfn.h"

/* s[g * n + j] holds the raw dot of head g with key j: -> p_j, and sum[g] (key order) */
LY_AVX2 static void weights(float *s, int64_t n, int64_t G, float scale, float softcap, const float *sinks,
                            float *sum) {
    for (int64_t g = 0; g < G; g++) {
        float *sg = s + g * n, m = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            float sj = sg[j] * scale;
            if (softcap != 0.0f) sj = softcap * tanhf(sj / softcap);
            sg[j] = sj;
            if (sj > m) m = sj;
        }
        if (sinks && sinks[g] > m) m = sinks[g];
        int64_t j = 0;
        for (; j + 8 <= n; j += 8) {
            __m256 x = _mm256_sub_ps(_mm256_loadu_ps(sg + j), _mm256_set1_ps(m));
            __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(LY_ATT_DROP), _CMP_NLT_UQ); /* as x < DROP is false */
            _mm256_storeu_ps(sg + j, _mm256_and_ps(ly_exp_avx2(x), keep));
        }
        for (; j < n; j++) sg[j] = ly_att_weight(sg[j] - m);
        float total = 0.0f;
        for (j = 0; j < n; j++) total = total + sg[j];
        sum[g] = sinks ? total + ly_att_weight(sinks[g] - m) : total;
    }
}

#define LOAD_PH(p) _mm_loadu_si128((const __m128i *)(p))

#define BODY LY_AVX2 static inline __attribute__((always_inline))
#define BODY512 LY_AVX512 static inline __attribute__((always_inline))

/* G is a literal in each instantiation below, so the per-head accumulators stay in registers */
BODY void group_avx2(const ly_att *at, float *s, const int64_t G) {
    const int64_t n = at->n_keys, d = at->d;
    float sum[LY_MAX_GROUP];
    for (int64_t j = 0; j < n; j++) {
        const uint16_t *k = at->k[j];
        __m256 acc[LY_MAX_GROUP];
        for (int64_t g = 0; g < G; g++) acc[g] = _mm256_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) {
            __m256 kv = _mm256_cvtph_ps(LOAD_PH(k + i));
            for (int64_t g = 0; g < G; g++)
                acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_loadu_ps(at->q + g * d + i), kv));
        }
        for (int64_t g = 0; g < G; g++) s[g * n + j] = ly_lanes_reduce_avx2(acc[g]);
    }
    weights(s, n, G, at->scale, at->softcap, at->sinks, sum);
    for (int64_t i = 0; i < d; i += 8) {
        __m256 o[LY_MAX_GROUP];
        for (int64_t g = 0; g < G; g++) o[g] = _mm256_setzero_ps();
        for (int64_t j = 0; j < n; j++) {
            __m256 vv = _mm256_cvtph_ps(LOAD_PH(at->v[j] + i));
            for (int64_t g = 0; g < G; g++)
                o[g] = _mm256_add_ps(o[g], _mm256_mul_ps(_mm256_broadcast_ss(s + g * n + j), vv));
        }
        for (int64_t g = 0; g < G; g++)
            _mm256_storeu_ps(at->o + g * d + i, _mm256_div_ps(o[g], _mm256_set1_ps(sum[g])));
    }
}

#define BY_GROUP(fn)                                  \
    switch (at->G) {                                  \
    case 1: fn(at, s, 1); break;                      \
    case 2: fn(at, s, 2); break;                      \
    case 4: fn(at, s, 4); break;                      \
    case 8: fn(at, s, 8); break;                      \
    default: fn(at, s, at->G); break;                 \
    }

LY_AVX2 void ly_attend_group_f16_avx2(const ly_att *at, float *s) { BY_GROUP(group_avx2) }

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

BODY512 void group_avx512(const ly_att *at, float *s, const int64_t G) {
    const int64_t n = at->n_keys, d = at->d;
    float sum[LY_MAX_GROUP];
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
        const uint16_t *ka = at->k[j], *kb = at->k[j + 1];
        __m512 acc[LY_MAX_GROUP];
        for (int64_t g = 0; g < G; g++) acc[g] = _mm512_setzero_ps();
        for (int64_t i = 0; i < d; i += 8) {
            __m512 kv = _mm512_cvtph_ps(_mm256_set_m128i(LOAD_PH(kb + i), LOAD_PH(ka + i)));
            for (int64_t g = 0; g < G; g++)
                acc[g] = _mm512_add_ps(acc[g], _mm512_mul_ps(both_halves(at->q + g * d + i), kv));
        }
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
    weights(s, n, G, at->scale, at->softcap, at->sinks, sum);
    /* B blocks of 16 dims per pass over the keys (G * B independent accumulators hide the add latency),
     * then single blocks for the rest */
    const int64_t B = G >= 4 ? 2 : 4;
    int64_t i0 = 0;
    for (; i0 + 16 * B <= d; i0 += 16 * B) v_pass(at, s, sum, G, B, i0);
    for (; i0 < d; i0 += 16) v_pass(at, s, sum, G, 1, i0);
}

LY_AVX512 void ly_attend_group_f16_avx512(const ly_att *at, float *s) { BY_GROUP(group_avx512) }
