/* The AVX2 build of the 256-bit K-quant tiles. */
#include "common.h"
#if LY_X86
#define X8_TARGET LY_AVX2
#define X8_VNNI 0
#define X8_ENTRY ly_tiles_qk_avx2
#include "qk_x8.h"
#endif
