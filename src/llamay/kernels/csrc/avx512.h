/* Helpers shared by the AVX-512 tiles. x86 ISA units only. */
#ifndef LLAMAY_AVX512_H
#define LLAMAY_AVX512_H
#include "x86.h"

#define LY_INLINE LY_AVX512 static inline __attribute__((always_inline))
#define GROUP 16 /* rows per group: one per 32-bit lane */

/* 16 bytes at offset `at` of the block of each of 16 rows, as 4 vectors: vector c holds in 128-bit lane L
 * row 4L + c; then a dword transpose inside each 128-bit lane gives T[j] lane i = dword j of row i. */
LY_INLINE void load_transposed(const uint8_t *const p[GROUP], int at, __m512i T[4]) {
    __m512i z[4], t[4];
    for (int c = 0; c < 4; c++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p[c] + at)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[4 + c] + at)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[8 + c] + at)), 2);
        z[c] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p[12 + c] + at)), 3);
    }
    t[0] = _mm512_unpacklo_epi32(z[0], z[1]);
    t[1] = _mm512_unpackhi_epi32(z[0], z[1]);
    t[2] = _mm512_unpacklo_epi32(z[2], z[3]);
    t[3] = _mm512_unpackhi_epi32(z[2], z[3]);
    T[0] = _mm512_unpacklo_epi64(t[0], t[2]);
    T[1] = _mm512_unpackhi_epi64(t[0], t[2]);
    T[2] = _mm512_unpacklo_epi64(t[1], t[3]);
    T[3] = _mm512_unpackhi_epi64(t[1], t[3]);
}

/* A row group's blocks are read across 16 rows at once, too many streams for the hardware prefetchers:
 * while block b of a group is read, fetch the b-th share of the next group's bytes (rows are contiguous,
 * so the next group is next[0 .. GROUP * row_bytes)), one share of GROUP * block_bytes per block. */
LY_INLINE void prefetch_share(const uint8_t *next, const uint8_t *end, int64_t b, int block_bytes) {
    const uint8_t *lo = next + b * GROUP * block_bytes, *hi = lo + GROUP * block_bytes;
    for (const uint8_t *p = lo; p < hi && p < end; p += 64) _mm_prefetch((const char *)p, _MM_HINT_T1);
}

#endif
