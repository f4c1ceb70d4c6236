/* The AVX2 build of the 256-bit Q4/Q5/Q8 tiles. */
#include "common.h"
#if LY_X86
#define X8_TARGET LY_AVX2
#define X8_VNNI 0
#define X8_ENTRY ly_tiles_q32_avx2
#include "q32_x8.h"
#endif
