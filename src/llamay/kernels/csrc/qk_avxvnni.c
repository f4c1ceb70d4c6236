/* The AVX-VNNI build of the 256-bit K-quant tiles. */
#include "common.h"
#if LY_X86
#define X8_TARGET LY_AVXVNNI
#define X8_VNNI 1
#define X8_ENTRY ly_tiles_qk_avxvnni
#include "qk_x8.h"
#endif
