/* The AVX2 build of the 256-bit x16 tiles. */
#include "common.h"
#if LY_X86
#define X8_TARGET LY_AVX2
#define X8_VNNI 0
#define X8_ENTRY ly_tiles_x16_avx2
#include "x16_x8.h"
#endif
