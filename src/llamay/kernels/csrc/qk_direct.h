/* The few-token K-quant path (decode), included by qk_avx2.c, qk_avxvnni.c (through qk_x8.h) and qk_avx512.c
 * after they define QK_TARGET (a target attribute); QK_MADD_ACC(acc, a, b) (acc + madd_epi16(a, b)) may be
 * defined as vpdpwssd, the same integers, else it is madd + add.
 * Each row's super-block is decoded in registers and its integer raw and corr (qk.h) summed in 8 int32
 * lanes: maddubs gives the exact int16 pair sums of q and x (q <= 63, |x| <= 127: no saturation), madd with
 * the sub-block scales widens and scales them. 8 rows' lane sums are transposed and added to lanes = rows
 * (exact integers), and then one float step per super-block, lanes = rows, follows qk.h's sequence. */
#include "qk_unpack.h"

#define DIRECT_ROWS 8 /* rows per float vector */

#ifndef QK_MADD_ACC
#define QK_MADD_ACC(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#endif

/* sc (int16 [16]) -> v[b] = sc[2b] in int16 lanes 0-7, sc[2b + 1] in lanes 8-15: the scales for madd against
 * maddubs(q[b], x) of 32-block b, whose lanes 0-7 hold sub-block 2b's pair sums and 8-15 sub-block 2b + 1's */
QK_TARGET static inline void qk_block_scales(__m256i sc, __m256i v[8]) {
    const __m256i lo = _mm256_permute2x128_si256(sc, sc, 0x00), hi = _mm256_permute2x128_si256(sc, sc, 0x11);
    const __m256i m[4] = {
        _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3),
        _mm256_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7),
        _mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9,
                         10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11),
        _mm256_setr_epi8(12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13,
                         14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15)};
    for (int b = 0; b < 4; b++) {
        v[b] = _mm256_shuffle_epi8(lo, m[b]);
        v[b + 4] = _mm256_shuffle_epi8(hi, m[b]);
    }
}

/* lane i of the result = the sum of v[i]'s 8 lanes (exact int32) */
QK_TARGET static inline __m256i qk_sum_rows(const __m256i v[8]) {
    __m256i h0 = _mm256_hadd_epi32(v[0], v[1]), h1 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h2 = _mm256_hadd_epi32(v[4], v[5]), h3 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3); /* [rows 0-3 | 4-7] x half */
    return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

/* acc (lanes = rows) + qk.h's float step of one super-block: raw, corr, d, dmin lanes = rows, dx the token's */
QK_TARGET static inline __m256 qk_step(int has_min, __m256 acc, __m256i raw, __m256i corr, __m256 d, __m256 dmin,
                                       float dx) {
    const __m256 dxv = _mm256_set1_ps(dx), ddx = _mm256_mul_ps(d, dxv);
    if (!has_min) return _mm256_add_ps(acc, _mm256_mul_ps(ddx, _mm256_cvtepi32_ps(_mm256_sub_epi32(raw, corr))));
    const __m256 mdx = _mm256_mul_ps(dmin, dxv);
    return _mm256_add_ps(acc, _mm256_sub_ps(_mm256_mul_ps(ddx, _mm256_cvtepi32_ps(raw)),
                                            _mm256_mul_ps(mdx, _mm256_cvtepi32_ps(corr))));
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
            _mm_prefetch((const char *)p, _MM_HINT_T1);
        __m256i s0 = LOAD(s16 + s * 16), s1 = LOAD(s16 + s * 16 + 8); /* |s16| <= 2032: packs is exact */
        __m256i sx = _mm256_permute4x64_epi64(_mm256_packs_epi32(s0, s1), 0xd8);
        const int8_t *xs = x + s * 256;
        __m256i raw[8], corr[8];
        uint16_t dh[8], mh[8];
        for (int i = 0; i < 8; i++) {
            const uint8_t *blk = rows[i] + s * type_size;
            __m256i sc, cm, q[8], scb[8];
            g->unpack(blk, q);
            g->scales(blk, &sc, &cm);
            memcpy(&dh[i], blk + g->d_off, 2);
            if (has_min) memcpy(&mh[i], blk + g->dmin_off, 2);
            qk_block_scales(sc, scb);
            __m256i r = _mm256_setzero_si256();
            for (int b = 0; b < 8; b++) r = QK_MADD_ACC(r, _mm256_maddubs_epi16(q[b], LOAD(xs + b * 32)), scb[b]);
            if (has_min) {
                raw[i] = r;
                corr[i] = _mm256_madd_epi16(cm, sx);
            } else { /* raw - corr, summed in any order */
                raw[i] = _mm256_sub_epi32(r, _mm256_madd_epi16(cm, sx));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dh));
        if (has_min) {
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)mh));
            acc = qk_step(1, acc, qk_sum_rows(raw), qk_sum_rows(corr), d, dmin, dx[s]);
        } else {
            acc = qk_step(0, acc, qk_sum_rows(raw), _mm256_setzero_si256(), d, d, dx[s]);
        }
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
            const float *dx = a->d + t * nsb; /* one scale per super-block */
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
