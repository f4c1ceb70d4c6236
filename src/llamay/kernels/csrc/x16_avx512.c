/* AVX-512 VNNI tiles for weights in the x16 layout (x16.h): Q4_0, Q8_0, Q4_K and Q6_K, bit-identical to
 * the GGML tiles (q32.h's and qk.h's sequences, one row per lane). A group's blocks come from one
 * contiguous stream: a 32-block of 16 rows is 4 (4-bit) or 8 (8-bit) plain loads, masked into 8 vectors of
 * unsigned values, V[j] lane i = values 4j .. 4j + 3 of row i; vpdpbusd with the broadcast activations
 * gives each row's exact integer dots in its own lane. Tokens go NT_MAX at a time over a group's blocks. */
#include "common.h"
#if LY_X86
#include "avx512.h"
#include "kernels.h"
#include "q32.h"
#include "qk.h"

#define NT_MAX 4

LY_INLINE __m512i vload(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }

LY_INLINE __m512 f16x16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* The exact dots of V[0..3] with activations 0..15 (lo) and V[4..7] with 16..31 (hi) of a 32-block x */
LY_INLINE void dots(const __m512i V[8], const int8_t *x, __m512i *lo, __m512i *hi) {
    __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {
        int32_t xa, xb;
        memcpy(&xa, x + 4 * j, 4);
        memcpy(&xb, x + 16 + 4 * j, 4);
        a = _mm512_dpbusd_epi32(a, V[j], _mm512_set1_epi32(xa));
        b = _mm512_dpbusd_epi32(b, V[j + 4], _mm512_set1_epi32(xb));
    }
    *lo = a;
    *hi = b;
}

/* V[j] = bits shift .. shift + 3 of T[j] (4-bit values in T-form) */
LY_INLINE void nibbles(const uint8_t *qs, int shift, __m512i V[8], int stride) {
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int j = 0; j < 8; j++)
        V[j] = _mm512_and_si512(_mm512_srli_epi16(vload(qs + j * stride), shift), m4);
}

typedef struct {
    const ly_act *a;
    int64_t k, nb;
    const uint8_t *pf; /* the next group (NULL: no prefetching), fetched a share per block of this one: */
    int64_t pf_step;   /* its bytes over the blocks, so that it is in cache when its turn comes */
} src_t;

/* A group's regions are several streams at once, each a few KB: too short for the hardware prefetchers. */
LY_INLINE void prefetch_next(const src_t *s, int64_t b) {
    if (!s->pf) return;
    for (const uint8_t *p = s->pf + b * s->pf_step, *e = p + s->pf_step; p < e; p += 64)
        _mm_prefetch((const char *)p, _MM_HINT_T0);
}

static inline int32_t sx_of(const ly_act *a, int64_t k, int64_t t, int64_t b) {
    const int32_t *s16 = a->s16 + t * (k / 16);
    return s16[2 * b] + s16[2 * b + 1];
}

/* Q4_0 (offset 8) and Q8_0 (stored signed: v + 128 by flipping the top bit) over a group:
 * acc = acc + (dw * dx) * (float)(dot(u, x) - offset * sx), blocks in order */
LY_INLINE void group_q32(int type, const uint8_t *grp, src_t s, int64_t t, int NT, __m512 acc[NT_MAX]) {
    const int eight = type == LY_Q8_0, vec_bytes = eight ? 512 : 256, offset = eight ? 128 : 8;
    const uint8_t *dreg = grp + s.nb * vec_bytes;
    for (int64_t b = 0; b < s.nb; b++) {
        __m512i V[8];
        const uint8_t *qs = grp + b * vec_bytes;
        prefetch_next(&s, b);
        if (eight) {
            const __m512i flip = _mm512_set1_epi8((char)0x80);
            for (int j = 0; j < 8; j++) V[j] = _mm512_xor_si512(vload(qs + 64 * j), flip);
        } else {
            const __m512i m4 = _mm512_set1_epi8(15);
            for (int j = 0; j < 4; j++) {
                __m512i T = vload(qs + 64 * j);
                V[j] = _mm512_and_si512(T, m4);
                V[j + 4] = _mm512_and_si512(_mm512_srli_epi16(T, 4), m4);
            }
        }
        const __m512 dw = f16x16(dreg + b * 32);
        for (int u = 0; u < NT; u++) {
            __m512i lo, hi;
            dots(V, s.a->q + (t + u) * s.k + b * 32, &lo, &hi);
            __m512i isum = _mm512_sub_epi32(_mm512_add_epi32(lo, hi),
                                            _mm512_set1_epi32(offset * sx_of(s.a, s.k, t + u, b)));
            __m512 dx = _mm512_set1_ps(s.a->d[(t + u) * s.nb + b]);
            acc[u] = _mm512_add_ps(acc[u], _mm512_mul_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum)));
        }
    }
}

/* Q4_K: block 2g + p of a superblock is nibble p of its qs vectors 8g .. 8g + 7; its 6-bit scale and min
 * come from the 12 scale bytes in T-form (qk.c's packing, 16 rows at once). qk.h's step with
 * sc[2b] = sc[2b + 1] and cm[2b] = cm[2b + 1]: raw = sc * dot, corr = m * sx (the same integers). */
LY_INLINE void group_q4k(const uint8_t *grp, src_t s, int64_t t, int NT, __m512 acc[NT_MAX]) {
    const int64_t ns = s.nb / 8;
    const uint8_t *dm = grp + ns * 2048, *scl = dm + ns * 64;
    const __m512i lo6 = _mm512_set1_epi32(0x3f3f3f3f), lo4 = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i hi2 = _mm512_set1_epi32(0x30303030), byte = _mm512_set1_epi32(0xff);
    for (int64_t sb = 0; sb < ns; sb++) {
        prefetch_next(&s, sb);
        const __m512 d = f16x16(dm + sb * 64), dmin = f16x16(dm + sb * 64 + 32);
        const __m512i w0 = vload(scl + sb * 192), w1 = vload(scl + sb * 192 + 64), w2 = vload(scl + sb * 192 + 128);
        const __m512i sc4[2] = {_mm512_and_si512(w0, lo6),
                                _mm512_or_si512(_mm512_and_si512(w2, lo4),
                                                _mm512_and_si512(_mm512_srli_epi32(w0, 2), hi2))};
        const __m512i m4[2] = {_mm512_and_si512(w1, lo6),
                               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), lo4),
                                               _mm512_and_si512(_mm512_srli_epi32(w1, 2), hi2))};
        for (int B = 0; B < 8; B++) {
            const int64_t b = sb * 8 + B;
            __m512i V[8];
            nibbles(grp + sb * 2048 + (B / 2) * 512, 4 * (B % 2), V, 64);
            const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(sc4[B / 4], 8 * (B % 4)), byte);
            const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(m4[B / 4], 8 * (B % 4)), byte);
            for (int u = 0; u < NT; u++) {
                __m512i lo, hi;
                dots(V, s.a->q + (t + u) * s.k + b * 32, &lo, &hi);
                __m512i raw = _mm512_mullo_epi32(sc, _mm512_add_epi32(lo, hi));
                __m512i corr = _mm512_mullo_epi32(mn, _mm512_set1_epi32(sx_of(s.a, s.k, t + u, b)));
                __m512 dx = _mm512_set1_ps(s.a->d[(t + u) * s.nb + b]);
                __m512 c = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(raw)),
                                         _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(corr)));
                acc[u] = _mm512_add_ps(acc[u], c);
            }
        }
    }
}

/* Q6_K: block 4h + j of a superblock: low 4 bits nibble j / 2 of ql vectors 16h + 8 (j % 2) + jj, high 2
 * bits bits 2j of qh vectors 8h + jj (qk.c's layout, in T-form). qk.h's step: isum = raw - corr. */
LY_INLINE void group_q6k(const uint8_t *grp, src_t s, int64_t t, int NT, __m512 acc[NT_MAX]) {
    const int64_t ns = s.nb / 8;
    const uint8_t *qh = grp + ns * 2048, *scl = qh + ns * 1024, *dreg = scl + ns * 256;
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    for (int64_t sb = 0; sb < ns; sb++) {
        prefetch_next(&s, sb);
        const __m512 d = f16x16(dreg + sb * 32);
        for (int B = 0; B < 8; B++) {
            const int64_t b = sb * 8 + B;
            const int h = B / 4, j = B % 4;
            const uint8_t *ql = grp + sb * 2048 + (16 * h + 8 * (j % 2)) * 64, *qhv = qh + sb * 1024 + 8 * h * 64;
            __m512i V[8];
            for (int jj = 0; jj < 8; jj++) {
                __m512i lo4 = _mm512_and_si512(_mm512_srli_epi16(vload(ql + 64 * jj), 4 * (j / 2)), m4);
                __m512i hi2 = _mm512_and_si512(_mm512_srli_epi16(vload(qhv + 64 * jj), 2 * j), m2);
                V[jj] = _mm512_or_si512(lo4, _mm512_slli_epi16(hi2, 4));
            }
            const __m512i sca = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(scl + sb * 256 + 2 * B * 16)));
            const __m512i scb = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(scl + sb * 256 + 2 * B * 16 + 16)));
            for (int u = 0; u < NT; u++) {
                __m512i lo, hi;
                dots(V, s.a->q + (t + u) * s.k + b * 32, &lo, &hi);
                const int32_t *s16 = s.a->s16 + (t + u) * (s.k / 16);
                __m512i raw = _mm512_add_epi32(_mm512_mullo_epi32(lo, sca), _mm512_mullo_epi32(hi, scb));
                __m512i corr = _mm512_add_epi32(_mm512_mullo_epi32(sca, _mm512_set1_epi32(32 * s16[2 * b])),
                                                _mm512_mullo_epi32(scb, _mm512_set1_epi32(32 * s16[2 * b + 1])));
                __m512 dx = _mm512_set1_ps(s.a->d[(t + u) * s.nb + b]);
                __m512 c = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(_mm512_sub_epi32(raw, corr)));
                acc[u] = _mm512_add_ps(acc[u], c);
            }
        }
    }
}

LY_INLINE void run(int type, const uint8_t *grp, src_t s, int64_t t, int NT, float *y, int64_t ldy, int nrows) {
    __m512 acc[NT_MAX];
    for (int u = 0; u < NT; u++) acc[u] = _mm512_setzero_ps();
    if (type == QK_Q4_K) group_q4k(grp, s, t, NT, acc);
    else if (type == QK_Q6_K) group_q6k(grp, s, t, NT, acc);
    else group_q32(type, grp, s, t, NT, acc);
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    for (int u = 0; u < NT; u++) _mm512_mask_storeu_ps(y + (t + u) * ldy, m, acc[u]);
}

/* Rows [r0, r1), r0 a multiple of 16 (the driver's shares are whole groups) */
LY_INLINE void tile(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t group_bytes = GROUP * (int64_t)row_bytes, units = type == QK_Q4_K || type == QK_Q6_K ? a->k / 256 : a->k / 32;
    for (int64_t r = r0; r < r1; r += GROUP) {
        const uint8_t *grp = w + r * row_bytes; /* group r / 16 starts at 16 (r / 16) row_bytes */
        const int nrows = r1 - r < GROUP ? (int)(r1 - r) : GROUP;
        /* the first pass over a group prefetches the next one; later passes find both in cache */
        src_t s = {a, a->k, a->k / 32, r + GROUP < r1 ? grp + group_bytes : NULL, group_bytes / units};
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
TILE_X16(q4_0, LY_Q4_0)
TILE_X16(q8_0, LY_Q8_0)
TILE_X16(q4k, QK_Q4_K)
TILE_X16(q6k, QK_Q6_K)

ly_tile_fn ly_tiles_x16_avx512(int type) {
    switch (type) {
    case LY_Q4_0: return q4_0;
    case LY_Q8_0: return q8_0;
    case QK_Q4_K: return q4k;
    case QK_Q6_K: return q6k;
    default: return NULL;
    }
}
#endif
