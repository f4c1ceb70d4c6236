/* The NEON activation row quantization of act.c, bit-identical to the portable one: amax by maxNum (fmaxf's
 * treatment of NaN), q by vcvtnq (round half to even, as nearbyintf). */
#include "common.h"
#if LY_ARM64
#include "arm.h"
#include "kernels.h"

void ly_quant_row_neon(const float *x, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16) {
    for (int64_t b = 0; b < k / bs; b++) {
        const float *xb = x + b * bs;
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int64_t j = 0; j < bs; j += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(xb + j)));
        float amax = vmaxnmvq_f32(m), db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int64_t c = 0; c < bs; c += 32) {
            int32x4_t iv[8];
            for (int j = 0; j < 8; j++) iv[j] = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(xb + c + 4 * j), id));
            for (int h = 0; h < 2; h++) {
                const int32x4_t *w = iv + 4 * h; /* |q| <= 127: the narrowing moves are exact */
                s16[(b * bs + c) / 16 + h] = vaddvq_s32(vaddq_s32(vaddq_s32(w[0], w[1]), vaddq_s32(w[2], w[3])));
                int16x8_t lo = vcombine_s16(vmovn_s32(w[0]), vmovn_s32(w[1]));
                int16x8_t hi = vcombine_s16(vmovn_s32(w[2]), vmovn_s32(w[3]));
                vst1q_s8(q + b * bs + c + 16 * h, vcombine_s8(vmovn_s16(lo), vmovn_s16(hi)));
            }
        }
    }
}
#endif
