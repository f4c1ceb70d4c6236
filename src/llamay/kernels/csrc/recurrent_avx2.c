/* The recurrent ops' 8-wide kernels: the causal convolution's row (conv_x.h), the gated delta rule's
 * passes (deltanet_x.h) and the selective scan's row, each the same float operations per channel, column or
 * state as its portable version. */
#include "common.h"
#if LY_X86
#include "graph.h"
#include "kernels.h"
#include "x86.h"
#include "avx2.h"

#define VEC __m256
#define W 8
#define LOAD _mm256_loadu_ps
#define STORE _mm256_storeu_ps
#define SET1 _mm256_set1_ps
#define ADD _mm256_add_ps
#define MUL _mm256_mul_ps
#define FN LY_AVX2 void ly_conv_row_avx2
#include "conv_x.h"
#define ATTR LY_AVX2
#define ISA avx2
#include "deltanet_x.h"

/* ssm.c's rows (Mamba2), 8 states at once: lane j of the sum takes the states i % 8 == j in order, as
 * lanes.h. */
LY_AVX2 float ly_ssm_row_avx2(float *s, const float *B, const float *C, float dA, float xdt, int64_t N) {
    int64_t whole = N / 8 * 8;
    __m256 acc = _mm256_setzero_ps(), vxdt = _mm256_set1_ps(xdt), vdA = _mm256_set1_ps(dA);
    for (int64_t i = 0; i < whole; i += 8) {
        __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s + i), vdA), _mm256_mul_ps(_mm256_loadu_ps(B + i), vxdt));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(v, _mm256_loadu_ps(C + i)));
        _mm256_storeu_ps(s + i, v);
    }
    float l[8];
    _mm256_storeu_ps(l, acc);
    return ly_ssm_row_from(l, s, B, C, dA, xdt, whole, N);
}

/* ssm.c's columns (Mamba1), 8 channels at once, each lane one channel's operations in ly_ssm_cols_portable's
 * order; the channels past the last whole vector run the portable columns. */
LY_AVX2 void ly_ssm_cols_avx2(float *s, const float *A, const float *B, const float *C, const float *x, const float *dt,
                              const float *dt_bias, const float *D, float *y, int64_t lo, int64_t hi, int64_t H,
                              int64_t N) {
    int64_t r = lo;
    for (; r + 8 <= hi; r += 8) {
        __m256 vsp = ly_softplus_poly_avx2(_mm256_add_ps(_mm256_loadu_ps(dt + r), _mm256_loadu_ps(dt_bias + r))),
               vx = _mm256_loadu_ps(x + r), vxdt = _mm256_mul_ps(vx, vsp), acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < N; i++) {
            __m256 d = ly_exp_avx2(_mm256_mul_ps(vsp, _mm256_loadu_ps(A + i * H + r)));
            __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(s + i * H + r), d),
                                     _mm256_mul_ps(_mm256_set1_ps(B[i]), vxdt));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(v, _mm256_set1_ps(C[i])));
            _mm256_storeu_ps(s + i * H + r, v);
        }
        _mm256_storeu_ps(y + r, _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(D + r), vx)));
    }
    ly_ssm_cols_portable(s, A, B, C, x, dt, dt_bias, D, y, r, hi, H, N);
}
#endif
