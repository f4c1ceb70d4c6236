/* 256-bit K-quant tiles, built twice: AVX2 (qk_avx2.c) and AVX-VNNI (qk_avxvnni.c); the includer defines
 * X8_TARGET, X8_VNNI and X8_ENTRY as for q32_x8.h. Rows go in groups of 8, one row per float lane of the
 * accumulator, and lane r follows exactly the scalar sequence of qk.h for row r, so results equal the
 * portable path bit for bit.
 * Many tokens: a group's super-blocks are decoded once per chunk of tokens into q bytes and per-row scale
 * tables, then reused for every token: each row's raw and corr of a super-block are summed in 8 int32 lanes
 * (maddubs, then madd with the sub-block scales), the 8 rows' sums transposed and added to lanes = rows, and
 * one float step per super-block follows. Few tokens (decode): qk_direct.h, the same integers from registers. */
#include "kernels.h"
#include "qk_unpack.h"
#include <stdlib.h>

#define QK_TARGET X8_TARGET
#if X8_VNNI /* vpdpwssd: acc + the int16 pair products, as madd + add (no saturation either way here) */
#define QK_MADD_ACC(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#else
#define QK_MADD_ACC(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#endif

#include "qk_direct.h" /* also the helpers qk_block_scales, qk_sum_rows, qk_step */

#define GROUP 8   /* rows per group = float lanes */
#define CHUNK 64  /* tokens per decoded group: their activations stay in L2 */

typedef struct {              /* one super-block of a row group */
    int16_t sc[GROUP][8][16]; /* row i, block b: sc[2b] x 8, sc[2b + 1] x 8 (qk_block_scales) */
    int16_t cm[GROUP][16];    /* row i: cm[0 .. 15] */
    float d[GROUP], dmin[GROUP];
} group_tab;

/* Decodes rows r .. r + 7 (rows past n_valid repeat the last valid one) into q [nsb][GROUP][256] and tab. */
X8_TARGET static void decode_group(const qk_avx2_format *g, int type_size, const uint8_t *w, size_t row_bytes,
                                   int64_t r, int n_valid, int64_t nsb, uint8_t *q, group_tab *tab) {
    for (int i = 0; i < GROUP; i++) {
        const uint8_t *row = w + (size_t)(r + (i < n_valid ? i : n_valid - 1)) * row_bytes;
        for (int64_t s = 0; s < nsb; s++) {
            const uint8_t *blk = row + s * type_size;
            group_tab *t = &tab[s];
            __m256i v[8], sc, cm;
            g->unpack(blk, v);
            for (int j = 0; j < 8; j++) STORE(q + (s * GROUP + i) * 256 + j * 32, v[j]);
            g->scales(blk, &sc, &cm);
            qk_block_scales(sc, v);
            for (int b = 0; b < 8; b++) STORE(t->sc[i][b], v[b]);
            STORE(t->cm[i], cm);
            t->d[i] = f16_at(blk + g->d_off);
            t->dmin[i] = g->dmin_off < 0 ? 0.0f : f16_at(blk + g->dmin_off);
        }
    }
}

/* 8 rows x one token over all super-blocks; lanes = rows */
X8_TARGET static inline __m256 group_dot(int has_min, const uint8_t *q, const group_tab *tab, int64_t nsb,
                                         const int8_t *x, const float *dx, const int32_t *s16) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const group_tab *t = &tab[s];
        const uint8_t *qs = q + s * GROUP * 256;
        const int8_t *xs = x + s * 256;
        __m256i raw[GROUP], corr[GROUP];
        for (int i = 0; i < GROUP; i++) raw[i] = _mm256_setzero_si256();
        for (int b = 0; b < 8; b++) {
            const __m256i xv = LOAD(xs + b * 32);
            for (int i = 0; i < GROUP; i++)
                raw[i] = QK_MADD_ACC(raw[i], _mm256_maddubs_epi16(LOAD(qs + i * 256 + b * 32), xv), LOAD(t->sc[i][b]));
        }
        __m256i s0 = LOAD(s16 + s * 16), s1 = LOAD(s16 + s * 16 + 8); /* |s16| <= 2032: packs is exact */
        __m256i sx = _mm256_permute4x64_epi64(_mm256_packs_epi32(s0, s1), 0xd8);
        for (int i = 0; i < GROUP; i++) {
            __m256i c = _mm256_madd_epi16(LOAD(t->cm[i]), sx);
            if (has_min) corr[i] = c;
            else raw[i] = _mm256_sub_epi32(raw[i], c); /* raw - corr, summed in any order */
        }
        const __m256 d = _mm256_load_ps(t->d);
        if (has_min) acc = qk_step(1, acc, qk_sum_rows(raw), qk_sum_rows(corr), d, _mm256_load_ps(t->dmin), dx[s]);
        else acc = qk_step(0, acc, qk_sum_rows(raw), _mm256_setzero_si256(), d, d, dx[s]);
    }
    return acc;
}

X8_TARGET static void tile_avx2(const qk_format *f, unpack_fn unpack, const uint8_t *w, size_t row_bytes,
                              int64_t r0, int64_t r1, const ly_act *a, int64_t t0, int64_t t1,
                              float *y, int64_t ldy) {
    (void)unpack;
    const qk_avx2_format *g = &QK_AVX2_FORMATS[f->type - QK_Q2_K];
    int64_t k = a->k, nsb = k / 256;
    uint8_t *q = ly_aligned_alloc(32, (size_t)nsb * GROUP * 256);
    group_tab *tab = ly_aligned_alloc(32, (size_t)nsb * sizeof *tab);
    for (int64_t tc = t0; tc < t1; tc += CHUNK) {
        int64_t te = tc + CHUNK < t1 ? tc + CHUNK : t1;
        for (int64_t r = r0; r < r1; r += GROUP) {
            int n_valid = r1 - r < GROUP ? (int)(r1 - r) : GROUP;
            decode_group(g, f->type_size, w, row_bytes, r, n_valid, nsb, q, tab);
            for (int64_t t = tc; t < te; t++) {
                __m256 acc = f->has_min
                    ? group_dot(1, q, tab, nsb, a->q + t * k, a->d + t * nsb, a->s16 + t * (k / 16))
                    : group_dot(0, q, tab, nsb, a->q + t * k, a->d + t * nsb, a->s16 + t * (k / 16));
                float out[GROUP];
                _mm256_storeu_ps(out, acc);
                for (int i = 0; i < n_valid; i++) y[t * ldy + r + i] = out[i];
            }
        }
    }
    ly_aligned_free(q);
    ly_aligned_free(tab);
}

#define QK_BUFFERED tile_avx2
QK_ENTRIES(QK_ENTRY)

ly_tile_fn X8_ENTRY(int type) { QK_PICK(type); }
