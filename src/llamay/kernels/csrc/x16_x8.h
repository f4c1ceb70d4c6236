/* 256-bit tiles for weights in the x16 layout (x16.h), built twice: AVX2 (x16_avx2.c) and AVX-VNNI
 * (x16_avxvnni.c); the includer defines X8_TARGET, X8_VNNI and X8_ENTRY as for q32_x8.h. Bit-identical to
 * the GGML tiles: q32.h's and qk.h's sequences, one row per float lane.
 *
 * A 64-byte T-form vector holds rows 0-7 in its first 32 bytes and rows 8-15 in its second, so a group is
 * two 8-row halves read from the same stream: V[j] lane i = values 4j .. 4j + 3 of a 32-block of row
 * 8h + i, unsigned (Q8_0, IQ4_NL without VNNI: signed, through abs / sign). Up to NT_MAX tokens (decode)
 * read the values straight from the stream, one token both halves block by block (two chains), more a half
 * at a time; more tokens unpack each half of a group once into a buffer, as the GGML tiles do. */
#include "kernels.h"
#include "q32.h"
#include "qk.h"
#include "x86.h"

#define LY_INLINE X8_TARGET static inline __attribute__((always_inline))
#define NT_MAX 4
#define HALF 32 /* bytes of a 64-byte T-form vector per 8-row half */

/* integer dot kinds: unsigned values below 2^4, 2^5, 2^6, 2^8; signed int8 */
enum { K_U4, K_U5, K_U6, K_U8, K_S8 };

LY_INLINE __m256i vload(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }

LY_INLINE __m256 f16x8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

LY_INLINE __m256i bcast4(const int8_t *x) {
    int32_t v;
    memcpy(&v, x, 4);
    return _mm256_set1_epi32(v);
}

/* s16[u] += the int16 pair sums of vj with token u's activations 4j .. 4j + 3 (K_S8: |v| * sign(x, v)) */
LY_INLINE void dot_step(int kind, __m256i vj, const int8_t *const *x, int j, int NT, __m256i *s16) {
    const __m256i va = kind == K_S8 ? _mm256_abs_epi8(vj) : vj;
    for (int u = 0; u < NT; u++) {
        __m256i xj = bcast4(x[u] + 4 * j);
        s16[u] = _mm256_add_epi16(s16[u], _mm256_maddubs_epi16(va, kind == K_S8 ? _mm256_sign_epi8(xj, vj) : xj));
    }
}

/* Exact int32 dots, one per row lane, of V[0..7] with NT tokens' 32-blocks x[u], each V[j] read once for
 * all of them. Without VNNI the int16 pair sums of maddubs hold up to 32767: 8 vectors of 4-bit values
 * (2 * 15 * 127 each), 4 of 5-bit, 2 of 6-bit, 1 of 8-bit. */
LY_INLINE void dots_nt(int kind, const __m256i V[8], const int8_t *const *x, int NT, __m256i *out) {
    for (int u = 0; u < NT; u++) out[u] = _mm256_setzero_si256();
#if X8_VNNI
    (void)kind;
    for (int j = 0; j < 8; j++) {
        const __m256i vj = V[j];
        for (int u = 0; u < NT; u++) out[u] = _mm256_dpbusd_avx_epi32(out[u], vj, bcast4(x[u] + 4 * j));
    }
#else
    const __m256i ones = _mm256_set1_epi16(1);
    const int run = kind == K_U4 ? 8 : kind == K_U5 ? 4 : kind == K_U6 ? 2 : 1;
    for (int j0 = 0; j0 < 8; j0 += run) {
        __m256i s16[NT_MAX];
        for (int u = 0; u < NT; u++) s16[u] = _mm256_setzero_si256();
        if (NT == 1) { /* unrolled: the next loads overlap the add chain */
            #pragma GCC unroll 8
            for (int j = j0; j < j0 + run; j++) dot_step(kind, V[j], x, j, NT, s16);
        } else { /* rolled: NT accumulators are independent chains already, and fewer registers spill */
            #pragma GCC unroll 1
            for (int j = j0; j < j0 + run; j++) dot_step(kind, V[j], x, j, NT, s16);
        }
        for (int u = 0; u < NT; u++) out[u] = _mm256_add_epi32(out[u], _mm256_madd_epi16(s16[u], ones));
    }
#endif
}

/* sca * (dot of V[0..3]) + scb * (dot of V[4..7]), exact int32 per row lane (sca, scb: int32 lanes of
 * magnitude below 2^8). Without VNNI the scales ride in madd's int16 pairs, which also widens. */
LY_INLINE __m256i scaled_dots(int kind, const __m256i V[8], const int8_t *x, __m256i sca, __m256i scb) {
#if X8_VNNI
    (void)kind;
    __m256i d[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int j = 0; j < 8; j++) d[j / 4] = _mm256_dpbusd_avx_epi32(d[j / 4], V[j], bcast4(x + 4 * j));
    return _mm256_add_epi32(_mm256_mullo_epi32(d[0], sca), _mm256_mullo_epi32(d[1], scb));
#else
    const __m256i sc16[2] = {_mm256_blend_epi16(sca, _mm256_slli_epi32(sca, 16), 0xaa),
                             _mm256_blend_epi16(scb, _mm256_slli_epi32(scb, 16), 0xaa)};
    const int run = kind == K_U4 || kind == K_U5 ? 4 : kind == K_U6 ? 2 : 1;
    __m256i raw = _mm256_setzero_si256();
    for (int j0 = 0; j0 < 8; j0 += run) {
        __m256i s16 = _mm256_setzero_si256();
        for (int j = j0; j < j0 + run; j++) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(V[j], bcast4(x + 4 * j)));
        raw = _mm256_add_epi32(raw, _mm256_madd_epi16(s16, sc16[j0 / 4]));
    }
    return raw;
#endif
}

typedef struct {
    const ly_act *a;
    int64_t k, nb;
    const uint8_t *pf; /* the next group (NULL: no prefetching), a share per block of this one */
    int64_t pf_step;
} src_t;

LY_INLINE void prefetch_next(const src_t *s, int64_t b) {
    if (!s->pf) return;
    for (const uint8_t *p = s->pf + b * s->pf_step, *e = p + s->pf_step; p < e; p += 64)
        _mm_prefetch((const char *)p, _MM_HINT_T1);
}

LY_INLINE int32_t sx_of(const ly_act *a, int64_t k, int64_t t, int64_t b) {
    const int32_t *s16 = a->s16 + t * (k / 16);
    return s16[2 * b] + s16[2 * b + 1];
}

LY_INLINE const int8_t *xq(const src_t *s, int64_t t, int64_t b) { return s->a->q + t * s->k + b * 32; }

LY_INLINE float dx_of(const src_t *s, int64_t t, int64_t b) { return s->a->d[t * s->nb + b]; }

/* NT tokens' results of 8 rows (acc[u]: token u) -> their first nrows at y + u ldy */
LY_INLINE void store_half(const __m256 *acc, int NT, float *y, int64_t ldy, int nrows) {
    for (int u = 0; u < NT; u++) {
        if (nrows == 8) {
            _mm256_storeu_ps(y + u * ldy, acc[u]);
            continue;
        }
        float tmp[8];
        _mm256_storeu_ps(tmp, acc[u]);
        memcpy(y + u * ldy, tmp, nrows * sizeof(float));
    }
}

/* the formats' group kernels, and their many-token forms (each half of a group unpacked once) */
#include "x16_x8_q32.h"
#include "x16_x8_qk.h"

/* The first nrows of 16 rows' results of NT tokens -> y */
LY_INLINE void store_rows(__m256 acc[2][NT_MAX], int NT, float *y, int64_t ldy, int nrows) {
    store_half(acc[0], NT, y, ldy, nrows < 8 ? nrows : 8);
    if (nrows > 8) store_half(acc[1], NT, y + 8, ldy, nrows - 8);
}

LY_INLINE void run(int type, const uint8_t *grp, src_t s, int64_t t, int NT, float *y, int64_t ldy, int nrows) {
    __m256 acc[2][NT_MAX];
    for (int u = 0; u < NT; u++) acc[0][u] = acc[1][u] = _mm256_setzero_ps();
    /* one token: both halves a block at a time (two chains); more: a half at a time (fewer live registers) */
    for (int h = 0; h < 2; h += NT == 1 ? 2 : 1) {
        const int h1 = NT == 1 ? 2 : h + 1;
        switch (type) {
        case QK_Q4_K: group_q45k(0, grp, s, t, NT, h, h1, NULL, acc); break;
        case QK_Q5_K: group_q45k(1, grp, s, t, NT, h, h1, NULL, acc); break;
        case QK_Q6_K: group_q6k(grp, s, t, NT, h, h1, NULL, acc); break;
        default: group_q32(q32_fmt(type), grp, s, t, NT, h, h1, acc); break;
        }
    }
    store_rows(acc, NT, y + t * ldy, ldy, nrows);
}

/* Rows [r0, r1), r0 a multiple of 16 (the driver's shares are whole groups) */
LY_INLINE void tile(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t group_bytes = X16_ROWS * (int64_t)row_bytes;
    if (t1 - t0 > NT_MAX) {
        if (type == QK_Q4_K || type == QK_Q5_K || type == QK_Q6_K) tile_kbuffered(type, w, row_bytes, r0, r1, a, t0, t1, y, ldy);
        else tile_buffered(q32_fmt(type), w, row_bytes, r0, r1, a, t0, t1, y, ldy);
        return;
    }
    for (int64_t r = r0; r < r1; r += X16_ROWS) {
        const uint8_t *grp = w + r * row_bytes;
        const int nrows = r1 - r < X16_ROWS ? (int)(r1 - r) : X16_ROWS;
        src_t s = {a, a->k, a->k / 32, r + X16_ROWS < r1 ? grp + group_bytes : NULL, group_bytes / (a->k / 32)};
        int64_t t = t0;
        for (; t + NT_MAX <= t1; t += NT_MAX, s.pf = NULL) run(type, grp, s, t, NT_MAX, y + r, ldy, nrows);
        switch (t1 - t) {
        case 3: run(type, grp, s, t, 3, y + r, ldy, nrows); break;
        case 2: run(type, grp, s, t, 2, y + r, ldy, nrows); break;
        case 1: run(type, grp, s, t, 1, y + r, ldy, nrows); break;
        }
    }
}

#define TILE_X16(name, TYPE)                                                                                \
    X8_TARGET static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,         \
                               int64_t t0, int64_t t1, float *y, int64_t ldy) {                              \
        tile(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                                       \
    }
TILE_X16(q4_0, LY_Q4_0)
TILE_X16(q8_0, LY_Q8_0)
TILE_X16(q4k, QK_Q4_K)
TILE_X16(q6k, QK_Q6_K)
TILE_X16(q4_1, LY_Q4_1)
TILE_X16(q5_0, LY_Q5_0)
TILE_X16(q5_1, LY_Q5_1)
TILE_X16(iq4_nl, LY_IQ4_NL)
TILE_X16(q5k, QK_Q5_K)

ly_tile_fn X8_ENTRY(int type) {
    switch (type) {
    case LY_Q4_0: return q4_0;
    case LY_Q8_0: return q8_0;
    case QK_Q4_K: return q4k;
    case QK_Q6_K: return q6k;
    case LY_Q4_1: return q4_1;
    case LY_Q5_0: return q5_0;
    case LY_Q5_1: return q5_1;
    case LY_IQ4_NL: return iq4_nl;
    case QK_Q5_K: return q5k;
    default: return NULL;
    }
}
