/* K-quant super-blocks in AVX2 registers: the unpackers (the same q bytes as qk.c's portable ones) and the
 * scales as int16 vectors. Shared by the AVX2 and AVX-512 tiles (an AVX-512 function inlines these). */
#ifndef LLAMAY_QK_UNPACK_H
#define LLAMAY_QK_UNPACK_H
#include "qk.h"
#include "x86.h"

typedef void (*unpack_fn)(const uint8_t *blk, __m256i q[8]); /* q[j]: values 32j .. 32j + 31 */

/* F16C conversion: exact, so equal to ly_f16_to_f32 */
LY_AVX2 static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

#define LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define STORE(p, v) _mm256_storeu_si256((__m256i *)(p), v)

LY_AVX2 static inline __m256i bits(__m256i v, int shift, int mask) {
    return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8((char)mask));
}

/* 0xff in each byte of v where bit `bit` is set */
LY_AVX2 static inline __m256i bit_set(__m256i v, int bit) {
    __m256i m = _mm256_set1_epi8((char)(1 << bit));
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, m), m);
}

/* The unpackers give the same q bytes as the portable ones in qk.c (layouts described there). */
LY_AVX2 static inline void unpack_q2k(const uint8_t *blk, __m256i q[8]) {
    for (int half = 0; half < 2; half++) {
        __m256i v = LOAD(blk + 16 + half * 32);
        for (int j = 0; j < 4; j++) q[half * 4 + j] = bits(v, 2 * j, 3);
    }
}

LY_AVX2 static inline void unpack_q3k(const uint8_t *blk, __m256i q[8]) {
    __m256i hm = LOAD(blk), four = _mm256_set1_epi8(4);
    for (int half = 0; half < 2; half++) {
        __m256i v = LOAD(blk + 32 + half * 32);
        for (int j = 0; j < 4; j++) {
            __m256i hi = _mm256_and_si256(bit_set(hm, half * 4 + j), four);
            q[half * 4 + j] = _mm256_or_si256(bits(v, 2 * j, 3), hi);
        }
    }
}

LY_AVX2 static inline void unpack_q4k(const uint8_t *blk, __m256i q[8]) {
    for (int g = 0; g < 4; g++) {
        __m256i v = LOAD(blk + 16 + g * 32);
        q[2 * g] = bits(v, 0, 15);
        q[2 * g + 1] = bits(v, 4, 15);
    }
}

LY_AVX2 static inline void unpack_q5k(const uint8_t *blk, __m256i q[8]) {
    __m256i qh = LOAD(blk + 16), sixteen = _mm256_set1_epi8(16);
    for (int b = 0; b < 8; b++) {
        __m256i lo = bits(LOAD(blk + 48 + (b >> 1) * 32), 4 * (b & 1), 15);
        q[b] = _mm256_or_si256(lo, _mm256_and_si256(bit_set(qh, b), sixteen));
    }
}

LY_AVX2 static inline void unpack_q6k(const uint8_t *blk, __m256i q[8]) {
    for (int half = 0; half < 2; half++) {
        __m256i qh = LOAD(blk + 128 + half * 32);
        for (int j = 0; j < 4; j++) {
            __m256i lo = bits(LOAD(blk + half * 64 + (j & 1) * 32), 4 * (j >> 1), 15);
            __m256i hi = _mm256_slli_epi16(bits(qh, 2 * j, 3), 4);
            q[half * 4 + j] = _mm256_or_si256(lo, hi);
        }
    }
}

typedef struct {
    unpack_fn unpack;
    void (*scales)(const uint8_t *blk, __m256i *sc, __m256i *cm); /* int16 [16] each, as qk_scales */
    int d_off, dmin_off;                                           /* f16 fields; dmin_off -1: none */
} qk_avx2_format;

LY_AVX2 static void scales_q2k(const uint8_t *blk, __m256i *sc, __m256i *cm) {
    __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)blk));
    *sc = _mm256_and_si256(v, _mm256_set1_epi16(15));
    *cm = _mm256_srli_epi16(v, 4);
}

LY_AVX2 static void scales_q3k(const uint8_t *blk, __m256i *sc, __m256i *cm) {
    qk_scales c;
    qk_format_of(QK_Q3_K)->scales(blk, &c);
    *sc = LOAD(c.sc);
    *cm = LOAD(c.cm);
}

/* the 6-bit packing of qk.c's scales_q4k, four bytes at a time */
LY_AVX2 static void scales_q4k(const uint8_t *blk, __m256i *sc, __m256i *cm) {
    uint32_t w[3];
    memcpy(w, blk + 4, 12);
    uint32_t s_lo = w[0] & 0x3f3f3f3f, m_lo = w[1] & 0x3f3f3f3f;
    uint32_t s_hi = (w[2] & 0x0f0f0f0f) | ((w[0] >> 2) & 0x30303030);
    uint32_t m_hi = ((w[2] >> 4) & 0x0f0f0f0f) | ((w[1] >> 2) & 0x30303030);
    __m128i s8 = _mm_setr_epi32((int)s_lo, (int)s_hi, 0, 0), m8 = _mm_setr_epi32((int)m_lo, (int)m_hi, 0, 0);
    *sc = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(s8, s8)); /* each scale for both 16-value halves */
    *cm = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
}

LY_AVX2 static void scales_q6k(const uint8_t *blk, __m256i *sc, __m256i *cm) {
    *sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));
    *cm = _mm256_slli_epi16(*sc, 5);
}

static const qk_avx2_format QK_AVX2_FORMATS[] = { /* indexed by type - QK_Q2_K */
    {unpack_q2k, scales_q2k, 80, 82}, {unpack_q3k, scales_q3k, 108, -1}, {unpack_q4k, scales_q4k, 0, 2},
    {unpack_q5k, scales_q4k, 0, 2}, {unpack_q6k, scales_q6k, 208, -1},
};
/* Row i of a super-block's [block][row] scale tables (rows per table: `rows`): sc[2b], sc[2b + 1], and the
 * int16 pair (cm[2b], cm[2b + 1]) packed for madd against (s16[2b], s16[2b + 1]). */
static inline void qk_table_row(const qk_scales *c, int rows, int i, int32_t *sca, int32_t *scb, int32_t *cm) {
    for (int b = 0; b < 8; b++) {
        sca[b * rows + i] = c->sc[2 * b];
        scb[b * rows + i] = c->sc[2 * b + 1];
        cm[b * rows + i] = (int32_t)((uint32_t)(uint16_t)c->cm[2 * b] | (uint32_t)(uint16_t)c->cm[2 * b + 1] << 16);
    }
}
#endif
