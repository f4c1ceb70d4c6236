/* The AVX2 attention kernels: the KV dot and accumulate of kvtypes.h (attention.c runs them per key) and
 * the grouped f16 kernel for the G query heads that share one KV head (attention.c dispatches here; the
 * AVX-512 one is in attention_avx512.c). Per head the float operations are exactly attention.c's
 * canonical sequence:
 * scores by ly_dot_f16's 8 lanes and tree, times scale, optional softcap, m = max, p_j = ly_att_weight(s_j - m),
 * sum of p_j in key order, o_i = sum over keys in order of p_j * v_ji, then o_i / sum.
 * Speed comes from layout only: each key is converted once for all G heads (AVX-512: two keys per
 * register, one in each 256-bit half), exp runs 8 wide, and o is accumulated in registers one block of
 * dims at a time over all keys instead of read and written back per key. d % 16 == 0. */
#include "common.h"
#if LY_X86
#include "avx2.h"
#include "kernels.h"
#include "kvtypes.h"

#define LOAD_PH(p) _mm_loadu_si128((const __m128i *)(p))

/* ---- kvtypes.h's dot and accumulate ---- */
LY_AVX2 static inline float ly_dot_f32_avx2(const float *a, const float *b, int64_t d) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    float l[8];
    _mm256_storeu_ps(l, acc);
    for (; i < d; i++) l[i & 7] = l[i & 7] + a[i] * b[i];
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

LY_AVX2 static inline __m256 ly_q8_load8_avx2(const int8_t *q, __m256 vs) {
    __m256i w = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q));
    return _mm256_mul_ps(vs, _mm256_cvtepi32_ps(w));
}

LY_AVX2 static inline float ly_dot_q8_avx2(const float *a, const uint8_t *k, int64_t d) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < d / LY_Q8_BLOCK; b++) {
        const uint8_t *blk = k + b * LY_Q8_BYTES;
        __m256 vs = _mm256_set1_ps(ly_q8_scale(blk));
        const int8_t *q = (const int8_t *)(blk + 4);
        for (int j = 0; j < LY_Q8_BLOCK; j += 8)
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + b * LY_Q8_BLOCK + j), ly_q8_load8_avx2(q + j, vs)));
    }
    return ly_lanes_reduce_avx2(acc);
}

LY_AVX2 float ly_kv_dot_avx2(int type, const float *a, const uint8_t *k, int64_t d) {
    if (type == LY_KV_F16) return ly_dot_f16_avx2(a, (const uint16_t *)k, d);
    if (type == LY_KV_F32) return ly_dot_f32_avx2(a, (const float *)k, d);
    return ly_dot_q8_avx2(a, k, d);
}

LY_AVX2 static inline __attribute__((always_inline)) void acc_avx2(int type, float *o, float p, const uint8_t *v, int64_t d) {
    __m256 vp = _mm256_set1_ps(p);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        __m256 x;
        if (type == LY_KV_F32) x = _mm256_loadu_ps((const float *)v + i);
        else if (type == LY_KV_F16) x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)v + i)));
        else {
            const uint8_t *blk = v + (i / LY_Q8_BLOCK) * LY_Q8_BYTES;
            x = ly_q8_load8_avx2((const int8_t *)(blk + 4) + i % LY_Q8_BLOCK, _mm256_set1_ps(ly_q8_scale(blk)));
        }
        _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_loadu_ps(o + i), _mm256_mul_ps(vp, x)));
    }
    if (i < d) ly_acc_portable(type, o + i, p, v + ly_kv_head_bytes(type, i), d - i);
}

/* one instance per type, so no type test per vector */
LY_AVX2 void ly_kv_acc_avx2(int type, float *o, float p, const uint8_t *v, int64_t d) {
    if (type == LY_KV_F32) acc_avx2(LY_KV_F32, o, p, v, d);
    else if (type == LY_KV_F16) acc_avx2(LY_KV_F16, o, p, v, d);
    else acc_avx2(LY_KV_Q8, o, p, v, d);
}

/* ---- the grouped f16 kernel ---- */
LY_AVX2 void ly_att_weights_avx2(float *s, int64_t n, int64_t G, float scale, float softcap, const float *sinks,
                                 float *sum) {
    float max[LY_MAX_GROUP];
    for (int64_t g = 0; g < G; g++) {
        float *sg = s + g * n, m = -INFINITY;
        int64_t j = 0;
        if (softcap == 0.0f) { /* max_ps(x, m) is x > m ? x : m, the scalar test lane by lane; a maximum does
                                * not depend on the order it is taken in (a NaN never enters it) */
            __m256 mv = _mm256_set1_ps(-INFINITY);
            for (; j + 8 <= n; j += 8) {
                __m256 x = _mm256_mul_ps(_mm256_loadu_ps(sg + j), _mm256_set1_ps(scale));
                _mm256_storeu_ps(sg + j, x);
                mv = _mm256_max_ps(x, mv);
            }
            float l[8];
            _mm256_storeu_ps(l, mv);
            for (int i = 0; i < 8; i++) if (l[i] > m) m = l[i];
        }
        for (; j < n; j++) {
            float sj = sg[j] * scale;
            if (softcap != 0.0f) sj = softcap * tanhf(sj / softcap);
            sg[j] = sj;
            if (sj > m) m = sj;
        }
        if (sinks && sinks[g] > m) m = sinks[g];
        max[g] = m;
        for (j = 0; j + 8 <= n; j += 8) {
            __m256 x = _mm256_sub_ps(_mm256_loadu_ps(sg + j), _mm256_set1_ps(m));
            __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(LY_ATT_DROP), _CMP_NLT_UQ); /* as x < DROP is false */
            _mm256_storeu_ps(sg + j, _mm256_and_ps(ly_exp_avx2(x), keep));
        }
        for (; j < n; j++) sg[j] = ly_att_weight(sg[j] - m);
    }
    /* each head's sum in key order; the heads' chains side by side (one add's latency per key, not G) */
    float total[LY_MAX_GROUP] = {0};
    for (int64_t j = 0; j < n; j++)
        for (int64_t g = 0; g < G; g++) total[g] = total[g] + s[g * n + j];
    for (int64_t g = 0; g < G; g++) sum[g] = sinks ? total[g] + ly_att_weight(sinks[g] - max[g]) : total[g];
}

#define BODY LY_AVX2 static inline __attribute__((always_inline))

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
    ly_att_weights_avx2(s, n, G, at->scale, at->softcap, at->sinks, sum);
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

LY_AVX2 void ly_attend_group_f16_avx2(const ly_att *at, float *s) { BY_GROUP(group_avx2) }
#endif
