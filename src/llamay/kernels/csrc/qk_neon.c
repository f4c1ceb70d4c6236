/* The NEON (widening multiplies) build of the arm64 K-quant tiles (qk_a4.h). */
#include "common.h"
#if LY_ARM64
#define A4_TARGET LY_NEON
#define A4_DOT 0
#define A4_ENTRY ly_tiles_qk_neon
#include "qk_a4.h"
#endif
