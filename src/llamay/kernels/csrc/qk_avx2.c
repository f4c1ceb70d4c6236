/* AVX2 K-quant tiles. Rows go in groups of 8, one row per float lane of the accumulator, and lane r follows
 * exactly the scalar sequence of qk.h for row r, so results equal the portable path bit for bit.
 * Many tokens: a group's super-blocks are decoded once per chunk of tokens into q bytes and [block][row]
 * tables, then reused for every token. Few tokens (decode): each row's super-block is decoded in registers,
 * its 8 block terms computed with lanes = blocks, and 8 rows' terms transposed to lanes = rows. */
#include "qk.h"
#include <immintrin.h>
#include <stdlib.h>

#define GROUP 8   /* rows per group = float lanes */
#define CHUNK 64  /* tokens per decoded group: their activations stay in L2 */

typedef struct {            /* one super-block of a row group, [block][row] */
    int32_t sca[8][GROUP];  /* sc[2b] */
    int32_t scb[8][GROUP];  /* sc[2b + 1] */
    int32_t cm[8][GROUP];   /* int16 pair (cm[2b], cm[2b + 1]) for madd against (s16[2b], s16[2b + 1]) */
    float d[GROUP], dmin[GROUP];
} group_tab;

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

/* Decodes rows r .. r + 7 (rows past n_valid repeat the last valid one) into q [nsb][GROUP][256] and tab. */
LY_AVX2 static void decode_group(const qk_format *f, unpack_fn unpack, const uint8_t *w, size_t row_bytes,
                                 int64_t r, int n_valid, int64_t nsb, uint8_t *q, group_tab *tab) {
    for (int i = 0; i < GROUP; i++) {
        const uint8_t *row = w + (size_t)(r + (i < n_valid ? i : n_valid - 1)) * row_bytes;
        for (int64_t s = 0; s < nsb; s++) {
            const uint8_t *blk = row + s * f->type_size;
            qk_scales c;
            __m256i v[8];
            unpack(blk, v);
            for (int j = 0; j < 8; j++) STORE(q + (s * GROUP + i) * 256 + j * 32, v[j]);
            f->scales(blk, &c);
            group_tab *t = &tab[s];
            for (int b = 0; b < 8; b++) {
                t->sca[b][i] = c.sc[2 * b];
                t->scb[b][i] = c.sc[2 * b + 1];
                t->cm[b][i] = (int32_t)((uint32_t)(uint16_t)c.cm[2 * b] | (uint32_t)(uint16_t)c.cm[2 * b + 1] << 16);
            }
            t->d[i] = c.d;
            t->dmin[i] = c.dmin;
        }
    }
}

/* per row lane: dot16 of the first and the second half of a 32-value block of 8 rows with x */
LY_AVX2 static inline void block_dots(const uint8_t *q, __m256i x, __m256i *first, __m256i *second) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p[GROUP];
    for (int i = 0; i < GROUP; i++) /* q <= 63, |x| <= 127: pair sums fit int16 */
        p[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(LOAD(q + i * 256), x), ones);
    __m256i h0 = _mm256_hadd_epi32(p[0], p[1]), h1 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i h2 = _mm256_hadd_epi32(p[4], p[5]), h3 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3); /* [rows first halves | second] */
    *first = _mm256_permute2x128_si256(g0, g1, 0x20);
    *second = _mm256_permute2x128_si256(g0, g1, 0x31);
}

/* 8 rows x one token over all super-blocks; lanes = rows */
LY_AVX2 static inline __m256 group_dot(int has_min, const uint8_t *q, const group_tab *tab, int64_t nsb,
                                       const int8_t *x, const float *dx, const int32_t *s16) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const group_tab *t = &tab[s];
        for (int b = 0; b < 8; b++) {
            int64_t blk = s * 8 + b;
            __m256i first, second;
            block_dots(q + s * GROUP * 256 + b * 32, LOAD(x + blk * 32), &first, &second);
            __m256i raw = _mm256_add_epi32(_mm256_mullo_epi32(first, LOAD(t->sca[b])),
                                           _mm256_mullo_epi32(second, LOAD(t->scb[b])));
            uint32_t sp = (uint32_t)(uint16_t)s16[2 * blk] | (uint32_t)(uint16_t)s16[2 * blk + 1] << 16;
            __m256i corr = _mm256_madd_epi16(LOAD(t->cm[b]), _mm256_set1_epi32((int32_t)sp));
            __m256 dxv = _mm256_set1_ps(dx[blk]), ddx = _mm256_mul_ps(_mm256_loadu_ps(t->d), dxv);
            __m256 c;
            if (has_min) {
                __m256 mdx = _mm256_mul_ps(_mm256_loadu_ps(t->dmin), dxv);
                c = _mm256_sub_ps(_mm256_mul_ps(ddx, _mm256_cvtepi32_ps(raw)),
                                  _mm256_mul_ps(mdx, _mm256_cvtepi32_ps(corr)));
            } else {
                c = _mm256_mul_ps(ddx, _mm256_cvtepi32_ps(_mm256_sub_epi32(raw, corr)));
            }
            acc = _mm256_add_ps(acc, c);
        }
    }
    return acc;
}

/* ---- few tokens: each row's super-block decoded in registers, lanes = the 8 blocks of a super-block ---- */

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

/* one row's super-block with one token's: lanes = blocks, each the canonical step's term for the block */
LY_AVX2 static inline __m256 sb_terms(int has_min, const __m256i q[8], __m256i sc, __m256i cm, float d, float dmin,
                                      const int8_t *x, __m256 dxv, __m256i sx) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p[8];
    for (int b = 0; b < 8; b++)
        p[b] = _mm256_madd_epi16(_mm256_maddubs_epi16(q[b], LOAD(x + b * 32)), ones);
    __m256i h0 = _mm256_hadd_epi32(p[0], p[1]), h1 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i h2 = _mm256_hadd_epi32(p[4], p[5]), h3 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3);
    __m256i first = _mm256_permute2x128_si256(g0, g1, 0x20), second = _mm256_permute2x128_si256(g0, g1, 0x31);
    __m256i sca = _mm256_srai_epi32(_mm256_slli_epi32(sc, 16), 16), scb = _mm256_srai_epi32(sc, 16);
    __m256i raw = _mm256_add_epi32(_mm256_mullo_epi32(first, sca), _mm256_mullo_epi32(second, scb));
    __m256i corr = _mm256_madd_epi16(cm, sx);
    __m256 ddx = _mm256_mul_ps(_mm256_set1_ps(d), dxv);
    if (!has_min) return _mm256_mul_ps(ddx, _mm256_cvtepi32_ps(_mm256_sub_epi32(raw, corr)));
    __m256 mdx = _mm256_mul_ps(_mm256_set1_ps(dmin), dxv);
    return _mm256_sub_ps(_mm256_mul_ps(ddx, _mm256_cvtepi32_ps(raw)), _mm256_mul_ps(mdx, _mm256_cvtepi32_ps(corr)));
}

/* acc (lanes = rows) + the terms of 8 rows (c[i]: lanes = blocks), block after block */
LY_AVX2 static inline __m256 add_transposed(__m256 acc, const __m256 c[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(c[i], c[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(c[i], c[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int b = 0; b < 4; b++) acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(u[b], u[b + 4], 0x20));
    for (int b = 0; b < 4; b++) acc = _mm256_add_ps(acc, _mm256_permute2f128_ps(u[b], u[b + 4], 0x31));
    return acc;
}

/* 8 rows (row pointers) x one token; lanes = rows */
LY_AVX2 static inline __attribute__((always_inline)) __m256 direct_dot(int has_min, const qk_avx2_format *g, int type_size,
                                        const uint8_t *const rows[8], int64_t nsb, const int8_t *x,
                                        const float *dx, const int32_t *s16) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        __m256i s0 = LOAD(s16 + s * 16), s1 = LOAD(s16 + s * 16 + 8); /* |s16| <= 2032: packs is exact */
        __m256i sx = _mm256_permute4x64_epi64(_mm256_packs_epi32(s0, s1), 0xd8);
        __m256 dxv = _mm256_loadu_ps(dx + s * 8), c[8];
        for (int i = 0; i < 8; i++) {
            const uint8_t *blk = rows[i] + s * type_size;
            __m256i sc, cm, q[8];
            g->unpack(blk, q);
            g->scales(blk, &sc, &cm);
            float d = f16_at(blk + g->d_off), dmin = g->dmin_off < 0 ? 0.0f : f16_at(blk + g->dmin_off);
            c[i] = sb_terms(has_min, q, sc, cm, d, dmin, x + s * 256, dxv, sx);
        }
        acc = add_transposed(acc, c);
    }
    return acc;
}

LY_AVX2 static inline __attribute__((always_inline)) void tile_direct(const qk_format *f, const qk_avx2_format *g, const uint8_t *w, size_t row_bytes,
                                int64_t r0, int64_t r1, const ly_act *a, int64_t t0, int64_t t1,
                                float *y, int64_t ldy) {
    int64_t k = a->k, nsb = k / 256;
    for (int64_t r = r0; r < r1; r += GROUP) {
        int n_valid = r1 - r < GROUP ? (int)(r1 - r) : GROUP;
        const uint8_t *rows[8];
        for (int i = 0; i < GROUP; i++) rows[i] = w + (size_t)(r + (i < n_valid ? i : n_valid - 1)) * row_bytes;
        for (int64_t t = t0; t < t1; t++) {
            const int8_t *x = a->q + t * k;
            const float *dx = a->d + t * (k / 32);
            const int32_t *s16 = a->s16 + t * (k / 16);
            __m256 acc = f->has_min ? direct_dot(1, g, f->type_size, rows, nsb, x, dx, s16)
                                    : direct_dot(0, g, f->type_size, rows, nsb, x, dx, s16);
            float out[GROUP];
            _mm256_storeu_ps(out, acc);
            for (int i = 0; i < n_valid; i++) y[t * ldy + r + i] = out[i];
        }
    }
}

LY_AVX2 static void tile_avx2(const qk_format *f, unpack_fn unpack, const uint8_t *w, size_t row_bytes,
                              int64_t r0, int64_t r1, const ly_act *a, int64_t t0, int64_t t1,
                              float *y, int64_t ldy) {
    int64_t k = a->k, nsb = k / 256;
    uint8_t *q = aligned_alloc(32, (size_t)nsb * GROUP * 256);
    group_tab *tab = aligned_alloc(32, (size_t)nsb * sizeof *tab);
    for (int64_t tc = t0; tc < t1; tc += CHUNK) {
        int64_t te = tc + CHUNK < t1 ? tc + CHUNK : t1;
        for (int64_t r = r0; r < r1; r += GROUP) {
            int n_valid = r1 - r < GROUP ? (int)(r1 - r) : GROUP;
            decode_group(f, unpack, w, row_bytes, r, n_valid, nsb, q, tab);
            for (int64_t t = tc; t < te; t++) {
                __m256 acc = f->has_min
                    ? group_dot(1, q, tab, nsb, a->q + t * k, a->d + t * (k / 32), a->s16 + t * (k / 16))
                    : group_dot(0, q, tab, nsb, a->q + t * k, a->d + t * (k / 32), a->s16 + t * (k / 16));
                float out[GROUP];
                _mm256_storeu_ps(out, acc);
                for (int i = 0; i < n_valid; i++) y[t * ldy + r + i] = out[i];
            }
        }
    }
    free(q);
    free(tab);
}

#define FEW 4 /* below this many tokens a tile reads the weights directly instead of decoding a group */

static const qk_avx2_format AVX2_FORMATS[] = { /* indexed by type - QK_Q2_K */
    {unpack_q2k, scales_q2k, 80, 82}, {unpack_q3k, scales_q3k, 108, -1}, {unpack_q4k, scales_q4k, 0, 2},
    {unpack_q5k, scales_q4k, 0, 2}, {unpack_q6k, scales_q6k, 208, -1},
};

/* per-type entry points, so that the format's unpack and scales inline into the direct path */
#define QK_AVX2(name, type)                                                                              \
    LY_AVX2 static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,       \
                             int64_t t0, int64_t t1, float *y, int64_t ldy) {                             \
        const qk_avx2_format *g = &AVX2_FORMATS[type - QK_Q2_K];                                          \
        if (t1 - t0 < FEW) tile_direct(qk_format_of(type), g, w, rb, r0, r1, a, t0, t1, y, ldy);         \
        else tile_avx2(qk_format_of(type), g->unpack, w, rb, r0, r1, a, t0, t1, y, ldy);                  \
    }
QK_AVX2(tile_q2k, QK_Q2_K)
QK_AVX2(tile_q3k, QK_Q3_K)
QK_AVX2(tile_q4k, QK_Q4_K)
QK_AVX2(tile_q5k, QK_Q5_K)
QK_AVX2(tile_q6k, QK_Q6_K)

ly_tile_fn qk_tile_avx2(int type) {
    switch (type) {
    case QK_Q2_K: return tile_q2k;
    case QK_Q3_K: return tile_q3k;
    case QK_Q4_K: return tile_q4k;
    case QK_Q5_K: return tile_q5k;
    case QK_Q6_K: return tile_q6k;
    default: return NULL;
    }
}
