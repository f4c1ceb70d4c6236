/* KV cache element types, per K and V: LY_KV_F32, LY_KV_F16, LY_KV_Q8 (blocks of 32 values along
 * head_dim: float32 scale d then 32 int8, value = d * q; quantized with d = amax / 127,
 * q = rint(x * (1 / d)) half to even, as the activations are). One head of one slot is
 * head_bytes(type, head_dim) bytes; a slot row holds n_kv_head heads.
 * Dot products use the canonical lanes of lanes.h; dequantized values are d * (float)q in both paths. */
#ifndef LLAMAY_KVTYPES_H
#define LLAMAY_KVTYPES_H
#include "lanes.h"

enum { LY_KV_F32 = 0, LY_KV_F16 = 1, LY_KV_Q8 = 2 };
#define LY_Q8_BLOCK 32
#define LY_Q8_BYTES (4 + LY_Q8_BLOCK)

static inline int64_t ly_kv_head_bytes(int type, int64_t d) {
    return type == LY_KV_F32 ? d * 4 : type == LY_KV_F16 ? d * 2 : d / LY_Q8_BLOCK * LY_Q8_BYTES;
}

static inline float ly_q8_scale(const uint8_t *blk) { float s; memcpy(&s, blk, 4); return s; }

/* ---- dot(q, k) ---- */
/* d % 32 == 0 for Q8 (checked when the pool is made) */
static inline float ly_dot_q8_portable(const float *a, const uint8_t *k, int64_t d) {
    float l[8] = {0};
    for (int64_t b = 0; b < d / LY_Q8_BLOCK; b++) {
        const uint8_t *blk = k + b * LY_Q8_BYTES;
        float s = ly_q8_scale(blk);
        const int8_t *q = (const int8_t *)(blk + 4);
        for (int64_t j = 0; j < LY_Q8_BLOCK; j++) {
            int64_t i = b * LY_Q8_BLOCK + j;
            l[i & 7] = l[i & 7] + a[i] * (s * (float)q[j]);
        }
    }
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

static inline float ly_kv_dot(int type, const float *a, const uint8_t *k, int64_t d) {
    if (type == LY_KV_F16)
        return ly_avx2 ? ly_dot_f16_avx2(a, (const uint16_t *)k, d) : ly_dot_f16_portable(a, (const uint16_t *)k, d);
    if (type == LY_KV_F32)
        return ly_avx2 ? ly_dot_f32_avx2(a, (const float *)k, d) : ly_dot_f32_portable(a, (const float *)k, d);
    return ly_avx2 ? ly_dot_q8_avx2(a, k, d) : ly_dot_q8_portable(a, k, d);
}

/* ---- o += p * v ---- */
static inline void ly_acc_portable(int type, float *o, float p, const uint8_t *v, int64_t d) {
    for (int64_t i = 0; i < d; i++) {
        float x;
        if (type == LY_KV_F32) x = ((const float *)v)[i];
        else if (type == LY_KV_F16) x = ly_f16_to_f32(((const uint16_t *)v)[i]);
        else {
            const uint8_t *blk = v + (i / LY_Q8_BLOCK) * LY_Q8_BYTES;
            x = ly_q8_scale(blk) * (float)((const int8_t *)(blk + 4))[i % LY_Q8_BLOCK];
        }
        o[i] = o[i] + p * x;
    }
}

LY_AVX2 static inline void ly_acc_avx2(int type, float *o, float p, const uint8_t *v, int64_t d) {
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

/* ---- store one head's values x[d] as type ---- */
static inline void ly_kv_store(int type, uint8_t *dst, const float *x, int64_t d) {
    if (type == LY_KV_F32) { memcpy(dst, x, d * 4); return; }
    if (type == LY_KV_F16) {
        for (int64_t i = 0; i < d; i++) ((uint16_t *)dst)[i] = ly_f32_to_f16(x[i]);
        return;
    }
    for (int64_t b = 0; b < d / LY_Q8_BLOCK; b++) {
        const float *xb = x + b * LY_Q8_BLOCK;
        float amax = 0.0f;
        for (int j = 0; j < LY_Q8_BLOCK; j++) { float a = fabsf(xb[j]); if (a > amax) amax = a; }
        float s = amax / 127.0f, id = s != 0.0f ? 1.0f / s : 0.0f;
        uint8_t *blk = dst + b * LY_Q8_BYTES;
        memcpy(blk, &s, 4);
        for (int j = 0; j < LY_Q8_BLOCK; j++) ((int8_t *)(blk + 4))[j] = (int8_t)nearbyintf(xb[j] * id);
    }
}
#endif
