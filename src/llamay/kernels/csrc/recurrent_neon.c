/* The recurrent ops' NEON kernels: the causal convolution's row (conv_x.h), the gated delta rule's passes
 * (deltanet_x.h) and the selective scan's row and columns, 4 channels, columns or states at once, each the
 * same float operations as its portable version. */
#include "common.h"
#if LY_ARM64
#include "arm.h"
#include "graph.h"
#include "kernels.h"

#define VEC float32x4_t
#define W 4
#define LOAD vld1q_f32
#define STORE vst1q_f32
#define SET1 vdupq_n_f32
#define ADD vaddq_f32
#define MUL vmulq_f32
#define FN void ly_conv_row_neon
#include "conv_x.h"
#define ATTR
#define ISA neon
#include "deltanet_x.h"

/* ssm.c's rows (Mamba2), 8 states at a step in two vectors: lane j of the sum takes the states i % 8 == j in
 * order, as lanes.h. */
float ly_ssm_row_neon(float *s, const float *B, const float *C, float dA, float xdt, int64_t N) {
    int64_t whole = N / 8 * 8;
    float32x4_t acc[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    for (int64_t i = 0; i < whole; i += 8)
        for (int h = 0; h < 2; h++) {
            int64_t j = i + 4 * h;
            float32x4_t v = vaddq_f32(vmulq_n_f32(vld1q_f32(s + j), dA), vmulq_n_f32(vld1q_f32(B + j), xdt));
            acc[h] = vaddq_f32(acc[h], vmulq_f32(v, vld1q_f32(C + j)));
            vst1q_f32(s + j, v);
        }
    float l[8];
    vst1q_f32(l, acc[0]);
    vst1q_f32(l + 4, acc[1]);
    return ly_ssm_row_from(l, s, B, C, dA, xdt, whole, N);
}

/* ssm.c's columns (Mamba1), 4 channels at once, each lane one channel's operations in ly_ssm_cols_portable's
 * order; the channels past the last whole vector run the portable columns. */
void ly_ssm_cols_neon(float *s, const float *A, const float *B, const float *C, const float *x, const float *dt,
                      const float *dt_bias, const float *D, float *y, int64_t lo, int64_t hi, int64_t H, int64_t N) {
    int64_t r = lo;
    for (; r + 4 <= hi; r += 4) {
        float32x4_t vsp = ly_softplus_poly_neon(vaddq_f32(vld1q_f32(dt + r), vld1q_f32(dt_bias + r)));
        float32x4_t vx = vld1q_f32(x + r), vxdt = vmulq_f32(vx, vsp), acc = vdupq_n_f32(0.0f);
        for (int64_t i = 0; i < N; i++) {
            float32x4_t d = ly_exp_neon(vmulq_f32(vsp, vld1q_f32(A + i * H + r)));
            float32x4_t v = vaddq_f32(vmulq_f32(vld1q_f32(s + i * H + r), d), vmulq_n_f32(vxdt, B[i]));
            acc = vaddq_f32(acc, vmulq_n_f32(v, C[i]));
            vst1q_f32(s + i * H + r, v);
        }
        vst1q_f32(y + r, vaddq_f32(acc, vmulq_f32(vld1q_f32(D + r), vx)));
    }
    ly_ssm_cols_portable(s, A, B, C, x, dt, dt_bias, D, y, r, hi, H, N);
}
#endif
