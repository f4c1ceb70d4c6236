/* The AVX-VNNI build of the 256-bit Q4/Q5/Q8 tiles. */
#include "common.h"
#if LY_X86
#define X8_TARGET LY_AVXVNNI
#define X8_VNNI 1
#define X8_ENTRY ly_tiles_q32_avxvnni
#include "q32_x8.h"
#endif
