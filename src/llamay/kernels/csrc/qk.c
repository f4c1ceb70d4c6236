/* Quantized matmul tiles for the K-quant formats Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: block layouts and the
 * portable tiles (the ISA ones: qk_avx2.c, qk_avxvnni.c, qk_avx512.c). The canonical integer/float
 * sequence is written in qk.h. */
#include "kernels.h"
#include "qk.h"
#include <stdlib.h>

static inline float f16_at(const uint8_t *p) { return ly_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Q2_K, 84 bytes: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin */
static void scales_q2k(const uint8_t *blk, qk_scales *s) {
    for (int h = 0; h < 16; h++) { s->sc[h] = blk[h] & 15; s->cm[h] = blk[h] >> 4; }
    s->d = f16_at(blk + 80);
    s->dmin = f16_at(blk + 82);
}

/* value n = half * 128 + j * 32 + l takes bits 2j..2j+1 of qs[half * 32 + l] */
static void unpack_q2k(const uint8_t *blk, uint8_t q[256]) {
    const uint8_t *qs = blk + 16;
    for (int n = 0; n < 256; n++) q[n] = (qs[(n >> 7) * 32 + (n & 31)] >> (2 * ((n >> 5) & 3))) & 3;
}

/* Q3_K, 110 bytes: hmask[32], qs[64], scales[12] (16 x 6 bits, offset 32), d */
static void scales_q3k(const uint8_t *blk, qk_scales *s) {
    const uint8_t *p = blk + 96;
    for (int h = 0; h < 16; h++) {
        int lo = h < 8 ? p[h] & 15 : p[h - 8] >> 4, hi = (p[8 + (h & 3)] >> (2 * (h >> 2))) & 3;
        s->sc[h] = (int16_t)((lo | hi << 4) - 32);
        s->cm[h] = (int16_t)(4 * s->sc[h]);
    }
    s->d = f16_at(blk + 108);
    s->dmin = 0.0f;
}

/* value n = 2 low bits as Q2_K, minus 4 unless bit n / 32 of hmask[n % 32] is set; q = value + 4 */
static void unpack_q3k(const uint8_t *blk, uint8_t q[256]) {
    const uint8_t *hm = blk, *qs = blk + 32;
    for (int n = 0; n < 256; n++) {
        int lo = (qs[(n >> 7) * 32 + (n & 31)] >> (2 * ((n >> 5) & 3))) & 3;
        q[n] = (uint8_t)(lo | ((hm[n & 31] >> (n >> 5)) & 1) << 2);
    }
}

/* Q4_K and Q5_K scales: d, dmin, then 8 scales and 8 mins of 6 bits packed in 12 bytes */
static void scales_q4k(const uint8_t *blk, qk_scales *s) {
    const uint8_t *p = blk + 4;
    for (int j = 0; j < 8; j++) {
        int sc = j < 4 ? p[j] & 63 : (p[j + 4] & 15) | (p[j - 4] >> 6) << 4;
        int m = j < 4 ? p[j + 4] & 63 : (p[j + 4] >> 4) | (p[j] >> 6) << 4;
        s->sc[2 * j] = s->sc[2 * j + 1] = (int16_t)sc;
        s->cm[2 * j] = s->cm[2 * j + 1] = (int16_t)m;
    }
    s->d = f16_at(blk);
    s->dmin = f16_at(blk + 2);
}

/* Q4_K, 144 bytes: d, dmin, scales[12], qs[128]; value n = g * 64 + h * 32 + l is nibble h of qs[g * 32 + l] */
static void unpack_q4k(const uint8_t *blk, uint8_t q[256]) {
    const uint8_t *qs = blk + 16;
    for (int n = 0; n < 256; n++) q[n] = (qs[(n >> 6) * 32 + (n & 31)] >> (4 * ((n >> 5) & 1))) & 15;
}

/* Q5_K, 176 bytes: d, dmin, scales[12], qh[32], qs[128]; Q4_K's nibble plus bit n / 32 of qh[n % 32] as 16 */
static void unpack_q5k(const uint8_t *blk, uint8_t q[256]) {
    const uint8_t *qh = blk + 16, *qs = blk + 48;
    for (int n = 0; n < 256; n++) {
        int lo = (qs[(n >> 6) * 32 + (n & 31)] >> (4 * ((n >> 5) & 1))) & 15;
        q[n] = (uint8_t)(lo | ((qh[n & 31] >> (n >> 5)) & 1) << 4);
    }
}

/* Q6_K, 210 bytes: ql[128], qh[64], scales[16] (int8), d */
static void scales_q6k(const uint8_t *blk, qk_scales *s) {
    for (int h = 0; h < 16; h++) { s->sc[h] = (int8_t)blk[192 + h]; s->cm[h] = (int16_t)(32 * s->sc[h]); }
    s->d = f16_at(blk + 208);
    s->dmin = 0.0f;
}

/* value n = half * 128 + j * 32 + l: low 4 bits from nibble j / 2 of ql[half * 64 + (j % 2) * 32 + l],
 * high 2 bits from bits 2j of qh[half * 32 + l]; value = q - 32 */
static void unpack_q6k(const uint8_t *blk, uint8_t q[256]) {
    const uint8_t *ql = blk, *qh = blk + 128;
    for (int n = 0; n < 256; n++) {
        int half = n >> 7, j = (n >> 5) & 3, l = n & 31;
        int lo = (ql[half * 64 + (j & 1) * 32 + l] >> (4 * (j >> 1))) & 15;
        q[n] = (uint8_t)(lo | ((qh[half * 32 + l] >> (2 * j)) & 3) << 4);
    }
}

static const qk_format FORMATS[] = {
    {QK_Q2_K, 84, 1, scales_q2k, unpack_q2k},
    {QK_Q3_K, 110, 0, scales_q3k, unpack_q3k},
    {QK_Q4_K, 144, 1, scales_q4k, unpack_q4k},
    {QK_Q5_K, 176, 1, scales_q4k, unpack_q5k},
    {QK_Q6_K, 210, 0, scales_q6k, unpack_q6k},
};

const qk_format *qk_format_of(int type) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (FORMATS[i].type == type) return &FORMATS[i];
    return NULL;
}

static inline int32_t dot16(const uint8_t *q, const int8_t *x) {
    int32_t s = 0;
    for (int i = 0; i < 16; i++) s += (int32_t)q[i] * x[i];
    return s;
}

/* one (row, token): q [nsb * 256] and sc [nsb] decoded from the row; x, dx (one per super-block), s16 the
 * token's activations */
static float row_dot(const qk_format *f, const uint8_t *q, const qk_scales *sc, int64_t nsb,
                     const int8_t *x, const float *dx, const int32_t *s16) {
    float acc = 0.0f;
    for (int64_t s = 0; s < nsb; s++) {
        const qk_scales *c = &sc[s];
        int32_t raw = 0, corr = 0;
        for (int h = 0; h < 16; h++) {
            raw += c->sc[h] * dot16(q + s * 256 + h * 16, x + s * 256 + h * 16);
            corr += c->cm[h] * s16[s * 16 + h];
        }
        if (f->has_min) acc = acc + ((c->d * dx[s]) * (float)raw - (c->dmin * dx[s]) * (float)corr);
        else acc = acc + (c->d * dx[s]) * (float)(raw - corr);
    }
    return acc;
}

static void tile_portable(const qk_format *f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                          const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy) {
    int64_t k = a->k, nsb = k / 256;
    uint8_t *q = malloc((size_t)nsb * 256);
    qk_scales *sc = malloc((size_t)nsb * sizeof *sc);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w + (size_t)r * row_bytes;
        for (int64_t s = 0; s < nsb; s++) {
            f->unpack(row + s * f->type_size, q + s * 256);
            f->scales(row + s * f->type_size, &sc[s]);
        }
        for (int64_t t = t0; t < t1; t++)
            y[t * ldy + r] = row_dot(f, q, sc, nsb, a->q + t * k, a->d + t * nsb, a->s16 + t * (k / 16));
    }
    free(q);
    free(sc);
}

#define QK_PORTABLE(name, type)                                                                          \
    static void name(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a, int64_t t0,   \
                     int64_t t1, float *y, int64_t ldy) {                                                 \
        tile_portable(qk_format_of(type), w, rb, r0, r1, a, t0, t1, y, ldy);                              \
    }
QK_ENTRIES(QK_PORTABLE)

ly_tile_fn ly_tiles_qk_portable(int type) { QK_PICK(type); }

/* Test and bench entry: one tile on the calling thread, in the current path; d holds one scale per 256
 * values (ly_act bs = 256). Returns -1 for a type that is not a K-quant or k not a multiple of 256, else 0. */
LY_API int ly_qk_tile_call(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                           const int8_t *q, const float *d, const int32_t *s16, int64_t k,
                           int64_t t0, int64_t t1, float *y, int64_t ldy) {
    ly_tile_fn fn = qk_format_of(type) ? ly_tile(type) : NULL;
    if (fn == NULL || k % 256 != 0) return -1;
    ly_act a = {q, d, s16, NULL, k, 256};
    fn(w, row_bytes, r0, r1, &a, t0, t1, y, ldy);
    return 0;
}
