/* The dotprod (sdot) build of the arm64 Q4/Q5/Q8 and lookup-format tiles (q32_a4.h). */
#include "common.h"
#if LY_ARM64
#if LY_ARM_DOTPROD
#define A4_TARGET LY_DOTPROD
#define A4_DOT 1
#define A4_ENTRY ly_tiles_q32_dotprod
#include "q32_a4.h"
#endif
#endif
