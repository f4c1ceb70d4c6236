/* The NEON (widening multiplies) build of the arm64 Q4/Q5/Q8 and lookup-format tiles (q32_a4.h). */
#include "common.h"
#if LY_ARM64
#define A4_TARGET LY_NEON
#define A4_DOT 0
#define A4_ENTRY ly_tiles_q32_neon
#include "q32_a4.h"
#endif
