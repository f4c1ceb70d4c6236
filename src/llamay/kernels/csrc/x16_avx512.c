/* AVX-512 VNNI tiles for weights in the x16 layout (x16.h): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K, Q5_K
 * and Q6_K, bit-identical to
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
#include <stdlib.h>

#define NT_MAX 8 /* tokens per pass over a buffered group */
#define FEW 3    /* below this many tokens a group is used as it is read, not buffered */

LY_INLINE __m512i vload(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }

LY_INLINE __m512 f16x16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

typedef struct {
    const ly_act *a;
    int64_t k, nb;
    const uint8_t *pf; /* the next group (NULL: no prefetching), fetched a share per 32-block of this one: */
    int64_t pf_step;   /* its bytes over the blocks, so that it is in cache when its turn comes */
    const int32_t *sx; /* many tokens: [t - t0][block] the activation block sums (times Q4_0's or Q8_0's
                        * offset), or for the K-quants the int16 pairs kcorr reads (kpairs), computed once
                        * per tile; NULL: computed as they are needed */
    int64_t t0;
} src_t;

/* Token t's block b: its activation sum times `mul` */
LY_INLINE int32_t sx_times(const src_t *s, int64_t t, int64_t b, int mul) {
    if (s->sx) return s->sx[(t - s->t0) * s->nb + b];
    const int32_t *s16 = s->a->s16 + t * (s->k / 16) + 2 * b;
    return mul * (s16[0] + s16[1]);
}

/* A group's regions are several streams at once, each a few KB: too short for the hardware prefetchers.
 * Into L2, not L1: a group at 2048 wide is 18 KB, and the next one fetched into L1 evicted the lines of the
 * one being read (the decode of a 1B model streamed 15% slower). */
LY_INLINE void prefetch_next(const src_t *s, int64_t b) {
    if (!s->pf) return;
    for (const uint8_t *p = s->pf + b * s->pf_step, *e = p + s->pf_step; p < e; p += 64)
        _mm_prefetch((const char *)p, _MM_HINT_T1);
}

/* A block's per-row float and integer factors: the 32-block formats' d (and m as dmin); Q4_K and Q5_K d,
 * dmin, sa = scale, sb = min; Q6_K d, sa, sb = the scales of its two 16-value halves. */
typedef struct {
    __m512 d, dmin;
    __m512i sa, sb;
} terms_t;

/* The signed formats' values are used unsigned, plus this (Q8_0's by flipping the top bit, IQ4_NL's table
 * shifted); the dot of the unsigned values minus offset * sx is the dot of the signed ones */
#define OFFSET(type) ((type) == LY_Q8_0 || (type) == LY_IQ4_NL ? 128 : (type) == LY_Q4_0 ? 8 : (type) == LY_Q5_0 ? 16 : 1)
#define HAS_MIN(type) ((type) == LY_Q4_1 || (type) == LY_Q5_1)
#define K_MIN(type) ((type) == QK_Q4_K || (type) == QK_Q5_K)

/* Tokens per pass over a buffered group: Q6_K keeps two dots per token (its halves' scales differ) */
#define NT_OF(type) ((type) == QK_Q6_K ? 4 : NT_MAX)

/* Block b's exact int32 dots for tokens t + u (V: its unsigned values, lanes = rows): lo over its 32
 * values, or for Q6_K lo and hi over its 16-value halves (V[0..3], V[4..7]). */
LY_INLINE void dots(int type, const __m512i *V, const src_t *s, int64_t t, int64_t b, int NT, __m512i lo[NT_MAX],
                    __m512i hi[NT_MAX]) {
    const int halves = type == QK_Q6_K;
    const int8_t *x[NT_MAX];
    for (int u = 0; u < NT; u++) {
        lo[u] = hi[u] = _mm512_setzero_si512();
        x[u] = s->a->q + (t + u) * s->k + b * 32;
    }
    for (int j = 0; j < 8; j++) {
        const __m512i v = V[j];
        for (int u = 0; u < NT; u++) {
            int32_t x4;
            memcpy(&x4, x[u] + 4 * j, 4);
            if (halves && j >= 4) hi[u] = _mm512_dpbusd_epi32(hi[u], v, _mm512_set1_epi32(x4));
            else lo[u] = _mm512_dpbusd_epi32(lo[u], v, _mm512_set1_epi32(x4));
        }
    }
}

/* acc[u] += a 32-block format's block b canonical term for token t + u (q32.h) */
LY_INLINE void step(int type, const __m512i *V, const terms_t *tm, const src_t *s, int64_t t, int64_t b, int NT,
                    __m512 acc[NT_MAX]) {
    __m512i lo[NT_MAX], hi[NT_MAX];
    dots(type, V, s, t, b, NT, lo, hi);
    for (int u = 0; u < NT; u++) {
        const __m512 dx = _mm512_set1_ps(s->a->d[(t + u) * s->nb + b]);
        __m512 c;
        if (HAS_MIN(type)) { /* weight = d * u + m, u >= 0 */
            c = _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(tm->d, dx), _mm512_cvtepi32_ps(lo[u])),
                              _mm512_mul_ps(_mm512_mul_ps(tm->dmin, dx),
                                            _mm512_set1_ps((float)sx_times(s, t + u, b, 1))));
        } else {
            __m512i isum = _mm512_sub_epi32(lo[u], _mm512_set1_epi32(sx_times(s, t + u, b, OFFSET(type))));
            c = _mm512_mul_ps(_mm512_mul_ps(tm->d, dx), _mm512_cvtepi32_ps(isum));
        }
        acc[u] = _mm512_add_ps(acc[u], c);
    }
}

/* A K-quant block b (of super-block b / 8) for tokens t + u: qk.h's integers, raw[u] += its scaled dots and
 * (corr not NULL) corr[u] += its correction, exact, so the super-block's float step can follow its last
 * block. */
LY_INLINE void kstep(int type, const __m512i *V, const terms_t *tm, const src_t *s, int64_t t, int64_t b, int NT,
                     __m512i raw[NT_MAX], __m512i corr[NT_MAX]) {
    __m512i lo[NT_MAX], hi[NT_MAX];
    dots(type, V, s, t, b, NT, lo, hi);
    for (int u = 0; u < NT; u++) {
        if (K_MIN(type)) {
            raw[u] = _mm512_add_epi32(raw[u], _mm512_mullo_epi32(tm->sa, lo[u]));
            if (corr) corr[u] = _mm512_add_epi32(corr[u], _mm512_mullo_epi32(tm->sb, _mm512_set1_epi32(sx_times(s, t + u, b, 1))));
        } else { /* Q6_K: the halves' scales sa, sb; its offset 32 in corr */
            const int32_t *s16 = s->a->s16 + (t + u) * (s->k / 16) + 2 * b;
            raw[u] = _mm512_add_epi32(raw[u], _mm512_add_epi32(_mm512_mullo_epi32(lo[u], tm->sa),
                                                               _mm512_mullo_epi32(hi[u], tm->sb)));
            if (corr) corr[u] = _mm512_add_epi32(corr[u], _mm512_add_epi32(_mm512_mullo_epi32(tm->sa, _mm512_set1_epi32(32 * s16[0])),
                                                                 _mm512_mullo_epi32(tm->sb, _mm512_set1_epi32(32 * s16[1]))));
        }
    }
}

/* acc[u] += super-block sb's canonical float step (qk.h) for token t + u, its integers done (d, dmin: tm's) */
LY_INLINE void kfinish(int type, const terms_t *tm, const src_t *s, int64_t t, int64_t sb, int NT,
                       const __m512i raw[NT_MAX], const __m512i corr[NT_MAX], __m512 acc[NT_MAX]) {
    const int64_t nsb = s->nb / 8;
    for (int u = 0; u < NT; u++) {
        const __m512 dx = _mm512_set1_ps(s->a->d[(t + u) * nsb + sb]);
        __m512 c;
        if (K_MIN(type))
            c = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(tm->d, dx), _mm512_cvtepi32_ps(raw[u])),
                              _mm512_mul_ps(_mm512_mul_ps(tm->dmin, dx), _mm512_cvtepi32_ps(corr[u])));
        else
            c = _mm512_mul_ps(_mm512_mul_ps(tm->d, dx), _mm512_cvtepi32_ps(_mm512_sub_epi32(raw[u], corr[u])));
        acc[u] = _mm512_add_ps(acc[u], c);
    }
}

/* bit 4 of byte e of lane i in V[j] <- bit 4j + e of lane i of qh (row i's qh): every byte of a lane picks
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

/* A 32-block format's block b: the 4 T-form vectors of nibbles (values 0..15 low, 16..31 high; Q5_0 and
 * Q5_1 with their qh bits as 16, IQ4_NL through its table + 128) or Q8_0's 8 (stored signed: + 128 by
 * flipping the top bit), and its d (and m). Regions: qs | qh (Q5_0, Q5_1: 64 bytes a block) | d (m). */
LY_INLINE void unpack_q32(int type, const uint8_t *grp, int64_t nb, int64_t b, __m512i V[8], terms_t *tm) {
    const int eight = type == LY_Q8_0, vec_bytes = eight ? 512 : 256, qh = type == LY_Q5_0 || type == LY_Q5_1;
    const uint8_t *qs = grp + b * vec_bytes, *dreg = grp + nb * vec_bytes + (qh ? nb * 64 : 0);
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
    if (qh) add_high_bits(vload(grp + nb * 256 + b * 64), V);
    if (type == LY_IQ4_NL) {
        const __m512i table = _mm512_add_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)LY_KV_IQ4NL)),
                                              _mm512_set1_epi8((char)0x80));
        for (int j = 0; j < 8; j++) V[j] = _mm512_shuffle_epi8(table, V[j]);
    }
    const int dstep = HAS_MIN(type) ? 64 : 32;
    tm->d = f16x16(dreg + b * dstep);
    if (HAS_MIN(type)) tm->dmin = f16x16(dreg + b * dstep + 32);
}

/* Q4_K superblock sb: the 12 scale bytes of 16 rows (T-form) -> bytes of sc[0..3] | sc[4..7] and of the
 * mins the same (qk.c's 6-bit packing, 16 rows at once); d and dmin */
typedef struct {
    __m512i sc[2], mn[2];
    __m512 d, dmin;
} q4k_sb;

LY_INLINE void q4k_superblock(int type, const uint8_t *grp, int64_t ns, int64_t sb, q4k_sb *h) {
    const int64_t qh = type == QK_Q5_K ? ns * 512 : 0; /* Q5_K's qh region sits between qs and d, dmin */
    const uint8_t *dm = grp + ns * 2048 + qh + sb * 64, *scl = grp + ns * 2048 + qh + ns * 64 + sb * 192;
    const __m512i lo6 = _mm512_set1_epi32(0x3f3f3f3f), lo4 = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i hi2 = _mm512_set1_epi32(0x30303030);
    const __m512i w0 = vload(scl), w1 = vload(scl + 64), w2 = vload(scl + 128);
    h->sc[0] = _mm512_and_si512(w0, lo6);
    h->sc[1] = _mm512_or_si512(_mm512_and_si512(w2, lo4), _mm512_and_si512(_mm512_srli_epi32(w0, 2), hi2));
    h->mn[0] = _mm512_and_si512(w1, lo6);
    h->mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), lo4),
                               _mm512_and_si512(_mm512_srli_epi32(w1, 2), hi2));
    h->d = f16x16(dm);
    h->dmin = f16x16(dm + 32);
}

/* Q4_K block B of superblock sb: nibble B % 2 of qs vectors 8 (B / 2) .. + 7; Q5_K's plus bit B of each
 * byte of its superblock's 8 qh vectors as 16 */
LY_INLINE void unpack_q4k(int type, const uint8_t *grp, int64_t ns, int64_t sb, int B, const q4k_sb *h, __m512i V[8],
                          terms_t *tm) {
    const uint8_t *qs = grp + sb * 2048 + (B / 2) * 512, *qh = grp + ns * 2048 + sb * 512;
    const __m512i m4 = _mm512_set1_epi8(15), byte = _mm512_set1_epi32(0xff), b4 = _mm512_set1_epi8(16);
    for (int j = 0; j < 8; j++) {
        V[j] = _mm512_and_si512(_mm512_srli_epi16(vload(qs + 64 * j), 4 * (B % 2)), m4);
        if (type == QK_Q5_K) {
            __m512i q = vload(qh + 64 * j);
            q = B < 4 ? _mm512_slli_epi16(q, 4 - B) : B > 4 ? _mm512_srli_epi16(q, B - 4) : q;
            V[j] = _mm512_or_si512(V[j], _mm512_and_si512(q, b4));
        }
    }
    tm->sa = _mm512_and_si512(_mm512_srli_epi32(h->sc[B / 4], 8 * (B % 4)), byte);
    tm->sb = _mm512_and_si512(_mm512_srli_epi32(h->mn[B / 4], 8 * (B % 4)), byte);
    tm->d = h->d;
    tm->dmin = h->dmin;
}

/* Q6_K block B = 4h + j of superblock sb: low 4 bits nibble j / 2 of ql vectors 16h + 8 (j % 2) + jj, high
 * 2 bits bits 2j of qh vectors 8h + jj (qk.c's layout, in T-form); the scales of its halves */
LY_INLINE void unpack_q6k(const uint8_t *grp, int64_t ns, int64_t sb, int B, __m512i V[8], terms_t *tm) {
    const int h = B / 4, j = B % 4;
    const uint8_t *ql = grp + sb * 2048 + (16 * h + 8 * (j % 2)) * 64;
    const uint8_t *qh = grp + ns * 2048 + sb * 1024 + 8 * h * 64, *scl = grp + ns * 3072 + sb * 256 + 2 * B * 16;
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    for (int jj = 0; jj < 8; jj++) {
        __m512i lo4 = _mm512_and_si512(_mm512_srli_epi16(vload(ql + 64 * jj), 4 * (j / 2)), m4);
        __m512i hi2 = _mm512_and_si512(_mm512_srli_epi16(vload(qh + 64 * jj), 2 * j), m2);
        V[jj] = _mm512_or_si512(lo4, _mm512_slli_epi16(hi2, 4));
    }
    tm->sa = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)scl));
    tm->sb = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(scl + 16)));
    tm->d = f16x16(grp + ns * 3328 + sb * 32);
}

/* A buffered group: every block's vectors and terms, unpacked once for many tokens */
typedef struct {
    __m512i *V; /* [nb][8] */
    terms_t *tm; /* [nb] */
    __m512i *cp; /* K-quants: [nb / 2] the correction's multipliers as int16 pairs (kpairs) */
} group_buf;

/* The blocks of K_MIN pair p: within super-block p / 4, pair i = p % 4 is blocks (0, 2), (1, 3), (4, 6), (5, 7):
 * the even and odd bytes of a q4k_sb mins vector, so few_q4k takes them as pairs by one mask or shift */
LY_INLINE int64_t pair_block(int64_t p) { return p / 4 * 8 + p % 4 / 2 * 4 + p % 2; }

/* A K-quant group's correction multipliers as int16 pairs, so that vpdpwssd against the activations' pairs
 * (act_pairs) gives corr (qk.h) in half the steps: Q4_K, Q5_K the mins of pair p's blocks (pair_block);
 * Q6_K the scales of block p's halves (against its s16 pair; corr is 32 times that sum). All fit int16
 * (mins <= 63, |sx| <= 4064, |scale| <= 128, |s16| <= 2032) and the int32 sums are exact. */
LY_INLINE void kpairs(int type, group_buf *buf, int64_t nb) {
    for (int64_t p = 0; p < (K_MIN(type) ? nb / 2 : nb); p++) {
        if (K_MIN(type))
            buf->cp[p] = _mm512_or_si512(buf->tm[pair_block(p)].sb, _mm512_slli_epi32(buf->tm[pair_block(p) + 2].sb, 16));
        else
            buf->cp[p] = _mm512_or_si512(_mm512_and_si512(buf->tm[p].sa, _mm512_set1_epi32(0xffff)),
                                         _mm512_slli_epi32(buf->tm[p].sb, 16));
    }
}

/* Token t's activation pairs that kpairs' multipliers meet (written to sx[0 .. nb)): Q4_K, Q5_K the 32-value
 * sums of pair p's blocks (pair_block) at p < nb / 2; Q6_K block p's two 16-value sums */
LY_INLINE void act_pairs(int type, const ly_act *a, int64_t t, int64_t nb, int32_t *sx) {
    const int32_t *s16 = a->s16 + t * (a->k / 16);
    for (int64_t p = 0; p < (K_MIN(type) ? nb / 2 : nb); p++) {
        const int64_t b = pair_block(p);
        const int32_t lo = K_MIN(type) ? s16[2 * b] + s16[2 * b + 1] : s16[2 * p];
        const int32_t hi = K_MIN(type) ? s16[2 * b + 4] + s16[2 * b + 5] : s16[2 * p + 1];
        sx[p] = (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
    }
}

/* corr[u] of super-block sb for token t + u from the pairs (K-quants, buffered) */
LY_INLINE void kcorr(int type, const group_buf *buf, const src_t *s, int64_t t, int64_t sb, int NT,
                     __m512i corr[NT_MAX]) {
    const int per = K_MIN(type) ? 4 : 8; /* pairs per super-block */
    for (int u = 0; u < NT; u++) {
        const int32_t *x = s->sx + (t + u - s->t0) * s->nb + sb * per;
        __m512i c = _mm512_setzero_si512();
        for (int p = 0; p < per; p++) c = _mm512_dpwssd_epi32(c, buf->cp[sb * per + p], _mm512_set1_epi32(x[p]));
        corr[u] = K_MIN(type) ? c : _mm512_slli_epi32(c, 5);
    }
}

/* Each block of a group in order: unpacked, then either stepped at once for NT tokens (buf NULL) or stored */
LY_INLINE void walk(int type, const uint8_t *grp, const src_t *s, int64_t t, int NT, __m512 acc[NT_MAX],
                    const group_buf *buf) {
    const int kq = type == QK_Q4_K || type == QK_Q5_K || type == QK_Q6_K;
    const int64_t units = kq ? s->nb / 8 : s->nb;
    for (int64_t u = 0; u < units; u++) {
        q4k_sb h;
        __m512i raw[NT_MAX], corr[NT_MAX];
        terms_t tm;
        for (int i = 0; i < NT; i++) raw[i] = corr[i] = _mm512_setzero_si512();
        if (K_MIN(type)) q4k_superblock(type, grp, units, u, &h);
        for (int B = 0; B < (kq ? 8 : 1); B++) {
            const int64_t b = kq ? u * 8 + B : u;
            prefetch_next(s, b); /* a share per 32-block: per superblock it came in bursts the stream stalled on */
            __m512i V[8];
            if (K_MIN(type)) unpack_q4k(type, grp, units, u, B, &h, V, &tm);
            else if (type == QK_Q6_K) unpack_q6k(grp, units, u, B, V, &tm);
            else unpack_q32(type, grp, s->nb, b, V, &tm);
            if (buf) {
                for (int j = 0; j < 8; j++) _mm512_store_si512(buf->V + b * 8 + j, V[j]);
                buf->tm[b] = tm;
            } else if (kq) {
                kstep(type, V, &tm, s, t, b, NT, raw, corr);
            } else {
                step(type, V, &tm, s, t, b, NT, acc);
            }
        }
        if (kq && !buf) kfinish(type, &tm, s, t, u, NT, raw, corr, acc);
    }
}

LY_INLINE void store(const __m512 acc[NT_MAX], int NT, float *y, int64_t ldy, int nrows) {
    const __mmask16 m = (__mmask16)((1u << nrows) - 1);
    for (int u = 0; u < NT; u++) _mm512_mask_storeu_ps(y + u * ldy, m, acc[u]);
}

/* Token t + u's 4 activation bytes at i of super-block sb, broadcast */
LY_INLINE __m512i x4(const src_t *s, int64_t t, int u, int64_t sb, int i) {
    int32_t v;
    memcpy(&v, s->a->q + (t + u) * s->k + sb * 256 + i, 4);
    return _mm512_set1_epi32(v);
}

/* An exact int32 shift by sh (left when positive) */
LY_INLINE __m512i shift_by(__m512i v, int sh) {
    return sh > 0 ? _mm512_slli_epi32(v, sh) : sh < 0 ? _mm512_srai_epi32(v, -sh) : v;
}

/* Q4_K for one or two tokens (decode): kstep's integers by fewer instructions. A pair of blocks (2p, 2p + 1)
 * shares its 8 qs vectors: loaded once, the low nibbles masked for block 2p, the high ones masked in place
 * (16 times their values: block 2p + 1's dot shifted back by 4, exact); a block's 8 dots in two chains; the
 * mins' correction by vpdpwssd over int16 pairs (as kcorr). Then the same float step (kfinish). */
LY_INLINE void few_q4k(const uint8_t *grp, const src_t *s, int64_t t, int NT, __m512 acc[NT_MAX]) {
    const int64_t ns = s->nb / 8;
    const __m512i m4 = _mm512_set1_epi8(15), mh = _mm512_set1_epi8((char)0xf0), byte = _mm512_set1_epi32(0xff);
    const __m512i even = _mm512_set1_epi32(0x00ff00ff);
    for (int64_t sb = 0; sb < ns; sb++) {
        q4k_sb h;
        q4k_superblock(QK_Q4_K, grp, ns, sb, &h);
        __m512i raw[NT_MAX], corr[NT_MAX];
        for (int u = 0; u < NT; u++) raw[u] = corr[u] = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) {
            prefetch_next(s, sb * 8 + 2 * p);
            prefetch_next(s, sb * 8 + 2 * p + 1);
            const uint8_t *qs = grp + sb * 2048 + p * 512;
            const __m512i sl = _mm512_and_si512(_mm512_srli_epi32(h.sc[p / 2], 16 * (p % 2)), byte);
            const __m512i sh = _mm512_and_si512(_mm512_srli_epi32(h.sc[p / 2], 16 * (p % 2) + 8), byte);
            for (int u = 0; u < NT; u++) {
                __m512i l0 = _mm512_setzero_si512(), l1 = l0, h0 = l0, h1 = l0;
                for (int j = 0; j < 8; j += 2) {
                    const __m512i T0 = vload(qs + 64 * j), T1 = vload(qs + 64 * j + 64);
                    l0 = _mm512_dpbusd_epi32(l0, _mm512_and_si512(T0, m4), x4(s, t, u, sb, 64 * p + 4 * j));
                    h0 = _mm512_dpbusd_epi32(h0, _mm512_and_si512(T0, mh), x4(s, t, u, sb, 64 * p + 32 + 4 * j));
                    l1 = _mm512_dpbusd_epi32(l1, _mm512_and_si512(T1, m4), x4(s, t, u, sb, 64 * p + 4 * j + 4));
                    h1 = _mm512_dpbusd_epi32(h1, _mm512_and_si512(T1, mh), x4(s, t, u, sb, 64 * p + 36 + 4 * j));
                }
                const __m512i lo = _mm512_add_epi32(l0, l1), hi = _mm512_srai_epi32(_mm512_add_epi32(h0, h1), 4);
                raw[u] = _mm512_add_epi32(raw[u], _mm512_add_epi32(_mm512_mullo_epi32(sl, lo), _mm512_mullo_epi32(sh, hi)));
            }
        }
        for (int u = 0; u < NT; u++) {
            const int32_t *x = s->sx + (t + u - s->t0) * s->nb + sb * 4; /* act_pairs: (0, 2) (1, 3) (4, 6) (5, 7) */
            for (int i = 0; i < 2; i++) { /* mins 4i .. 4i + 3 of each lane: even bytes, odd bytes as int16 pairs */
                corr[u] = _mm512_dpwssd_epi32(corr[u], _mm512_and_si512(h.mn[i], even), _mm512_set1_epi32(x[2 * i]));
                corr[u] = _mm512_dpwssd_epi32(corr[u], _mm512_srli_epi16(h.mn[i], 8), _mm512_set1_epi32(x[2 * i + 1]));
            }
        }
        const terms_t tm = {h.d, h.dmin, _mm512_setzero_si512(), _mm512_setzero_si512()};
        kfinish(QK_Q4_K, &tm, s, t, sb, NT, raw, corr, acc);
    }
}

/* Q6_K for one or two tokens: the 4-bit part of block j of a half (j = 0..3) masked in place (j >= 2: 16
 * times, its dot shifted back) and its 2-bit part masked in place in the shared qh vectors (4^j times: the
 * dot shifted to 16 times), two dots per vector instead of the unpacking's five operations; the same
 * integers as kstep's and the same float step. */
LY_INLINE void few_q6k(const uint8_t *grp, const src_t *s, int64_t t, int NT, __m512 acc[NT_MAX]) {
    const int64_t ns = s->nb / 8;
    const __m512i m4 = _mm512_set1_epi8(15), mh = _mm512_set1_epi8((char)0xf0), lo16 = _mm512_set1_epi32(0xffff);
    for (int64_t sb = 0; sb < ns; sb++) {
        const int8_t *scl = (const int8_t *)grp + ns * 3072 + sb * 256;
        __m512i raw[NT_MAX], corr[NT_MAX];
        for (int u = 0; u < NT; u++) raw[u] = corr[u] = _mm512_setzero_si512();
        for (int half = 0; half < 2; half++) {
            __m512i Q[8];
            for (int jj = 0; jj < 8; jj++) Q[jj] = vload(grp + ns * 2048 + sb * 1024 + (8 * half + jj) * 64);
            for (int j = 0; j < 4; j++) {
                const int B = 4 * half + j;
                prefetch_next(s, sb * 8 + B);
                const uint8_t *ql = grp + sb * 2048 + (16 * half + 8 * (j % 2)) * 64;
                const __m512i lm = j / 2 ? mh : m4, hm = _mm512_set1_epi8((char)(3 << (2 * j)));
                const __m512i sa = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(scl + 32 * B)));
                const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(scl + 32 * B + 16)));
                const __m512i pair = _mm512_or_si512(_mm512_and_si512(sa, lo16), _mm512_slli_epi32(sc, 16));
                for (int u = 0; u < NT; u++) {
                    __m512i d16[2];
                    for (int q = 0; q < 2; q++) { /* the block's 16-value halves, vectors 4q .. 4q + 3 */
                        __m512i l0 = _mm512_setzero_si512(), l1 = l0, h0 = l0, h1 = l0;
                        for (int jj = 4 * q; jj < 4 * q + 4; jj += 2) {
                            const int at = 32 * B + 4 * jj;
                            l0 = _mm512_dpbusd_epi32(l0, _mm512_and_si512(vload(ql + 64 * jj), lm), x4(s, t, u, sb, at));
                            h0 = _mm512_dpbusd_epi32(h0, _mm512_and_si512(Q[jj], hm), x4(s, t, u, sb, at));
                            l1 = _mm512_dpbusd_epi32(l1, _mm512_and_si512(vload(ql + 64 * jj + 64), lm), x4(s, t, u, sb, at + 4));
                            h1 = _mm512_dpbusd_epi32(h1, _mm512_and_si512(Q[jj + 1], hm), x4(s, t, u, sb, at + 4));
                        }
                        d16[q] = _mm512_add_epi32(shift_by(_mm512_add_epi32(l0, l1), -4 * (j / 2)),
                                                  shift_by(_mm512_add_epi32(h0, h1), 4 - 2 * j));
                    }
                    raw[u] = _mm512_add_epi32(raw[u], _mm512_add_epi32(_mm512_mullo_epi32(d16[0], sa),
                                                                       _mm512_mullo_epi32(d16[1], sc)));
                    const int32_t xp = s->sx[(t + u - s->t0) * s->nb + sb * 8 + B]; /* act_pairs */
                    corr[u] = _mm512_dpwssd_epi32(corr[u], pair, _mm512_set1_epi32(xp));
                }
            }
        }
        for (int u = 0; u < NT; u++) corr[u] = _mm512_slli_epi32(corr[u], 5); /* Q6_K's offset 32 */
        const terms_t tm = {f16x16(grp + ns * 3328 + sb * 32), _mm512_setzero_ps(), _mm512_setzero_si512(),
                            _mm512_setzero_si512()};
        kfinish(QK_Q6_K, &tm, s, t, sb, NT, raw, corr, acc);
    }
}

/* Few tokens: each block unpacked in registers and used at once */
LY_INLINE void direct(int type, const uint8_t *grp, const src_t *s, int64_t t, int NT, float *y, int64_t ldy,
                      int nrows) {
    __m512 acc[NT_MAX];
    for (int u = 0; u < NT; u++) acc[u] = _mm512_setzero_ps();
    if (type == QK_Q4_K) few_q4k(grp, s, t, NT, acc);
    else if (type == QK_Q6_K) few_q6k(grp, s, t, NT, acc);
    else walk(type, grp, s, t, NT, acc, NULL);
    store(acc, NT, y + t * ldy, ldy, nrows);
}

LY_INLINE void buffered(int type, const group_buf *buf, const src_t *s, int64_t t, int NT, float *y, int64_t ldy,
                        int nrows) {
    __m512 acc[NT_MAX];
    for (int u = 0; u < NT; u++) acc[u] = _mm512_setzero_ps();
    if (type == QK_Q4_K || type == QK_Q5_K || type == QK_Q6_K) {
        for (int64_t sb = 0; sb < s->nb / 8; sb++) {
            __m512i raw[NT_MAX], corr[NT_MAX];
            for (int u = 0; u < NT; u++) raw[u] = _mm512_setzero_si512();
            for (int64_t b = sb * 8; b < sb * 8 + 8; b++) kstep(type, buf->V + b * 8, buf->tm + b, s, t, b, NT, raw, NULL);
            kcorr(type, buf, s, t, sb, NT, corr);
            kfinish(type, buf->tm + sb * 8, s, t, sb, NT, raw, corr, acc);
        }
    } else {
        for (int64_t b = 0; b < s->nb; b++) step(type, buf->V + b * 8, buf->tm + b, s, t, b, NT, acc);
    }
    store(acc, NT, y + t * ldy, ldy, nrows);
}

/* Rows [r0, r1), r0 a multiple of 16 (the driver's shares are whole groups) */
LY_INLINE void tile(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t nb = a->k / 32, group_bytes = GROUP * (int64_t)row_bytes;
    group_buf buf = {NULL, NULL, NULL};
    int32_t *sx = NULL, *few_sx = NULL;
    if (t1 - t0 < FEW && (type == QK_Q4_K || type == QK_Q6_K)) { /* few_q4k, few_q6k read act_pairs' */
        sx = few_sx = ly_aligned_alloc(64, (size_t)(t1 - t0) * nb * 4 + 64);
        for (int64_t t = t0; t < t1; t++) act_pairs(type, a, t, nb, sx + (t - t0) * nb);
    }
    if (t1 - t0 >= FEW) {
        buf.V = ly_aligned_alloc(64, (size_t)nb * (9 * sizeof(__m512i) + sizeof(terms_t)) + (t1 - t0) * nb * 4 + 64);
        buf.tm = (terms_t *)(buf.V + nb * 8);
        buf.cp = (__m512i *)(buf.tm + nb);
        sx = (int32_t *)(buf.cp + nb);
        for (int64_t t = t0; t < t1; t++)
            if (type == QK_Q4_K || type == QK_Q5_K || type == QK_Q6_K) act_pairs(type, a, t, nb, sx + (t - t0) * nb);
            else
                for (int64_t b = 0; b < nb; b++) {
                    const int32_t *s16 = a->s16 + t * (a->k / 16) + 2 * b;
                    sx[(t - t0) * nb + b] = OFFSET(type) * (s16[0] + s16[1]);
                }
    }
    for (int64_t r = r0; r < r1; r += GROUP) {
        const uint8_t *grp = w + r * row_bytes; /* group r / 16 starts at 16 (r / 16) row_bytes */
        const int nrows = r1 - r < GROUP ? (int)(r1 - r) : GROUP;
        const src_t s = {a, a->k, nb, r + GROUP < r1 ? grp + group_bytes : NULL, group_bytes / nb, sx, t0};
        if (!buf.V) {
            if (t1 - t0 == 2) direct(type, grp, &s, t0, 2, y + r, ldy, nrows);
            else direct(type, grp, &s, t0, 1, y + r, ldy, nrows);
            continue;
        }
        walk(type, grp, &s, 0, 0, NULL, &buf);
        if (type == QK_Q4_K || type == QK_Q5_K || type == QK_Q6_K) kpairs(type, &buf, nb);
        for (int64_t t = t0, n; t < t1; t += n) {
            n = t1 - t < NT_OF(type) ? t1 - t : NT_OF(type);
            switch (n) {
            case 8: buffered(type, &buf, &s, t, 8, y + r, ldy, nrows); break;
            case 7: buffered(type, &buf, &s, t, 7, y + r, ldy, nrows); break;
            case 6: buffered(type, &buf, &s, t, 6, y + r, ldy, nrows); break;
            case 5: buffered(type, &buf, &s, t, 5, y + r, ldy, nrows); break;
            case 4: buffered(type, &buf, &s, t, 4, y + r, ldy, nrows); break;
            case 3: buffered(type, &buf, &s, t, 3, y + r, ldy, nrows); break;
            case 2: buffered(type, &buf, &s, t, 2, y + r, ldy, nrows); break;
            case 1: buffered(type, &buf, &s, t, 1, y + r, ldy, nrows); break;
            }
        }
    }
    ly_aligned_free(buf.V);
    ly_aligned_free(few_sx);
}

#define TILE_X16(name, TYPE)                                                                                \
    LY_AVX512 static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a,         \
                               int64_t t0, int64_t t1, float *y, int64_t ldy) {                              \
        tile(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                                       \
    }
TILE_X16(q4_0, LY_Q4_0)
TILE_X16(q4_1, LY_Q4_1)
TILE_X16(q5_0, LY_Q5_0)
TILE_X16(q5_1, LY_Q5_1)
TILE_X16(q8_0, LY_Q8_0)
TILE_X16(iq4_nl, LY_IQ4_NL)
TILE_X16(q4k, QK_Q4_K)
TILE_X16(q5k, QK_Q5_K)
TILE_X16(q6k, QK_Q6_K)

ly_tile_fn ly_tiles_x16_avx512(int type) {
    switch (type) {
    case LY_Q4_0: return q4_0;
    case LY_Q4_1: return q4_1;
    case LY_Q5_0: return q5_0;
    case LY_Q5_1: return q5_1;
    case LY_Q8_0: return q8_0;
    case LY_IQ4_NL: return iq4_nl;
    case QK_Q4_K: return q4k;
    case QK_Q5_K: return q5k;
    case QK_Q6_K: return q6k;
    default: return NULL;
    }
}
#endif
