/* The recurrent ops' 8-wide kernels: the causal convolution's row (conv_x.h) and the gated delta rule's
 * passes (deltanet_x.h), each the same float operations per channel or column as its portable version. */
#include "common.h"
#if LY_X86
#include "graph.h"
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
#define ATTR LY_AVX2
#define ISA avx2
#include "deltanet_x.h"
#endif
