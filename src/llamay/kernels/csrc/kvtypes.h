/* KV cache element types, per K and V: LY_KV_F32, LY_KV_F16, LY_KV_Q8 (blocks of 32 values along
 * head_dim: float32 scale d then 32 int8, value = d * q; quantized with d = amax / 127,
 * q = rint(x * (1 / d)) half to even, as the activations are). One head of one slot is
 * head_bytes(type, head_dim) bytes; a slot row holds n_kv_head heads.
 * Dot products use the canonical lanes of lanes.h; dequantized values are d * (float)q in every path. These
 * are the portable forms (attention.c); the AVX2 ones are in attention_avx2.c. */
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
