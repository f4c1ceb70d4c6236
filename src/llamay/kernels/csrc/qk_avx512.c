/* AVX-512 VNNI K-quant tiles, bit-identical to the portable and AVX2 paths (qk.h's sequence per row).
 * Many tokens: a 16-row group's super-blocks are decoded once per chunk of tokens into lane-interleaved
 * vectors (V[dword] lane i = 4 values of row i) and [block][row] tables; vpdpbusd with broadcast
 * activations then gives each row's exact 16-value dots in its own lane, 16 rows per vector.
 * Few tokens (decode): qk_direct.h with 256-bit vpdpbusd. */
#include "common.h"
#if LY_X86
#include "avx512.h"
#include "kernels.h"
#include "qk.h"
#include <stdlib.h>

#define QK_TARGET LY_AVX512
#define QK_MADD_ACC(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#include "qk_direct.h"

#define CHUNK 64  /* tokens per decoded group: their activations stay in L2 */
#define NT_MAX 4  /* tokens per kernel call */

typedef struct {            /* one super-block of a 16-row group, [block][row] */
    int32_t sca[8][GROUP];  /* sc[2b] */
    int32_t scb[8][GROUP];  /* sc[2b + 1] */
    int32_t cm[8][GROUP];   /* int16 pair (cm[2b], cm[2b + 1]) for madd against (s16[2b], s16[2b + 1]) */
    float d[GROUP], dmin[GROUP];
} group_tab;

/* Rows r .. r + 15 (rows past n_valid repeat the last valid one) -> V [nsb][64] and tab [nsb]. */
LY_AVX512 static void decode_group(const qk_format *f, unpack_fn unpack, const uint8_t *w, size_t row_bytes,
                                   int64_t r, int n_valid, int64_t nsb, uint8_t *scratch, __m512i *V,
                                   group_tab *tab) {
    const uint8_t *p[GROUP];
    for (int i = 0; i < GROUP; i++) p[i] = scratch + i * 256;
    for (int64_t s = 0; s < nsb; s++) {
        group_tab *t = &tab[s];
        for (int i = 0; i < GROUP; i++) {
            const uint8_t *blk = w + (size_t)(r + (i < n_valid ? i : n_valid - 1)) * row_bytes + s * f->type_size;
            __m256i v[8];
            qk_scales c;
            unpack(blk, v);
            for (int j = 0; j < 8; j++) STORE(scratch + i * 256 + j * 32, v[j]);
            f->scales(blk, &c);
            qk_table_row(&c, GROUP, i, &t->sca[0][0], &t->scb[0][0], &t->cm[0][0]);
            t->d[i] = c.d;
            t->dmin[i] = c.dmin;
        }
        for (int pc = 0; pc < 16; pc++) load_transposed(p, pc * 16, V + s * 64 + pc * 4);
    }
}

typedef struct {
    const ly_act *a;
    int64_t k;
} tok_src;

/* acc[u] (lanes = rows) for tokens t .. t + NT - 1 over every super-block: qk.h's canonical step, a
 * super-block's integer raw and corr summed over its blocks first */
LY_INLINE void group_dot(int has_min, const __m512i *V, const group_tab *tab, int64_t nsb, tok_src src,
                         int64_t t, int NT, __m512 acc[NT_MAX]) {
    const int64_t k = src.k;
    for (int u = 0; u < NT; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t s = 0; s < nsb; s++) {
        const group_tab *tb = &tab[s];
        __m512i raw[NT_MAX], corr[NT_MAX];
        for (int u = 0; u < NT; u++) raw[u] = corr[u] = _mm512_setzero_si512();
        for (int b = 0; b < 8; b++) {
            const int64_t blk = s * 8 + b;
            const __m512i *vb = V + s * 64 + b * 8;
            __m512i first[NT_MAX], second[NT_MAX];
            for (int u = 0; u < NT; u++) first[u] = second[u] = _mm512_setzero_si512();
            for (int j = 0; j < 8; j++)
                for (int u = 0; u < NT; u++) {
                    int32_t x4;
                    memcpy(&x4, src.a->q + (t + u) * k + blk * 32 + 4 * j, 4);
                    __m512i xv = _mm512_set1_epi32(x4);
                    if (j < 4) first[u] = _mm512_dpbusd_epi32(first[u], vb[j], xv);
                    else second[u] = _mm512_dpbusd_epi32(second[u], vb[j], xv);
                }
            const __m512i sca = _mm512_loadu_si512(tb->sca[b]), scb = _mm512_loadu_si512(tb->scb[b]);
            const __m512i cm = _mm512_loadu_si512(tb->cm[b]);
            for (int u = 0; u < NT; u++) {
                const int32_t *s16 = src.a->s16 + (t + u) * (k / 16);
                raw[u] = _mm512_add_epi32(raw[u], _mm512_add_epi32(_mm512_mullo_epi32(first[u], sca),
                                                                   _mm512_mullo_epi32(second[u], scb)));
                uint32_t sp = (uint32_t)(uint16_t)s16[2 * blk] | (uint32_t)(uint16_t)s16[2 * blk + 1] << 16;
                corr[u] = _mm512_add_epi32(corr[u], _mm512_madd_epi16(cm, _mm512_set1_epi32((int32_t)sp)));
            }
        }
        const __m512 d = _mm512_loadu_ps(tb->d), dmin = _mm512_loadu_ps(tb->dmin);
        for (int u = 0; u < NT; u++) {
            __m512 dxv = _mm512_set1_ps(src.a->d[(t + u) * nsb + s]), ddx = _mm512_mul_ps(d, dxv), c;
            if (has_min)
                c = _mm512_sub_ps(_mm512_mul_ps(ddx, _mm512_cvtepi32_ps(raw[u])),
                                  _mm512_mul_ps(_mm512_mul_ps(dmin, dxv), _mm512_cvtepi32_ps(corr[u])));
            else
                c = _mm512_mul_ps(ddx, _mm512_cvtepi32_ps(_mm512_sub_epi32(raw[u], corr[u])));
            acc[u] = _mm512_add_ps(acc[u], c);
        }
    }
}

LY_INLINE void run_tokens(int has_min, const __m512i *V, const group_tab *tab, int64_t nsb, tok_src src,
                          int64_t t, int NT, float *y, int64_t ldy, int n_valid) {
    __m512 acc[NT_MAX];
    group_dot(has_min, V, tab, nsb, src, t, NT, acc);
    __mmask16 m = (__mmask16)((1u << n_valid) - 1);
    for (int u = 0; u < NT; u++) _mm512_mask_storeu_ps(y + (t + u) * ldy, m, acc[u]);
}

LY_INLINE void tile_buffered(const qk_format *f, unpack_fn unpack, const uint8_t *w, size_t row_bytes,
                             int64_t r0, int64_t r1, const ly_act *a, int64_t t0, int64_t t1, float *y,
                             int64_t ldy) {
    const int64_t nsb = a->k / 256;
    const int hm = f->has_min;
    uint8_t *scratch = ly_aligned_alloc(64, GROUP * 256);
    __m512i *V = ly_aligned_alloc(64, (size_t)nsb * 64 * sizeof(__m512i));
    group_tab *tab = ly_aligned_alloc(64, (size_t)nsb * sizeof *tab);
    tok_src src = {a, a->k};
    for (int64_t tc = t0; tc < t1; tc += CHUNK) {
        int64_t te = tc + CHUNK < t1 ? tc + CHUNK : t1;
        for (int64_t r = r0; r < r1; r += GROUP) {
            int n_valid = r1 - r < GROUP ? (int)(r1 - r) : GROUP;
            float *yr = y + r;
            decode_group(f, unpack, w, row_bytes, r, n_valid, nsb, scratch, V, tab);
            int64_t t = tc;
            for (; t + NT_MAX <= te; t += NT_MAX) {
                if (hm) run_tokens(1, V, tab, nsb, src, t, NT_MAX, yr, ldy, n_valid);
                else run_tokens(0, V, tab, nsb, src, t, NT_MAX, yr, ldy, n_valid);
            }
            for (; t < te; t++) {
                if (hm) run_tokens(1, V, tab, nsb, src, t, 1, yr, ldy, n_valid);
                else run_tokens(0, V, tab, nsb, src, t, 1, yr, ldy, n_valid);
            }
        }
    }
    ly_aligned_free(scratch);
    ly_aligned_free(V);
    ly_aligned_free(tab);
}

#define QK_BUFFERED tile_buffered
QK_ENTRIES(QK_ENTRY)

ly_tile_fn ly_tiles_qk_avx512(int type) { QK_PICK(type); }
#endif
