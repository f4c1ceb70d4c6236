/* The dotprod (sdot) build of the arm64 K-quant tiles (qk_a4.h). */
#include "common.h"
#if LY_ARM64
#if LY_ARM_DOTPROD
#define A4_TARGET LY_DOTPROD
#define A4_DOT 1
#define A4_ENTRY ly_tiles_qk_dotprod
#include "qk_a4.h"
#endif
#endif
