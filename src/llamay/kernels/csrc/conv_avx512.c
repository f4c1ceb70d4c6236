/* The causal depthwise convolution's row, 16 channels at once (conv_x.h; the same float operations per
 * channel as conv.c's portable row). */
#include "common.h"
#if LY_X86
#include "kernels.h"
#include "x86.h"

#define VEC __m512
#define W 16
#define LOAD _mm512_loadu_ps
#define STORE _mm512_storeu_ps
#define SET1 _mm512_set1_ps
#define ADD _mm512_add_ps
#define MUL _mm512_mul_ps
#define FN LY_AVX512 void ly_conv_row_avx512
#include "conv_x.h"
#endif
