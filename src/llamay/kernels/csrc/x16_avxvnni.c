/* The AVX-VNNI build of the 256-bit x16 tiles. */
#include "common.h"
#if LY_X86
#define X8_TARGET LY_AVXVNNI
#define X8_VNNI 1
#define X8_ENTRY ly_tiles_x16_avxvnni
#include "x16_x8.h"
#endif
