/* The AVX-VNNI build of the 256-bit K-quant tiles. */
#define X8_TARGET LY_AVXVNNI
#define X8_VNNI 1
#define X8_ENTRY qk_tile_avxvnni
#include "qk_x8.h"
