/* The gated delta rule's per-token step, 8 value columns at once (deltanet_x.h; the same float operations
 * per column as deltanet.c's portable step). */
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
#define SUB _mm256_sub_ps
#define MUL _mm256_mul_ps
#define FN LY_AVX2 void ly_delta_step_avx2
#include "deltanet_x.h"
#endif
