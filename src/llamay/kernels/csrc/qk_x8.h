/* 256-bit K-quant tiles, built twice: AVX2 (qk_avx2.c) and AVX-VNNI (qk_avxvnni.c); the includer defines
 * X8_TARGET, X8_VNNI and X8_ENTRY as for q32_x8.h. Rows go in groups of 8, one row per float lane of the
 * accumulator, and lane r follows exactly the scalar sequence of qk.h for row r, so results equal the
 * portable path bit for bit.
 * Many tokens: a group's super-blocks are decoded once per chunk of tokens into q bytes and [block][row]
 * tables, then reused for every token. Few tokens (decode): each row's super-block is decoded in registers,
 * its 8 block terms computed with lanes = blocks, and 8 rows' terms transposed to lanes = rows. */
#include "kernels.h"
#include "qk_unpack.h"
#include <stdlib.h>

#define QK_TARGET X8_TARGET
#if X8_VNNI
#define QK_DOT32(q, x) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), q, x)
#else /* q <= 63, |x| <= 127: the int16 pair sums never saturate */
#define QK_DOT32(q, x) _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), _mm256_set1_epi16(1))
#endif

#define GROUP 8   /* rows per group = float lanes */
#define CHUNK 64  /* tokens per decoded group: their activations stay in L2 */

typedef struct {            /* one super-block of a row group, [block][row] */
    int32_t sca[8][GROUP];  /* sc[2b] */
    int32_t scb[8][GROUP];  /* sc[2b + 1] */
    int32_t cm[8][GROUP];   /* int16 pair (cm[2b], cm[2b + 1]) for madd against (s16[2b], s16[2b + 1]) */
    float d[GROUP], dmin[GROUP];
} group_tab;


/* Decodes rows r .. r + 7 (rows past n_valid repeat the last valid one) into q [nsb][GROUP][256] and tab. */
X8_TARGET static void decode_group(const qk_format *f, unpack_fn unpack, const uint8_t *w, size_t row_bytes,
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
            qk_table_row(&c, GROUP, i, &t->sca[0][0], &t->scb[0][0], &t->cm[0][0]);
            t->d[i] = c.d;
            t->dmin[i] = c.dmin;
        }
    }
}

/* per row lane: dot16 of the first and the second half of a 32-value block of 8 rows with x */
X8_TARGET static inline void block_dots(const uint8_t *q, __m256i x, __m256i *first, __m256i *second) {
    __m256i p[GROUP];
    for (int i = 0; i < GROUP; i++) p[i] = QK_DOT32(LOAD(q + i * 256), x);
    __m256i h0 = _mm256_hadd_epi32(p[0], p[1]), h1 = _mm256_hadd_epi32(p[2], p[3]);
    __m256i h2 = _mm256_hadd_epi32(p[4], p[5]), h3 = _mm256_hadd_epi32(p[6], p[7]);
    __m256i g0 = _mm256_hadd_epi32(h0, h1), g1 = _mm256_hadd_epi32(h2, h3); /* [rows first halves | second] */
    *first = _mm256_permute2x128_si256(g0, g1, 0x20);
    *second = _mm256_permute2x128_si256(g0, g1, 0x31);
}

/* 8 rows x one token over all super-blocks; lanes = rows */
X8_TARGET static inline __m256 group_dot(int has_min, const uint8_t *q, const group_tab *tab, int64_t nsb,
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

#include "qk_direct.h"


X8_TARGET static void tile_avx2(const qk_format *f, unpack_fn unpack, const uint8_t *w, size_t row_bytes,
                              int64_t r0, int64_t r1, const ly_act *a, int64_t t0, int64_t t1,
                              float *y, int64_t ldy) {
    int64_t k = a->k, nsb = k / 256;
    uint8_t *q = ly_aligned_alloc(32, (size_t)nsb * GROUP * 256);
    group_tab *tab = ly_aligned_alloc(32, (size_t)nsb * sizeof *tab);
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
    ly_aligned_free(q);
    ly_aligned_free(tab);
}

#define QK_BUFFERED tile_avx2
QK_ENTRIES(QK_ENTRY)

ly_tile_fn X8_ENTRY(int type) { QK_PICK(type); }
