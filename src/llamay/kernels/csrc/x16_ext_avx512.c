/* AVX-512 VNNI tiles for the x16 layouts added after x16_avx512.c's four: Q4_1, Q5_0, Q5_1, IQ4_NL and
 * Q5_K, in the same shape (one row per 32-bit lane; V[j] lane i = values 4j .. 4j + 3 of a 32-block of row
 * i, unsigned; vpdpbusd with the broadcast activations) and bit-identical to the GGML tiles (q32.h's and
 * qk.h's sequences). Tokens go NT_MAX at a time over a group's blocks. */
#include "common.h"
#if LY_X86
#include "avx512.h"
#include "kernels.h"
#include "q32.h"
#include "qk.h"

#define NT_MAX 4

LY_INLINE __m512i vload(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }

LY_INLINE __m512 f16x16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }

/* exact int32 dots of V[0..7] with a 32-block x: lo over values 0..15, hi over 16..31 */
LY_INLINE void dots(const __m512i V[8], const int8_t *x, __m512i *lo, __m512i *hi) {
    __m512i s[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    for (int j = 0; j < 8; j++) {
        int32_t x4;
        memcpy(&x4, x + 4 * j, 4);
        s[j / 4] = _mm512_dpbusd_epi32(s[j / 4], V[j], _mm512_set1_epi32(x4));
    }
    *lo = s[0];
    *hi = s[1];
}

typedef struct {
    const ly_act *a;
    int64_t k, nb;
    const uint8_t *pf; /* the next group (NULL: no prefetching), a share per 32-block of this one */
    int64_t pf_step;
} src_t;

LY_INLINE void prefetch_next(const src_t *s, int64_t b) {
    if (!s->pf) return;
    for (const uint8_t *p = s->pf + b * s->pf_step, *e = p + s->pf_step; p < e; p += 64)
        _mm_prefetch((const char *)p, _MM_HINT_T0);
}

LY_INLINE int32_t sx_of(const src_t *s, int64_t t, int64_t b) {
    const int32_t *s16 = s->a->s16 + t * (s->k / 16);
    return s16[2 * b] + s16[2 * b + 1];
}

/* bit 4 of byte e of lane i in V[j] <- bit 4j + e of qh lane i (row i's qh): every byte of a lane picks
 * the qh byte holding its bit, one bit per byte is tested, 16 added where set */
LY_INLINE void add_high_bits(__m512i qh, __m512i V[8]) {
    for (int j = 0; j < 8; j++) {
        const int sb = (j / 2) * 0x01010101;
        const __m512i sel = _mm512_set4_epi32(0x0c0c0c0c + sb, 0x08080808 + sb, 0x04040404 + sb, sb);
        const __m512i bit = _mm512_set1_epi32((int)(0x08040201u << (4 * (j % 2))));
        __mmask64 m = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, sel), bit);
        V[j] = _mm512_mask_add_epi8(V[j], m, V[j], _mm512_set1_epi8(16));
    }
}

/* Regions (x16.h): qs (256 bytes a block) | qh (Q5_0, Q5_1: 64) | d (32; with a min, d then m: 64).
 * IQ4_NL's values are its table + 128 (offset 128); Q5_0's are v + 16. */
typedef struct { int type, qh, has_min, offset; } q_fmt;

/* q32.h's step per block: acc = acc + (dw * dx) * (float)(dot - offset * sx), with a min
 * acc = acc + ((dw * dx) * (float)dot + (mw * dx) * (float)sx) */
LY_INLINE void group_q32(q_fmt f, const uint8_t *grp, src_t s, int64_t t, int NT, __m512 acc[NT_MAX]) {
    const uint8_t *qhreg = grp + s.nb * 256, *dreg = qhreg + (f.qh ? s.nb * 64 : 0);
    const int dstep = f.has_min ? 64 : 32;
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i table = _mm512_add_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)LY_KV_IQ4NL)),
                                          _mm512_set1_epi8((char)0x80));
    for (int64_t b = 0; b < s.nb; b++) {
        prefetch_next(&s, b);
        __m512i V[8];
        for (int j = 0; j < 4; j++) {
            __m512i T = vload(grp + b * 256 + 64 * j);
            V[j] = _mm512_and_si512(T, m4);
            V[j + 4] = _mm512_and_si512(_mm512_srli_epi16(T, 4), m4);
        }
        if (f.qh) add_high_bits(vload(qhreg + b * 64), V);
        if (f.type == LY_IQ4_NL)
            for (int j = 0; j < 8; j++) V[j] = _mm512_shuffle_epi8(table, V[j]);
        const __m512 dw = f16x16(dreg + b * dstep);
        for (int u = 0; u < NT; u++) {
            __m512i lo, hi;
            dots(V, s.a->q + (t + u) * s.k + b * 32, &lo, &hi);
            const int32_t sx = sx_of(&s, t + u, b);
            __m512i isum = _mm512_add_epi32(lo, hi);
            if (f.offset) isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(f.offset * sx));
            const __m512 dx = _mm512_set1_ps(s.a->d[(t + u) * s.nb + b]);
            __m512 v = _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum));
            if (f.has_min) {
                const __m512 mw = f16x16(dreg + b * dstep + 32);
                v = _mm512_add_ps(v, _mm512_mul_ps(_mm512_mul_ps(mw, dx), _mm512_set1_ps((float)sx)));
            }
            acc[u] = _mm512_add_ps(acc[u], v);
        }
    }
}

/* Q5_K: as x16_avx512.c's Q4_K (block 2g + p of a superblock is nibble p of its qs vectors 8g .. 8g + 7;
 * sc and m from the 12 scale bytes in T-form) plus bit 2g + p of each byte of its 8 qh vectors as 16. */
LY_INLINE void group_q5k(const uint8_t *grp, src_t s, int64_t t, int NT, __m512 acc[NT_MAX]) {
    const int64_t ns = s.nb / 8;
    const uint8_t *qh = grp + ns * 2048, *dm = qh + ns * 512, *scl = dm + ns * 64;
    const __m512i lo6 = _mm512_set1_epi32(0x3f3f3f3f), lo4 = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i hi2 = _mm512_set1_epi32(0x30303030), byte = _mm512_set1_epi32(0xff);
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
    for (int64_t sb = 0; sb < ns; sb++) {
        const __m512 d = f16x16(dm + sb * 64), dmin = f16x16(dm + sb * 64 + 32);
        const __m512i w0 = vload(scl + sb * 192), w1 = vload(scl + sb * 192 + 64), w2 = vload(scl + sb * 192 + 128);
        const __m512i sc4[2] = {_mm512_and_si512(w0, lo6),
                                _mm512_or_si512(_mm512_and_si512(w2, lo4),
                                                _mm512_and_si512(_mm512_srli_epi32(w0, 2), hi2))};
        const __m512i mn4[2] = {_mm512_and_si512(w1, lo6),
                                _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), lo4),
                                                _mm512_and_si512(_mm512_srli_epi32(w1, 2), hi2))};
        for (int B = 0; B < 8; B++) {
            const int64_t b = sb * 8 + B;
            prefetch_next(&s, b);
            const uint8_t *qs = grp + sb * 2048 + (B / 2) * 512;
            __m512i V[8];
            for (int j = 0; j < 8; j++) {
                __m512i lo = _mm512_and_si512(B % 2 ? _mm512_srli_epi16(vload(qs + 64 * j), 4) : vload(qs + 64 * j), m4);
                __m512i q = vload(qh + sb * 512 + 64 * j); /* bit B of each byte to bit 4 */
                q = B < 4 ? _mm512_slli_epi16(q, 4 - B) : B > 4 ? _mm512_srli_epi16(q, B - 4) : q;
                V[j] = _mm512_or_si512(lo, _mm512_and_si512(q, b4));
            }
            const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(sc4[B / 4], 8 * (B % 4)), byte);
            const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(mn4[B / 4], 8 * (B % 4)), byte);
            for (int u = 0; u < NT; u++) {
                __m512i lo, hi;
                dots(V, s.a->q + (t + u) * s.k + b * 32, &lo, &hi);
                __m512i raw = _mm512_mullo_epi32(sc, _mm512_add_epi32(lo, hi));
                __m512i corr = _mm512_mullo_epi32(mn, _mm512_set1_epi32(sx_of(&s, t + u, b)));
                __m512 dx = _mm512_set1_ps(s.a->d[(t + u) * s.nb + b]);
                __m512 c = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(raw)),
                                         _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(corr)));
                acc[u] = _mm512_add_ps(acc[u], c);
            }
        }
    }
}

LY_INLINE void run(int type, const uint8_t *grp, src_t s, int64_t t, int NT, float *y, int64_t ldy, int nrows) {
    __m512 acc[NT_MAX];
    for (int u = 0; u < NT; u++) acc[u] = _mm512_setzero_ps();
    switch (type) {
    case QK_Q5_K: group_q5k(grp, s, t, NT, acc); break;
    case LY_Q4_1: group_q32((q_fmt){LY_Q4_1, 0, 1, 0}, grp, s, t, NT, acc); break;
    case LY_Q5_0: group_q32((q_fmt){LY_Q5_0, 1, 0, 16}, grp, s, t, NT, acc); break;
    case LY_Q5_1: group_q32((q_fmt){LY_Q5_1, 1, 1, 0}, grp, s, t, NT, acc); break;
    case LY_IQ4_NL: group_q32((q_fmt){LY_IQ4_NL, 0, 0, 128}, grp, s, t, NT, acc); break;
    }
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    for (int u = 0; u < NT; u++) _mm512_mask_storeu_ps(y + (t + u) * ldy, m, acc[u]);
}

/* Rows [r0, r1), r0 a multiple of 16 (the driver's shares are whole groups) */
LY_INLINE void tile(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t group_bytes = GROUP * (int64_t)row_bytes;
    for (int64_t r = r0; r < r1; r += GROUP) {
        const uint8_t *grp = w + r * row_bytes;
        const int nrows = r1 - r < GROUP ? (int)(r1 - r) : GROUP;
        /* the first pass over a group prefetches the next one */
        src_t s = {a, a->k, a->k / 32, r + GROUP < r1 ? grp + group_bytes : NULL, group_bytes / (a->k / 32)};
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
    LY_AVX512 static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,         \
                               int64_t t0, int64_t t1, float *y, int64_t ldy) {                              \
        tile(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                                       \
    }
TILE_X16(q4_1, LY_Q4_1)
TILE_X16(q5_0, LY_Q5_0)
TILE_X16(q5_1, LY_Q5_1)
TILE_X16(iq4_nl, LY_IQ4_NL)
TILE_X16(q5k, QK_Q5_K)

ly_tile_fn ly_tiles_x16_ext_avx512(int type) {
    switch (type) {
    case LY_Q4_1: return q4_1;
    case LY_Q5_0: return q5_0;
    case LY_Q5_1: return q5_1;
    case LY_IQ4_NL: return iq4_nl;
    case QK_Q5_K: return q5k;
    default: return NULL;
    }
}
#endif
