/* The NEON attention kernels: kvtypes.h's KV dot and accumulate and the grouped f16 kernel, with
 * attention.c's float operations per head (as attention_avx2.c: dots in lanes.h's 8 lanes, here two
 * vectors of 4; weights by the scalar ly_att_weight; o accumulated key by key, then divided by the sum).
 * Each key and value is converted once for all G heads. */
#include "common.h"
#if LY_ARM64
#include "arm.h"
#include "kernels.h"
#include "kvtypes.h"

static inline float32x4_t f16x4(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

/* 4 dequantized Q8 values s * (float)q */
static inline float32x4_t q8x4(int32x4_t q, float s) { return vmulq_n_f32(vcvtq_f32_s32(q), s); }

static float dot_f32(const float *a, const float *b, int64_t d) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        lo = vaddq_f32(lo, vmulq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
        hi = vaddq_f32(hi, vmulq_f32(vld1q_f32(a + i + 4), vld1q_f32(b + i + 4)));
    }
    float l[8];
    vst1q_f32(l, lo);
    vst1q_f32(l + 4, hi);
    for (; i < d; i++) l[i & 7] = l[i & 7] + a[i] * b[i];
    return ly_lanes_reduce(l);
}

static float dot_f16(const float *a, const uint16_t *b, int64_t d) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        lo = vaddq_f32(lo, vmulq_f32(vld1q_f32(a + i), f16x4(b + i)));
        hi = vaddq_f32(hi, vmulq_f32(vld1q_f32(a + i + 4), f16x4(b + i + 4)));
    }
    float l[8];
    vst1q_f32(l, lo);
    vst1q_f32(l + 4, hi);
    for (; i < d; i++) l[i & 7] = l[i & 7] + a[i] * ly_f16_to_f32(b[i]);
    return ly_lanes_reduce(l);
}

/* d % 32 == 0 */
static float dot_q8(const float *a, const uint8_t *k, int64_t d) {
    float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < d / LY_Q8_BLOCK; b++) {
        const uint8_t *blk = k + b * LY_Q8_BYTES;
        float s = ly_q8_scale(blk);
        const float *ab = a + b * LY_Q8_BLOCK;
        for (int j = 0; j < LY_Q8_BLOCK; j += 8) {
            int16x8_t q = vmovl_s8(vld1_s8((const int8_t *)blk + 4 + j));
            lo = vaddq_f32(lo, vmulq_f32(vld1q_f32(ab + j), q8x4(vmovl_s16(vget_low_s16(q)), s)));
            hi = vaddq_f32(hi, vmulq_f32(vld1q_f32(ab + j + 4), q8x4(vmovl_high_s16(q), s)));
        }
    }
    return ly_lanes_reduce_neon(lo, hi);
}

float ly_kv_dot_neon(int type, const float *a, const uint8_t *k, int64_t d) {
    if (type == LY_KV_F16) return dot_f16(a, (const uint16_t *)k, d);
    if (type == LY_KV_F32) return dot_f32(a, (const float *)k, d);
    return dot_q8(a, k, d);
}

/* o[i .. i + 4) + p * 4 values of v from element i */
static inline __attribute__((always_inline)) void acc4(int type, float *o, float p, const uint8_t *v, int64_t i) {
    float32x4_t x;
    if (type == LY_KV_F32) x = vld1q_f32((const float *)v + i);
    else if (type == LY_KV_F16) x = f16x4((const uint16_t *)v + i);
    else {
        const uint8_t *blk = v + (i / LY_Q8_BLOCK) * LY_Q8_BYTES;
        int16x8_t q = vmovl_s8(vld1_s8((const int8_t *)blk + 4 + i % LY_Q8_BLOCK)); /* 8 read, 4 used */
        x = q8x4(vmovl_s16(vget_low_s16(q)), ly_q8_scale(blk));
    }
    vst1q_f32(o + i, vaddq_f32(vld1q_f32(o + i), vmulq_n_f32(x, p)));
}

static inline __attribute__((always_inline)) void acc(int type, float *o, float p, const uint8_t *v, int64_t d) {
    int64_t i = 0;
    for (; i + 4 <= d; i += 4) acc4(type, o, p, v, i);
    if (i < d) ly_acc_portable(type, o + i, p, v + ly_kv_head_bytes(type, i), d - i);
}

void ly_kv_acc_neon(int type, float *o, float p, const uint8_t *v, int64_t d) {
    if (type == LY_KV_F32) acc(LY_KV_F32, o, p, v, d);
    else if (type == LY_KV_F16) acc(LY_KV_F16, o, p, v, d);
    else acc(LY_KV_Q8, o, p, v, d);
}

/* s[g * n + j]: head g's raw dot with key j -> its weight p_j; sum[g]: the p_j in key order plus the sink's */
static void weights(float *s, int64_t n, int64_t G, float scale, float softcap, const float *sinks, float *sum) {
    for (int64_t g = 0; g < G; g++) {
        float *sg = s + g * n, m = -INFINITY, total = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            float sj = sg[j] * scale;
            if (softcap != 0.0f) sj = softcap * tanhf(sj / softcap);
            sg[j] = sj;
            if (sj > m) m = sj;
        }
        if (sinks && sinks[g] > m) m = sinks[g];
        for (int64_t j = 0; j < n; j++) total = total + (sg[j] = ly_att_weight(sg[j] - m));
        sum[g] = sinks ? total + ly_att_weight(sinks[g] - m) : total;
    }
}

/* G a literal in each instantiation (BY_GROUP), so the per-head accumulators stay in registers; d % 16 == 0 */
static inline __attribute__((always_inline)) void group(const ly_att *at, float *s, const int64_t G) {
    const int64_t n = at->n_keys, d = at->d;
    float sum[LY_MAX_GROUP];
    for (int64_t j = 0; j < n; j++) {
        float32x4_t lo[LY_MAX_GROUP], hi[LY_MAX_GROUP];
        for (int64_t g = 0; g < G; g++) lo[g] = hi[g] = vdupq_n_f32(0.0f);
        for (int64_t i = 0; i < d; i += 8) {
            float32x4_t k0 = f16x4(at->k[j] + i), k1 = f16x4(at->k[j] + i + 4);
            for (int64_t g = 0; g < G; g++) {
                lo[g] = vaddq_f32(lo[g], vmulq_f32(vld1q_f32(at->q + g * d + i), k0));
                hi[g] = vaddq_f32(hi[g], vmulq_f32(vld1q_f32(at->q + g * d + i + 4), k1));
            }
        }
        for (int64_t g = 0; g < G; g++) s[g * n + j] = ly_lanes_reduce_neon(lo[g], hi[g]);
    }
    weights(s, n, G, at->scale, at->softcap, at->sinks, sum);
    for (int64_t i = 0; i < d; i += 8) {
        float32x4_t lo[LY_MAX_GROUP], hi[LY_MAX_GROUP];
        for (int64_t g = 0; g < G; g++) lo[g] = hi[g] = vdupq_n_f32(0.0f);
        for (int64_t j = 0; j < n; j++) {
            float32x4_t v0 = f16x4(at->v[j] + i), v1 = f16x4(at->v[j] + i + 4);
            for (int64_t g = 0; g < G; g++) {
                lo[g] = vaddq_f32(lo[g], vmulq_n_f32(v0, s[g * n + j]));
                hi[g] = vaddq_f32(hi[g], vmulq_n_f32(v1, s[g * n + j]));
            }
        }
        for (int64_t g = 0; g < G; g++) {
            vst1q_f32(at->o + g * d + i, vdivq_f32(lo[g], vdupq_n_f32(sum[g])));
            vst1q_f32(at->o + g * d + i + 4, vdivq_f32(hi[g], vdupq_n_f32(sum[g])));
        }
    }
}

void ly_attend_group_f16_neon(const ly_att *at, float *s) { BY_GROUP(group) }
#endif
