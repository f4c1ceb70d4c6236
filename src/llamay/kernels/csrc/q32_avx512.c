/* AVX-512 VNNI tiles for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (formulas in q32.h, bit-identical to the portable
 * and AVX2 paths).
 *
 * Rows go in groups of 16, one row per 32-bit lane. A group's block is unpacked into 8 unsigned int8
 * vectors: V[j] holds, in lane i, the weight values 4j..4j+3 of row i. vpdpbusd with the broadcast
 * activation values 4j..4j+3 adds each row's partial dot to its own lane, so one block's 16 exact int32
 * dots come out without horizontal adds. Signed formats are made unsigned (Q8_0: v + 128; Q4_0, Q5_0 are
 * already stored as v + offset) and the offset times the activation sum is subtracted: exact integers,
 * so equal to the element-order dot. Floats then follow q32.h's per-block sequence, one row per lane. */
#include "common.h"
#if LY_X86
#include "avx512.h"
#include "kernels.h"
#include "q32.h"
#include <stdlib.h>

#define NT_MAX 8 /* tokens per kernel call: 8 int32 + 8 float accumulators stay in registers */
#define FEW 3    /* below this many tokens a group is unpacked block by block in registers, not buffered */

typedef struct { int type, has_min, offset, size, qh, qs; } q_fmt;

/* lane i: byte offset of row i from row 0 (rows past nrows repeat the last one), for gathers */
LY_INLINE __m512i row_offsets(size_t row_bytes, int nrows) {
    int32_t o[GROUP];
    for (int i = 0; i < GROUP; i++) o[i] = (int32_t)((i < nrows ? i : nrows - 1) * row_bytes);
    return _mm512_loadu_si512(o);
}

/* bit 4 of byte e of lane i in V[j] <- bit h_j + e of row i's qh (h_j = 4j for j < 4, 16 + 4(j - 4) else):
 * pick the qh byte holding those bits into every byte, test one bit per byte, add 16 where set. */
LY_INLINE void add_high_bits(__m512i qh, __m512i V[8]) {
    for (int j = 0; j < 8; j++) {
        int h = j < 4 ? 4 * j : 16 + 4 * (j - 4), byte = h / 8;
        const int sb = byte * 0x01010101; /* dword c of each 128-bit lane: 4 times byte `byte` of dword c */
        const __m512i sel = _mm512_set4_epi32(0x0c0c0c0c + sb, 0x08080808 + sb, 0x04040404 + sb, sb);
        const __m512i bit = _mm512_set1_epi32((int)(0x08040201u << (h % 8)));
        __mmask64 m = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, sel), bit);
        V[j] = _mm512_mask_add_epi8(V[j], m, V[j], _mm512_set1_epi8(16));
    }
}

/* One block of 16 rows -> V[8] unsigned values, dw and mw (16 floats). p[i] points at row i's block. */
LY_INLINE void unpack_block(q_fmt f, const uint8_t *const p[GROUP], __m512i off, __m512i V[8], __m512 *dw,
                            __m512 *mw) {
    if (f.type == LY_Q8_0) {
        const __m512i flip = _mm512_set1_epi8((char)0x80);
        load_transposed(p, 2, V);
        load_transposed(p, 18, V + 4);
        for (int j = 0; j < 8; j++) V[j] = _mm512_xor_si512(V[j], flip);
    } else {
        __m512i T[4];
        const __m512i m4 = _mm512_set1_epi8(15);
        load_transposed(p, f.qs, T);
        for (int j = 0; j < 4; j++) {
            V[j] = _mm512_and_si512(T[j], m4);
            V[j + 4] = _mm512_and_si512(_mm512_srli_epi16(T[j], 4), m4);
        }
        if (f.qh >= 0) add_high_bits(_mm512_i32gather_epi32(off, p[0] + f.qh, 1), V);
    }
    __m512i h = _mm512_i32gather_epi32(off, p[0], 1); /* d | m << 16 */
    *dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
    *mw = f.has_min ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16))) : *dw;
}

typedef struct {
    const ly_act *a;
    int64_t nb;
    const float *sxf;      /* [token][block] (float)(s16[2b] + s16[2b + 1]), tokens from t0 */
    const int32_t *sxo;    /* [token][block] offset * sx */
    int64_t t0;
} tok_ctx;

/* acc[u] += the canonical term of one block for NT tokens (tokens t + u) */
LY_INLINE void block_step(q_fmt f, const __m512i V[8], __m512 dw, __m512 mw, const tok_ctx *c, int64_t t,
                          int64_t b, int NT, __m512 acc[NT_MAX]) {
    const int64_t nb = c->nb;
    __m512i s[NT_MAX];
    for (int u = 0; u < NT; u++) s[u] = _mm512_setzero_si512();
    for (int j = 0; j < 8; j++)
        for (int u = 0; u < NT; u++) {
            int32_t x4;
            memcpy(&x4, c->a->q + (t + u) * c->a->k + b * 32 + 4 * j, 4);
            s[u] = _mm512_dpbusd_epi32(s[u], V[j], _mm512_set1_epi32(x4));
        }
    for (int u = 0; u < NT; u++) {
        int64_t ib = (t + u - c->t0) * nb + b;
        __m512 dx = _mm512_set1_ps(c->a->d[(t + u) * nb + b]);
        __m512i isum = f.offset ? _mm512_sub_epi32(s[u], _mm512_set1_epi32(c->sxo[ib])) : s[u];
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum));
        if (f.has_min) v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_mul_ps(mw, dx), _mm512_set1_ps(c->sxf[ib])));
        acc[u] = _mm512_add_ps(acc[u], v);
    }
}

LY_INLINE void store_rows(const __m512 acc[NT_MAX], int NT, float *y, int64_t ldy, int nrows) {
    __mmask16 m = (__mmask16)((1u << nrows) - 1);
    for (int u = 0; u < NT; u++) _mm512_mask_storeu_ps(y + u * ldy, m, acc[u]);
}

/* Buffered: a group's unpacked blocks, reused by every token of the tile NT at a time. */
LY_INLINE void kernel(q_fmt f, const __m512i *Vs, const float *dws, const float *mws, const tok_ctx *c,
                      int64_t t, int NT, float *y, int64_t ldy, int nrows) {
    __m512 acc[NT_MAX];
    for (int u = 0; u < NT; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t b = 0; b < c->nb; b++)
        block_step(f, Vs + b * 8, _mm512_load_ps(dws + b * GROUP), _mm512_load_ps(mws + b * GROUP), c, t, b,
                   NT, acc);
    store_rows(acc, NT, y + t * ldy, ldy, nrows);
}

/* Few tokens (decode): each block unpacked in registers and used at once; the next group prefetched. */
LY_INLINE void direct(q_fmt f, const uint8_t *p0[GROUP], __m512i off, const tok_ctx *c, int64_t t, int NT,
                      float *y, int64_t ldy, int nrows, const uint8_t *next, const uint8_t *end) {
    const uint8_t *p[GROUP];
    memcpy(p, p0, sizeof p);
    __m512 acc[NT_MAX];
    for (int u = 0; u < NT; u++) acc[u] = _mm512_setzero_ps();
    for (int64_t b = 0; b < c->nb; b++) {
        __m512i V[8];
        __m512 dw, mw;
        prefetch_share(next, end, b, f.size);
        unpack_block(f, p, off, V, &dw, &mw);
        block_step(f, V, dw, mw, c, t, b, NT, acc);
        for (int i = 0; i < GROUP; i++) p[i] += f.size;
    }
    store_rows(acc, NT, y + t * ldy, ldy, nrows);
}

LY_INLINE void tile(q_fmt f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t nb = a->k / 32, nt = t1 - t0;
    const int offset = f.type == LY_Q8_0 ? 128 : f.offset;
    char *mem = ly_aligned_alloc(64, nb * (8 * 64 + 2 * GROUP * sizeof(float)) + nt * nb * 8 + 64);
    __m512i *Vs = (__m512i *)mem;
    float *dws = (float *)(mem + nb * 512), *mws = dws + nb * GROUP, *sxf = mws + nb * GROUP;
    int32_t *sxo = (int32_t *)(sxf + nt * nb);
    for (int64_t i = 0; i < nt * nb; i++) {
        int32_t sx = a->s16[2 * (t0 * nb + i)] + a->s16[2 * (t0 * nb + i) + 1];
        sxf[i] = (float)sx;
        sxo[i] = offset * sx;
    }
    tok_ctx c = {a, nb, sxf, sxo, t0};
    q_fmt g = f;
    g.offset = offset;
    for (int64_t r = r0; r < r1; r += GROUP) {
        int nrows = r1 - r < GROUP ? (int)(r1 - r) : GROUP;
        const __m512i off = row_offsets(row_bytes, nrows);
        const uint8_t *p[GROUP];
        for (int i = 0; i < GROUP; i++) p[i] = w + (r + (i < nrows ? i : nrows - 1)) * row_bytes;
        float *yr = y + r;
        const uint8_t *next = w + (r + GROUP) * row_bytes, *end = w + r1 * row_bytes;
        if (nt < FEW) {
            if (nt == 2) direct(g, p, off, &c, t0, 2, yr, ldy, nrows, next, end);
            else direct(g, p, off, &c, t0, 1, yr, ldy, nrows, next, end);
            continue;
        }
        for (int64_t b = 0; b < nb; b++) {
            __m512 dw, mw;
            prefetch_share(next, end, b, f.size);
            unpack_block(g, p, off, Vs + b * 8, &dw, &mw);
            _mm512_store_ps(dws + b * GROUP, dw);
            _mm512_store_ps(mws + b * GROUP, mw);
            for (int i = 0; i < GROUP; i++) p[i] += f.size;
        }
        int64_t t = t0;
        for (; t + NT_MAX <= t1; t += NT_MAX) kernel(g, Vs, dws, mws, &c, t, NT_MAX, yr, ldy, nrows);
        switch (t1 - t) {
        case 7: kernel(g, Vs, dws, mws, &c, t, 7, yr, ldy, nrows); break;
        case 6: kernel(g, Vs, dws, mws, &c, t, 6, yr, ldy, nrows); break;
        case 5: kernel(g, Vs, dws, mws, &c, t, 5, yr, ldy, nrows); break;
        case 4: kernel(g, Vs, dws, mws, &c, t, 4, yr, ldy, nrows); break;
        case 3: kernel(g, Vs, dws, mws, &c, t, 3, yr, ldy, nrows); break;
        case 2: kernel(g, Vs, dws, mws, &c, t, 2, yr, ldy, nrows); break;
        case 1: kernel(g, Vs, dws, mws, &c, t, 1, yr, ldy, nrows); break;
        }
    }
    ly_aligned_free(mem);
}

/* One entry per type: the format's constants are literals in each. */
#define TILE512(name, ...)                                                                                  \
    LY_AVX512 static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,         \
                               int64_t t0, int64_t t1, float *y, int64_t ldy) {                              \
        tile((q_fmt){__VA_ARGS__}, w, rb, r0, r1, a, t0, t1, y, ldy);                                       \
    }
TILE512(q4_0, LY_Q4_0, 0, 8, 18, -1, 2)
TILE512(q4_1, LY_Q4_1, 1, 0, 20, -1, 4)
TILE512(q5_0, LY_Q5_0, 0, 16, 22, 2, 6)
TILE512(q5_1, LY_Q5_1, 1, 0, 24, 4, 8)
TILE512(q8_0, LY_Q8_0, 0, 0, 34, -1, 2)

ly_tile_fn ly_tiles_q32_avx512(int type) {
    switch (type) {
    case LY_Q4_0: return q4_0;
    case LY_Q4_1: return q4_1;
    case LY_Q5_0: return q5_0;
    case LY_Q5_1: return q5_1;
    case LY_Q8_0: return q8_0;
    default: return NULL; /* the lookup formats: the 256-bit tiles */
    }
}
#endif
