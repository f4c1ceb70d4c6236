/* The i8mm (smmla for token pairs, sdot for one) build of the arm64 K-quant tiles (qk_a4.h). */
#include "common.h"
#if LY_ARM64
#if LY_ARM_I8MM
#define A4_TARGET LY_I8MM
#define A4_DOT 2
#define A4_ENTRY ly_tiles_qk_i8mm
#include "qk_a4.h"
#endif
#endif
