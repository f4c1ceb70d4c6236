/* The AVX2 build of the 256-bit K-quant tiles. */
#define X8_TARGET LY_AVX2
#define X8_VNNI 0
#define X8_ENTRY qk_tile_avx2
#include "qk_x8.h"
