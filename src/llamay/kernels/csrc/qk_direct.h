/* The few-token K-quant path (decode), included by qk_avx2.c and qk_avx512.c after they define
 * QK_TARGET (a target attribute) and QK_DOT32(q, x) (the 8 int32 sums of 4 products of unsigned q and signed
 * x bytes: maddubs + madd on AVX2, vpdpbusd with VNNI; the same integers, as q <= 63 never saturates).
 * Each row's super-block is decoded in registers, its 8 block terms computed with lanes = blocks, and
 * 8 rows' terms transposed to lanes = rows, so each lane follows qk.h's sequence for its row. */
#include "qk_unpack.h"

#define DIRECT_ROWS 8 /* rows per float vector */

/* one row's super-block with one token's: lanes = blocks, each the canonical step's term for the block */
QK_TARGET static inline __m256 sb_terms(int has_min, const __m256i q[8], __m256i sc, __m256i cm, float d, float dmin,
                                      const int8_t *x, __m256 dxv, __m256i sx) {
    __m256i p[8];
    for (int b = 0; b < 8; b++) p[b] = QK_DOT32(q[b], LOAD(x + b * 32));
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
QK_TARGET static inline __m256 add_transposed(__m256 acc, const __m256 c[8]) {
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
QK_TARGET static inline __attribute__((always_inline)) __m256 direct_dot(int has_min, const qk_avx2_format *g, int type_size,
                                        const uint8_t *const rows[8], int64_t nsb, const int8_t *x,
                                        const float *dx, const int32_t *s16, const uint8_t *next,
                                        const uint8_t *end) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        /* 8 rows at once are too many streams for the prefetchers: fetch the s-th share of the next
         * group (its rows are contiguous) while super-block s of this one is read */
        for (const uint8_t *p = next + s * 8 * type_size, *e = p + 8 * type_size; p < e && p < end; p += 64)
            _mm_prefetch((const char *)p, _MM_HINT_T0);
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

QK_TARGET static inline __attribute__((always_inline)) void tile_direct(const qk_format *f, const qk_avx2_format *g, const uint8_t *w, size_t row_bytes,
                                int64_t r0, int64_t r1, const ly_act *a, int64_t t0, int64_t t1,
                                float *y, int64_t ldy) {
    int64_t k = a->k, nsb = k / 256;
    for (int64_t r = r0; r < r1; r += DIRECT_ROWS) {
        int n_valid = r1 - r < DIRECT_ROWS ? (int)(r1 - r) : DIRECT_ROWS;
        const uint8_t *rows[8];
        for (int i = 0; i < DIRECT_ROWS; i++) rows[i] = w + (size_t)(r + (i < n_valid ? i : n_valid - 1)) * row_bytes;
        for (int64_t t = t0; t < t1; t++) {
            const int8_t *x = a->q + t * k;
            const float *dx = a->d + t * (k / 32);
            const int32_t *s16 = a->s16 + t * (k / 16);
            const uint8_t *next = w + (size_t)(r + DIRECT_ROWS) * row_bytes, *end = w + (size_t)r1 * row_bytes;
            __m256 acc = f->has_min ? direct_dot(1, g, f->type_size, rows, nsb, x, dx, s16, next, end)
                                    : direct_dot(0, g, f->type_size, rows, nsb, x, dx, s16, next, end);
            float out[DIRECT_ROWS];
            _mm256_storeu_ps(out, acc);
            for (int i = 0; i < n_valid; i++) y[t * ldy + r + i] = out[i];
        }
    }
}

#define QK_FEW 4 /* below this many tokens a tile reads the weights directly instead of decoding a group */

/* A path's entry for one type (QK_ENTRIES(QK_ENTRY)): the format's unpack and scales inline into the
 * direct path; from QK_FEW tokens on, QK_BUFFERED (the includer's group-decoding tile) runs. */
#define QK_ENTRY(name, type)                                                                             \
    QK_TARGET static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,     \
                               int64_t t0, int64_t t1, float *y, int64_t ldy) {                           \
        const qk_avx2_format *g = &QK_AVX2_FORMATS[type - QK_Q2_K];                                       \
        if (t1 - t0 < QK_FEW) tile_direct(qk_format_of(type), g, w, rb, r0, r1, a, t0, t1, y, ldy);      \
        else QK_BUFFERED(qk_format_of(type), g->unpack, w, rb, r0, r1, a, t0, t1, y, ldy);                \
    }
