/* The i8mm (smmla for token pairs, sdot for one) build of the arm64 Q4/Q5/Q8 and lookup-format tiles (q32_a4.h). */
#include "common.h"
#if LY_ARM64
#if LY_ARM_I8MM
#define A4_TARGET LY_I8MM
#define A4_DOT 2
#define A4_ENTRY ly_tiles_q32_i8mm
#include "q32_a4.h"
#endif
#endif
