/* The gated delta rule's per-token step, 16 value columns at once (deltanet_x.h; the same float operations
 * per column as deltanet.c's portable step). */
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
#define SUB _mm512_sub_ps
#define MUL _mm512_mul_ps
#define FN LY_AVX512 void ly_delta_step_avx512
#include "deltanet_x.h"
#endif
