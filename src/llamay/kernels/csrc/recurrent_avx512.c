/* The recurrent ops' 16-wide kernels: the causal convolution's row (conv_x.h) and the gated delta rule's
 * passes (deltanet_x.h), each the same float operations per channel or column as its portable version. */
#include "common.h"
#if LY_X86
#include "graph.h"
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
#define ATTR LY_AVX512
#define ISA avx512
#include "deltanet_x.h"
#endif
