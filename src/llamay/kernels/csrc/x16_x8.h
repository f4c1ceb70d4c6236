/* 256-bit tiles for weights in the x16 layout (x16.h), built twice: AVX2 (x16_avx2.c) and AVX-VNNI
 * (x16_avxvnni.c); the includer defines X8_TARGET, X8_VNNI and X8_ENTRY as for q32_x8.h. Bit-identical to
 * the GGML tiles: q32.h's and qk.h's sequences, one row per float lane.
 *
 * A 64-byte T-form vector holds rows 0-7 in its first 32 bytes and rows 8-15 in its second, so a group is
 * two 8-row halves read from the same stream: V[j] lane i = values 4j .. 4j + 3 of a 32-block of row
 * 8h + i, unsigned (Q8_0, IQ4_NL without VNNI: signed, through abs / sign). Tokens go NT_MAX at a time over a
 * group's blocks; one token takes both halves block by block (two chains), more a half at a time. */
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

/* Exact int32 dots, one per row lane, of V[0..7] with activations x[0..31]: lo gets j < 4 (values 0..15)
 * and hi j >= 4, or lo all 32 when hi is NULL. Without VNNI the int16 pair sums of maddubs hold up to
 * 32767: 8 vectors of 4-bit values (2 * 15 * 127 each), 4 of 5-bit, 2 of 6-bit, 1 of 8-bit. */
LY_INLINE void dots(int kind, const __m256i V[8], const int8_t *x, __m256i *lo, __m256i *hi) {
    __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#if X8_VNNI
    (void)kind;
    for (int j = 0; j < 8; j++) s[j / 4] = _mm256_dpbusd_avx_epi32(s[j / 4], V[j], bcast4(x + 4 * j));
#else
    const __m256i ones = _mm256_set1_epi16(1);
    const int run = kind == K_U4 ? (hi ? 4 : 8) : kind == K_U5 ? 4 : kind == K_U6 ? 2 : 1;
    for (int j0 = 0; j0 < 8; j0 += run) {
        __m256i s16 = _mm256_setzero_si256();
        for (int j = j0; j < j0 + run; j++) {
            __m256i xj = bcast4(x + 4 * j);
            s16 = kind == K_S8 ? _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_abs_epi8(V[j]),
                                                                           _mm256_sign_epi8(xj, V[j])))
                               : _mm256_add_epi16(s16, _mm256_maddubs_epi16(V[j], xj));
        }
        s[j0 / 4] = _mm256_add_epi32(s[j0 / 4], _mm256_madd_epi16(s16, ones));
    }
#endif
    if (hi) {
        *lo = s[0];
        *hi = s[1];
    } else {
        *lo = _mm256_add_epi32(s[0], s[1]);
    }
}

/* sca * (dot of V[0..3]) + scb * (dot of V[4..7]), exact int32 per row lane (sca, scb: int32 lanes of
 * magnitude below 2^8). Without VNNI the scales ride in madd's int16 pairs, which also widens. */
LY_INLINE __m256i scaled_dots(int kind, const __m256i V[8], const int8_t *x, __m256i sca, __m256i scb) {
#if X8_VNNI
    __m256i lo, hi;
    dots(kind, V, x, &lo, &hi);
    return _mm256_add_epi32(_mm256_mullo_epi32(lo, sca), _mm256_mullo_epi32(hi, scb));
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
        _mm_prefetch((const char *)p, _MM_HINT_T0);
}

LY_INLINE int32_t sx_of(const ly_act *a, int64_t k, int64_t t, int64_t b) {
    const int32_t *s16 = a->s16 + t * (k / 16);
    return s16[2 * b] + s16[2 * b + 1];
}

LY_INLINE const int8_t *xq(const src_t *s, int64_t t, int64_t b) { return s->a->q + t * s->k + b * 32; }

LY_INLINE float dx_of(const src_t *s, int64_t t, int64_t b) { return s->a->d[t * s->nb + b]; }

/* A 32-block format in the x16 layout: regions qs (vec_bytes a block) | qh (Q5_0, Q5_1: one vector a
 * block) | d (32 bytes a block; with a min, d then m: 64). Signed values with VNNI are stored + 128 (Q8_0:
 * the top bit flipped; IQ4_NL: the table shifted), offset 128; without it dotted signed. */
typedef struct { int type, kind, vec_bytes, qh, has_min, offset; } q_fmt;

#define S8_KIND (X8_VNNI ? K_U8 : K_S8)
#define S8_OFFSET (X8_VNNI ? 128 : 0)

/* bit 4 of byte e of lane i in V[j] <- bit 4j + e of qh lane i: every byte of a lane picks the qh byte
 * holding its bit, which is then tested */
LY_INLINE void add_high_bits(__m256i qh, __m256i V[8]) {
    const __m256i lane_bytes = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0c0c0c0c, 0, 0x04040404,
                                                 0x08080808, 0x0c0c0c0c), b4 = _mm256_set1_epi8(0x10);
    for (int j = 0; j < 8; j++) {
        const __m256i sel = _mm256_add_epi8(_mm256_set1_epi8((char)(j / 2)), lane_bytes);
        const __m256i bit = _mm256_set1_epi32((int)(0x08040201u << (4 * (j % 2))));
        __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(qh, sel), bit);
        V[j] = _mm256_or_si256(V[j], _mm256_and_si256(_mm256_cmpeq_epi8(x, bit), b4));
    }
}

LY_INLINE void unpack_q32(q_fmt f, const uint8_t *qs, const uint8_t *qh, __m256i V[8]) {
    if (f.type == LY_Q8_0) {
        for (int j = 0; j < 8; j++)
            V[j] = X8_VNNI ? _mm256_xor_si256(vload(qs + 64 * j), _mm256_set1_epi8((char)0x80)) : vload(qs + 64 * j);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int j = 0; j < 4; j++) {
        __m256i T = vload(qs + 64 * j);
        V[j] = _mm256_and_si256(T, m4);
        V[j + 4] = _mm256_and_si256(_mm256_srli_epi16(T, 4), m4);
    }
    if (f.qh) add_high_bits(vload(qh), V);
    if (f.type == LY_IQ4_NL) {
        __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)LY_KV_IQ4NL));
        if (X8_VNNI) table = _mm256_add_epi8(table, _mm256_set1_epi8((char)0x80));
        for (int j = 0; j < 8; j++) V[j] = _mm256_shuffle_epi8(table, V[j]);
    }
}

/* q32.h's step per block: acc = acc + (dw * dx) * (float)(dot - offset * sx), with a min
 * acc = acc + ((dw * dx) * (float)dot + (mw * dx) * (float)sx) */
LY_INLINE void group_q32(q_fmt f, const uint8_t *grp, src_t s, int64_t t, int NT, int h0, int h1, __m256 acc[2][NT_MAX]) {
    const uint8_t *qhreg = grp + s.nb * f.vec_bytes, *dreg = qhreg + (f.qh ? s.nb * 64 : 0);
    const int dstep = f.has_min ? 64 : 32;
    for (int64_t b = 0; b < s.nb; b++) {
        prefetch_next(&s, b);
        for (int h = h0; h < h1; h++) {
            __m256i V[8];
            unpack_q32(f, grp + b * f.vec_bytes + h * HALF, qhreg + b * 64 + h * HALF, V);
            const __m256 dw = f16x8(dreg + b * dstep + 16 * h);
            for (int u = 0; u < NT; u++) {
                __m256i dot;
                dots(f.kind, V, xq(&s, t + u, b), &dot, NULL);
                const int32_t sx = sx_of(s.a, s.k, t + u, b);
                const __m256 dx = _mm256_set1_ps(dx_of(&s, t + u, b));
                if (f.offset) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(f.offset * sx));
                __m256 v = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(dot));
                if (f.has_min) {
                    const __m256 mw = f16x8(dreg + b * dstep + 32 + 16 * h);
                    v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(mw, dx), _mm256_set1_ps((float)sx)));
                }
                acc[h][u] = _mm256_add_ps(acc[h][u], v);
            }
        }
    }
}

/* Q4_K, Q5_K (five): as x16_avx512.c's, 8 rows a half: block 2g + p of a superblock is nibble p of its qs
 * vectors 8g .. 8g + 7 (Q5_K: plus bit 2g + p of each byte of its 8 qh vectors as 16); sc and m from the 12
 * scale bytes in T-form (qk.c's packing). */
LY_INLINE void group_q45k(int five, const uint8_t *grp, src_t s, int64_t t, int NT, int h0, int h1,
                          __m256 acc[2][NT_MAX]) {
    const int64_t ns = s.nb / 8;
    const uint8_t *qhreg = grp + ns * 2048, *dm = qhreg + (five ? ns * 512 : 0), *scl = dm + ns * 64;
    const __m256i lo6 = _mm256_set1_epi32(0x3f3f3f3f), lo4 = _mm256_set1_epi32(0x0f0f0f0f);
    const __m256i hi2 = _mm256_set1_epi32(0x30303030), byte = _mm256_set1_epi32(0xff), m4 = _mm256_set1_epi8(15);
    for (int64_t sb = 0; sb < ns; sb++) {
        __m256i sc4[2][2], mn4[2][2]; /* [half][blocks 0-3 | 4-7]: 4 bytes of scales (mins) a lane */
        for (int h = h0; h < h1; h++) {
            const uint8_t *sp = scl + sb * 192 + h * HALF;
            const __m256i w0 = vload(sp), w1 = vload(sp + 64), w2 = vload(sp + 128);
            sc4[h][0] = _mm256_and_si256(w0, lo6);
            sc4[h][1] = _mm256_or_si256(_mm256_and_si256(w2, lo4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), hi2));
            mn4[h][0] = _mm256_and_si256(w1, lo6);
            mn4[h][1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), lo4),
                                        _mm256_and_si256(_mm256_srli_epi32(w1, 2), hi2));
        }
        for (int B = 0; B < 8; B++) {
            const int64_t b = sb * 8 + B;
            prefetch_next(&s, b);
            for (int h = h0; h < h1; h++) {
                const __m256 d = f16x8(dm + sb * 64 + 16 * h), dmin = f16x8(dm + sb * 64 + 32 + 16 * h);
                const uint8_t *qs = grp + sb * 2048 + (B / 2) * 512 + h * HALF;
                __m256i V[8];
                for (int j = 0; j < 8; j++)
                    V[j] = _mm256_and_si256(B % 2 ? _mm256_srli_epi16(vload(qs + 64 * j), 4) : vload(qs + 64 * j), m4);
                if (five) /* bit B of each qh byte to bit 4 */
                    for (int j = 0; j < 8; j++) {
                        __m256i q = vload(qhreg + sb * 512 + 64 * j + h * HALF);
                        q = B < 4 ? _mm256_slli_epi16(q, 4 - B) : B > 4 ? _mm256_srli_epi16(q, B - 4) : q;
                        V[j] = _mm256_or_si256(V[j], _mm256_and_si256(q, _mm256_set1_epi8(0x10)));
                    }
                const __m256i sc = _mm256_and_si256(_mm256_srli_epi32(sc4[h][B / 4], 8 * (B % 4)), byte);
                const __m256i mn = _mm256_and_si256(_mm256_srli_epi32(mn4[h][B / 4], 8 * (B % 4)), byte);
                for (int u = 0; u < NT; u++) {
                    __m256i raw = scaled_dots(five ? K_U5 : K_U4, V, xq(&s, t + u, b), sc, sc);
                    __m256i corr = _mm256_mullo_epi32(mn, _mm256_set1_epi32(sx_of(s.a, s.k, t + u, b)));
                    __m256 dx = _mm256_set1_ps(dx_of(&s, t + u, b));
                    __m256 c = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(raw)),
                                             _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(corr)));
                    acc[h][u] = _mm256_add_ps(acc[h][u], c);
                }
            }
        }
    }
}

/* Q6_K: as x16_avx512.c's; block 4hh + j: low 4 bits nibble j / 2 of ql vectors 16hh + 8 (j % 2) + jj, high
 * 2 bits bits 2j of qh vectors 8hh + jj. isum = raw - corr. */
LY_INLINE void group_q6k(const uint8_t *grp, src_t s, int64_t t, int NT, int h0, int h1, __m256 acc[2][NT_MAX]) {
    const int64_t ns = s.nb / 8;
    const uint8_t *qh = grp + ns * 2048, *scl = qh + ns * 1024, *dreg = scl + ns * 256;
    const __m256i m4 = _mm256_set1_epi8(15), hi2 = _mm256_set1_epi8(0x30);
    for (int64_t sb = 0; sb < ns; sb++) {
        for (int B = 0; B < 8; B++) {
            prefetch_next(&s, sb * 8 + B);
            for (int h = h0; h < h1; h++) {
                const __m256 d = f16x8(dreg + sb * 32 + 16 * h);
                const int64_t b = sb * 8 + B;
                const int hh = B / 4, j = B % 4;
                const uint8_t *ql = grp + sb * 2048 + (16 * hh + 8 * (j % 2)) * 64 + h * HALF;
                const uint8_t *qhv = qh + sb * 1024 + 8 * hh * 64 + h * HALF;
                __m256i V[8];
                for (int jj = 0; jj < 8; jj++) { /* bits 2j, 2j + 1 of each qh byte to bits 4, 5 */
                    __m256i lo4 = _mm256_and_si256(j / 2 ? _mm256_srli_epi16(vload(ql + 64 * jj), 4) : vload(ql + 64 * jj), m4);
                    __m256i q = vload(qhv + 64 * jj);
                    q = j < 2 ? _mm256_slli_epi16(q, 4 - 2 * j) : j == 3 ? _mm256_srli_epi16(q, 2) : q;
                    V[jj] = _mm256_or_si256(lo4, _mm256_and_si256(q, hi2));
                }
                const uint8_t *sc8 = scl + sb * 256 + 2 * B * 16 + 8 * h;
                const __m256i sca = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc8));
                const __m256i scb = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc8 + 16)));
                for (int u = 0; u < NT; u++) {
                    const int32_t *s16 = s.a->s16 + (t + u) * (s.k / 16);
                    __m256i raw = scaled_dots(K_U6, V, xq(&s, t + u, b), sca, scb);
                    __m256i corr = _mm256_add_epi32(_mm256_mullo_epi32(sca, _mm256_set1_epi32(32 * s16[2 * b])),
                                                    _mm256_mullo_epi32(scb, _mm256_set1_epi32(32 * s16[2 * b + 1])));
                    __m256 dx = _mm256_set1_ps(dx_of(&s, t + u, b));
                    __m256 c = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(raw, corr)));
                    acc[h][u] = _mm256_add_ps(acc[h][u], c);
                }
            }
        }
    }
}

/* The first nrows of 16 rows' results of NT tokens -> y */
LY_INLINE void store_rows(__m256 acc[2][NT_MAX], int NT, float *y, int64_t ldy, int nrows) {
    for (int u = 0; u < NT; u++) {
        if (nrows == X16_ROWS) {
            _mm256_storeu_ps(y + u * ldy, acc[0][u]);
            _mm256_storeu_ps(y + u * ldy + 8, acc[1][u]);
            continue;
        }
        float tmp[X16_ROWS];
        _mm256_storeu_ps(tmp, acc[0][u]);
        _mm256_storeu_ps(tmp + 8, acc[1][u]);
        memcpy(y + u * ldy, tmp, nrows * sizeof(float));
    }
}

LY_INLINE void run(int type, const uint8_t *grp, src_t s, int64_t t, int NT, float *y, int64_t ldy, int nrows) {
    __m256 acc[2][NT_MAX];
    for (int u = 0; u < NT; u++) acc[0][u] = acc[1][u] = _mm256_setzero_ps();
    /* one token: both halves a block at a time (two chains); more: a half at a time (fewer live registers) */
    for (int h = 0; h < 2; h += NT == 1 ? 2 : 1) {
        const int h1 = NT == 1 ? 2 : h + 1;
        switch (type) {
        case QK_Q4_K: group_q45k(0, grp, s, t, NT, h, h1, acc); break;
        case QK_Q5_K: group_q45k(1, grp, s, t, NT, h, h1, acc); break;
        case QK_Q6_K: group_q6k(grp, s, t, NT, h, h1, acc); break;
        case LY_Q8_0: group_q32((q_fmt){LY_Q8_0, S8_KIND, 512, 0, 0, S8_OFFSET}, grp, s, t, NT, h, h1, acc); break;
        case LY_Q4_0: group_q32((q_fmt){LY_Q4_0, K_U4, 256, 0, 0, 8}, grp, s, t, NT, h, h1, acc); break;
        case LY_Q4_1: group_q32((q_fmt){LY_Q4_1, K_U4, 256, 0, 1, 0}, grp, s, t, NT, h, h1, acc); break;
        case LY_Q5_0: group_q32((q_fmt){LY_Q5_0, K_U5, 256, 1, 0, 16}, grp, s, t, NT, h, h1, acc); break;
        case LY_Q5_1: group_q32((q_fmt){LY_Q5_1, K_U5, 256, 1, 1, 0}, grp, s, t, NT, h, h1, acc); break;
        case LY_IQ4_NL: group_q32((q_fmt){LY_IQ4_NL, S8_KIND, 256, 0, 0, S8_OFFSET}, grp, s, t, NT, h, h1, acc); break;
        }
    }
    store_rows(acc, NT, y + t * ldy, ldy, nrows);
}

/* Rows [r0, r1), r0 a multiple of 16 (the driver's shares are whole groups) */
LY_INLINE void tile(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t group_bytes = X16_ROWS * (int64_t)row_bytes;
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
