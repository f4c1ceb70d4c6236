/* The causal depthwise convolution's row, 8 channels at once (conv_x.h; the same float operations per
 * channel as conv.c's portable row). */
#include "common.h"
#if LY_X86
#include "kernels.h"
#include "x86.h"

#define VEC __m256
#define W 8
#define LOAD _mm256_loadu_ps
#define STORE _mm256_storeu_ps
#define SET1 _mm256_set1_ps
#define ADD _mm256_add_ps
#define MUL _mm256_mul_ps
#define FN LY_AVX2 void ly_conv_row_avx2
#include "conv_x.h"
#endif
