/* 256-bit tiles for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, IQ4_XS, MXFP4 (formulas in q32.h, bit-identical to the portable path),
 * built twice: AVX2 (q32_avx2.c) and AVX-VNNI (q32_avxvnni.c). The includer defines X8_TARGET (a target
 * attribute), X8_VNNI (1: vpdpbusd sums 4 products into int32 in one step; 0: maddubs + madd) and X8_ENTRY
 * (the name of its tile getter).
 *
 * Rows are processed in groups of 8. A group is unpacked once into int8 "lane-interleaved" vectors:
 * V[b][j] holds, in its 32-bit lane i, the 4 weight values 4j..4j+3 of block b of row i. The 4 activation
 * values 4j..4j+3 are broadcast, so the u8 x s8 dot of 4 gives each row's partial dot in its own lane and the 8
 * row sums of a block come out as one vector without horizontal adds. Integer sums are exact in any
 * order, so this equals the portable element-order dot. Each unpacked group serves up to 4 tokens at once. */
#include "kernels.h"
#include "q32.h"
#include "x86.h"
#include <stdlib.h>

#define LY_INLINE X8_TARGET static inline __attribute__((always_inline))

enum { K_Q8, K_Q4, K_Q5 }; /* integer dot kind: signed int8, 4-bit unsigned, 5-bit unsigned */

/* A format's constants (each tile instantiation sees literals, so the branches on them fold away). */
typedef struct { int type, kind, has_min, offset, size; } q_fmt;

typedef struct {
    __m256i *v;    /* [nb][8] lane-interleaved values */
    float *dw, *mw; /* [nb][8] scale and min per (block, row) */
} group_buf;

/* 8x8 transpose of 32-bit lanes: r[i] lane j -> r[j] lane i */
LY_INLINE void transpose8(__m256i r[8]) {
    __m256i t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

/* 4-bit blocks of 8 rows straight into the interleaved layout: transpose the 4 dwords of qs first (low
 * nibbles of dword j are elements 4j..4j+3, high nibbles elements 16+4j..), then split the nibbles. */
LY_INLINE void unpack_q4x8(const uint8_t *const p[8], int qs_at, __m256i v[8]) {
    __m256i r[4], t[4];
    for (int i = 0; i < 4; i++) /* lane 0: row i, lane 1: row i + 4 */
        r[i] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(p[i + 4] + qs_at)),
                                _mm_loadu_si128((const __m128i *)(p[i] + qs_at)));
    t[0] = _mm256_unpacklo_epi32(r[0], r[1]);
    t[1] = _mm256_unpackhi_epi32(r[0], r[1]);
    t[2] = _mm256_unpacklo_epi32(r[2], r[3]);
    t[3] = _mm256_unpackhi_epi32(r[2], r[3]);
    r[0] = _mm256_unpacklo_epi64(t[0], t[2]);
    r[1] = _mm256_unpackhi_epi64(t[0], t[2]);
    r[2] = _mm256_unpacklo_epi64(t[1], t[3]);
    r[3] = _mm256_unpackhi_epi64(t[1], t[3]);
    const __m256i m = _mm256_set1_epi8(15);
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_and_si256(r[j], m);
        v[j + 4] = _mm256_and_si256(_mm256_srli_epi16(r[j], 4), m);
    }
}

/* 5-bit blocks of 8 rows: the nibbles as for 4 bits, then bit 4j+e of each row's qh -> bit 4 of byte e of
 * that row's lane in v[j]. */
LY_INLINE void unpack_q5x8(const uint8_t *const p[8], int qh_at, __m256i v[8]) {
    unpack_q4x8(p, qh_at + 4, v);
    int32_t h[8];
    for (int i = 0; i < 8; i++) memcpy(&h[i], p[i] + qh_at, 4);
    const __m256i qh = _mm256_setr_epi32(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    const __m256i b4 = _mm256_set1_epi8(0x10), lane_bytes = _mm256_setr_epi32(
        0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404, 0x08080808, 0x0c0c0c0c);
    for (int j = 0; j < 8; j++) {
        /* every byte of lane i <- byte j/2 of qh[i]; then test bits 4(j%2) .. 4(j%2)+3 */
        const __m256i sel = _mm256_add_epi8(_mm256_set1_epi8((char)(j / 2)), lane_bytes);
        const __m256i bit = _mm256_set1_epi32((int)(0x08040201u << (4 * (j % 2))));
        __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(qh, sel), bit);
        v[j] = _mm256_or_si256(v[j], _mm256_and_si256(_mm256_cmpeq_epi8(x, bit), b4));
    }
}

/* The f16 scale (bytes 0-1) and min (bytes 2-3) of 8 blocks -> 8 floats each. */
LY_INLINE void scales8(const uint8_t *const p[8], __m256 *dw, __m256 *mw) {
    int32_t h[8];
    for (int i = 0; i < 8; i++) memcpy(&h[i], p[i], 4);
    __m256i v = _mm256_setr_epi32(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]);
    const __m256i sel = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, sel), 0xd8); /* [d0..d7 | m0..m7] */
    *dw = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
    *mw = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
}

/* A lookup format's nibbles of 8 rows (p[i] + qs_at: each row's 16 bytes of qs) -> its table's values:
 * signed int8 (the Q8 dot), or with VNNI the values + LUT_OFFSET as unsigned bytes, whose unsaturated u8 x s8
 * dot minus LUT_OFFSET * sx is the same exact integer. */
#define LUT_OFFSET (X8_VNNI ? 128 : 0)
#define LUT_KIND (X8_VNNI ? K_Q4 : K_Q8)
LY_INLINE void unpack_lut8(const uint8_t *const p[8], int qs_at, const int8_t kv[16], __m256i v[8]) {
    unpack_q4x8(p, qs_at, v);
    __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kv));
    if (LUT_OFFSET) table = _mm256_add_epi8(table, _mm256_set1_epi8((char)LUT_OFFSET));
    for (int j = 0; j < 8; j++) v[j] = _mm256_shuffle_epi8(table, v[j]);
}

/* IQ4_XS: the scales of block ib of 8 rows' superblocks, d * (float)(ls - 32) as in ly_iq4xs_scale. */
LY_INLINE __m256 iq4xs_scales8(const uint8_t *const p[8], int ib) {
    int32_t ls[8];
    uint16_t d[8];
    for (int i = 0; i < 8; i++) {
        ls[i] = ly_iq4xs_ls(p[i], ib);
        d[i] = (uint16_t)(p[i][0] | p[i][1] << 8);
    }
    __m256 df = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    return _mm256_mul_ps(df, _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)ls)));
}

/* Rows r .. r+nrows-1 (nrows <= 8; missing rows repeat the last one, their lanes are never stored). */
LY_INLINE void unpack_group(q_fmt f, const uint8_t *w, size_t row_bytes, int64_t r, int nrows, int64_t nb,
                            group_buf *g) {
    const int type = f.type;
    const uint8_t *p[8];
    for (int i = 0; i < 8; i++) p[i] = w + (r + (i < nrows ? i : nrows - 1)) * row_bytes;
    for (int64_t b = 0; b < nb; b++) {
        __m256i v[8];
        for (int i = 0; i < 8; i++) /* the same block two groups ahead */
            _mm_prefetch((const char *)(p[i] + 16 * row_bytes), _MM_HINT_T1);
        if (type == LY_IQ4_XS) { /* p[i]: the superblock; block b % 8 of it */
            const int ib = (int)(b % 8);
            unpack_lut8(p, 8 + 16 * ib, LY_KV_IQ4NL, v);
            for (int j = 0; j < 8; j++) _mm256_store_si256(g->v + b * 8 + j, v[j]);
            _mm256_store_ps(g->dw + b * 8, iq4xs_scales8(p, ib));
            if (ib == 7)
                for (int i = 0; i < 8; i++) p[i] += f.size;
            continue;
        }
        if (type == LY_MXFP4) {
            unpack_lut8(p, 1, LY_KV_MXFP4, v);
            for (int j = 0; j < 8; j++) _mm256_store_si256(g->v + b * 8 + j, v[j]);
            for (int i = 0; i < 8; i++) g->dw[b * 8 + i] = ly_e8m0_half(p[i][0]);
            for (int i = 0; i < 8; i++) p[i] += f.size;
            continue;
        }
        if (type == LY_Q8_0) {
            for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_si256((const __m256i *)(p[i] + 2));
            transpose8(v);
        } else if (type == LY_IQ4_NL) {
            unpack_lut8(p, 2, LY_KV_IQ4NL, v);
        } else if (type == LY_Q5_0 || type == LY_Q5_1) {
            unpack_q5x8(p, type == LY_Q5_0 ? 2 : 4, v);
        } else {
            unpack_q4x8(p, type == LY_Q4_0 ? 2 : 4, v);
        }
        for (int j = 0; j < 8; j++) _mm256_store_si256(g->v + b * 8 + j, v[j]);
        __m256 dw, mw;
        scales8(p, &dw, &mw);
        _mm256_store_ps(g->dw + b * 8, dw);
        if (f.has_min) _mm256_store_ps(g->mw + b * 8, mw);
        for (int i = 0; i < 8; i++) p[i] += f.size;
    }
}

/* s16[u] += the int16 pair sums of vector j (weights vj) with token u's activations 4j..4j+3 */
LY_INLINE void dot_step(int kind, __m256i vj, const int8_t *const *qt, int j, int NT, __m256i *s16) {
    __m256i va = kind == K_Q8 ? _mm256_abs_epi8(vj) : vj;
    for (int u = 0; u < NT; u++) {
        int32_t x4;
        memcpy(&x4, qt[u] + 4 * j, 4);
        __m256i x = _mm256_set1_epi32(x4); /* |v| * sign(x, v) = v * x for Q8 */
        x = kind == K_Q8 ? _mm256_sign_epi8(x, vj) : x;
        s16[u] = _mm256_add_epi16(s16[u], _mm256_maddubs_epi16(va, x));
    }
}

/* Exact int32 dots of block b's 8 rows with NT tokens' activations (qt[u] points at token u's block).
 * Without VNNI, int16 pair sums are <= 2 * 128 * 127 (Q8: widen every vector), 2 * 31 * 127 (Q5: 4 fit),
 * 2 * 15 * 127 (8); vpdpbusd adds each 4-product sum into int32 directly. */
LY_INLINE void block_dots(int kind, const __m256i *v, const int8_t *const *qt, int NT, __m256i *s32) {
    for (int u = 0; u < NT; u++) s32[u] = _mm256_setzero_si256();
#if X8_VNNI
    #pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
        __m256i vj = _mm256_load_si256(v + j), va = kind == K_Q8 ? _mm256_abs_epi8(vj) : vj;
        for (int u = 0; u < NT; u++) {
            int32_t x4;
            memcpy(&x4, qt[u] + 4 * j, 4);
            __m256i x = _mm256_set1_epi32(x4);
            s32[u] = _mm256_dpbusd_avx_epi32(s32[u], va, kind == K_Q8 ? _mm256_sign_epi8(x, vj) : x);
        }
    }
#else
    const __m256i ones = _mm256_set1_epi16(1);
    const int run = kind == K_Q8 ? 1 : kind == K_Q5 ? 4 : 8;
    for (int j0 = 0; j0 < 8; j0 += run) {
        __m256i s16[4];
        for (int u = 0; u < NT; u++) s16[u] = _mm256_setzero_si256();
        if (NT == 1) { /* decode: unrolled, the loads of the next vectors overlap the add chain */
            #pragma GCC unroll 8
            for (int j = j0; j < j0 + run; j++) dot_step(kind, _mm256_load_si256(v + j), qt, j, NT, s16);
        } else { /* rolled: NT accumulators already give independent chains, and fewer registers spill */
            #pragma GCC unroll 1
            for (int j = j0; j < j0 + run; j++) dot_step(kind, _mm256_load_si256(v + j), qt, j, NT, s16);
        }
        for (int u = 0; u < NT; u++) s32[u] = _mm256_add_epi32(s32[u], _mm256_madd_epi16(s16[u], ones));
    }
#endif
}

/* Per (token, block) of a tile, computed once: sx = s16[2b] + s16[2b+1] as float (min term) and offset * sx
 * (Q4_0 / Q5_0: the dot of unsigned values minus offset * sx is the dot of the signed values). */
typedef struct { float *sxf; int32_t *sxo; } tok_aux;

LY_INLINE void token_aux(const ly_act *a, int64_t t0, int64_t t1, int64_t nb, int offset, tok_aux *x) {
    for (int64_t i = 0; i < (t1 - t0) * nb; i++) {
        int32_t sx = a->s16[2 * (t0 * nb + i)] + a->s16[2 * (t0 * nb + i) + 1];
        x->sxf[i] = (float)sx;
        x->sxo[i] = offset * sx;
    }
}

/* What the kernel reads and writes for one row group: y points at row r of token 0; ty = t - t0 of the
 * first token of the tile (indexes aux). */
typedef struct {
    group_buf g;
    tok_aux aux;
    const ly_act *a;
    int64_t nb, t0, ldy;
    float *y;
    int nrows;
} group_ctx;

/* y[t+u, r .. r+nrows) for u < NT: the canonical per-block float sequence of q32.h, 8 rows per vector. */
LY_INLINE void kernel(q_fmt f, const group_ctx *c, int64_t t, int NT) {
    const int64_t nb = c->nb;
    __m256 acc[4];
    const int8_t *qt[4];
    for (int u = 0; u < NT; u++) {
        acc[u] = _mm256_setzero_ps();
        qt[u] = c->a->q + (t + u) * c->a->k;
    }
    for (int64_t b = 0; b < nb; b++) {
        __m256i s32[4];
        block_dots(f.kind, c->g.v + b * 8, qt, NT, s32);
        __m256 dw = _mm256_load_ps(c->g.dw + b * 8), mw = f.has_min ? _mm256_load_ps(c->g.mw + b * 8) : dw;
        for (int u = 0; u < NT; u++) {
            int64_t ib = (t + u - c->t0) * nb + b;
            __m256 dx = _mm256_broadcast_ss(c->a->d + (t + u) * nb + b);
            __m256i isum = f.offset ? _mm256_sub_epi32(s32[u], _mm256_set1_epi32(c->aux.sxo[ib])) : s32[u];
            __m256 v = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum));
            if (f.has_min)
                v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(mw, dx), _mm256_broadcast_ss(c->aux.sxf + ib)));
            acc[u] = _mm256_add_ps(acc[u], v);
            qt[u] += 32;
        }
    }
    for (int u = 0; u < NT; u++) {
        float *yr = c->y + (t + u) * c->ldy;
        if (c->nrows == 8) { _mm256_storeu_ps(yr, acc[u]); continue; }
        float tmp[8];
        _mm256_storeu_ps(tmp, acc[u]);
        memcpy(yr, tmp, c->nrows * sizeof(float));
    }
}

LY_INLINE void tile(q_fmt f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    int64_t nb = a->k / 32, nt = t1 - t0;
    char *mem = ly_aligned_alloc(32, nb * (8 * 32 + 16 * sizeof(float)) + nt * nb * 8 + 32);
    group_ctx c = {.a = a, .nb = nb, .t0 = t0, .ldy = ldy};
    c.g = (group_buf){(__m256i *)mem, (float *)(mem + nb * 256), (float *)(mem + nb * 256) + nb * 8};
    c.aux = (tok_aux){c.g.mw + nb * 8, (int32_t *)(c.g.mw + nb * 8 + nt * nb)};
    token_aux(a, t0, t1, nb, f.offset, &c.aux);
    for (int64_t r = r0; r < r1; r += 8) {
        c.nrows = r1 - r < 8 ? (int)(r1 - r) : 8;
        c.y = y + r;
        unpack_group(f, w, row_bytes, r, c.nrows, nb, &c.g);
        int64_t t = t0;
        for (; t + 4 <= t1; t += 4) kernel(f, &c, t, 4);
        switch (t1 - t) {
        case 3: kernel(f, &c, t, 3); break;
        case 2: kernel(f, &c, t, 2); break;
        case 1: kernel(f, &c, t, 1); break;
        }
    }
    ly_aligned_free(mem);
}

/* One entry per type: the format's constants are literals in each. */
#define X8_TILE(name, ...)                                                                                  \
    X8_TARGET static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,         \
                               int64_t t0, int64_t t1, float *y, int64_t ldy) {                              \
        tile((q_fmt){__VA_ARGS__}, w, rb, r0, r1, a, t0, t1, y, ldy);                                       \
    }
X8_TILE(q4_0, LY_Q4_0, K_Q4, 0, 8, 18)
X8_TILE(q4_1, LY_Q4_1, K_Q4, 1, 0, 20)
X8_TILE(q5_0, LY_Q5_0, K_Q5, 0, 16, 22)
X8_TILE(q5_1, LY_Q5_1, K_Q5, 1, 0, 24)
X8_TILE(q8_0, LY_Q8_0, K_Q8, 0, 0, 34)
X8_TILE(iq4_nl, LY_IQ4_NL, LUT_KIND, 0, LUT_OFFSET, 18)
X8_TILE(iq4_xs, LY_IQ4_XS, LUT_KIND, 0, LUT_OFFSET, 136)
X8_TILE(mxfp4, LY_MXFP4, LUT_KIND, 0, LUT_OFFSET, 17)

ly_tile_fn X8_ENTRY(int type) {
    switch (type) {
    case LY_Q4_0: return q4_0;
    case LY_Q4_1: return q4_1;
    case LY_Q5_0: return q5_0;
    case LY_Q5_1: return q5_1;
    case LY_Q8_0: return q8_0;
    case LY_IQ4_NL: return iq4_nl;
    case LY_IQ4_XS: return iq4_xs;
    case LY_MXFP4: return mxfp4;
    default: return NULL;
    }
}
