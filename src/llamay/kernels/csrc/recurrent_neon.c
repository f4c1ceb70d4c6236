/* The recurrent ops' NEON kernels: the causal convolution's row (conv_x.h) and the gated delta rule's
 * passes (deltanet_x.h), 4 channels or columns at once, each the same float operations as its portable
 * version. */
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
#endif
