/* x16_x8.h's 32-block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL (q32.h's sequences). Included only there.
 *
 * A 32-block format in the x16 layout: regions qs (vec_bytes a block) | qh (Q5_0, Q5_1: one vector a
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

/* q32.h's step per block for NT tokens: acc = acc + (dw * dx) * (float)(dot - offset * sx), with a min
 * acc = acc + ((dw * dx) * (float)dot + (mw * dx) * (float)sx) */
LY_INLINE void q32_step(q_fmt f, const __m256i V[8], __m256 dw, __m256 mw, const src_t *s, int64_t t, int64_t b,
                        int NT, __m256 acc[NT_MAX]) {
    const int8_t *x[NT_MAX];
    __m256i dsum[NT_MAX];
    for (int u = 0; u < NT; u++) x[u] = xq(s, t + u, b);
    dots_nt(f.kind, V, x, NT, dsum);
    for (int u = 0; u < NT; u++) {
        __m256i dot = dsum[u];
        const int32_t sx = sx_of(s->a, s->k, t + u, b);
        const __m256 dx = _mm256_set1_ps(dx_of(s, t + u, b));
        if (f.offset) dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(f.offset * sx));
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(dot));
        if (f.has_min) v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(mw, dx), _mm256_set1_ps((float)sx)));
        acc[u] = _mm256_add_ps(acc[u], v);
    }
}

/* regions of a group of a 32-block format: qs, qh, d (and m) */
LY_INLINE void q32_regions(q_fmt f, const uint8_t *grp, int64_t nb, const uint8_t **qh, const uint8_t **d) {
    *qh = grp + nb * f.vec_bytes;
    *d = *qh + (f.qh ? nb * 64 : 0);
}

LY_INLINE void group_q32(q_fmt f, const uint8_t *grp, src_t s, int64_t t, int NT, int h0, int h1, __m256 acc[2][NT_MAX]) {
    const uint8_t *qhreg, *dreg;
    q32_regions(f, grp, s.nb, &qhreg, &dreg);
    const int dstep = f.has_min ? 64 : 32;
    for (int64_t b = 0; b < s.nb; b++) {
        prefetch_next(&s, b);
        for (int h = h0; h < h1; h++) {
            __m256i V[8];
            unpack_q32(f, grp + b * f.vec_bytes + h * HALF, qhreg + b * 64 + h * HALF, V);
            const __m256 dw = f16x8(dreg + b * dstep + 16 * h);
            const __m256 mw = f.has_min ? f16x8(dreg + b * dstep + 32 + 16 * h) : dw;
            q32_step(f, V, dw, mw, &s, t, b, NT, acc[h]);
        }
    }
}

/* Many tokens: half h of a group unpacked once (values, scales as floats), then read NT_MAX tokens at a
 * time, with each (token, block)'s offset * sx and (float)sx computed once a tile (as q32_x8.h does) */
typedef struct {
    __m256i *v;           /* [nb][8] */
    float *dw, *mw;       /* [nb][8] */
    int32_t *sxo;         /* [t - t0][nb] */
    float *sxf;           /* [t - t0][nb] */
    int64_t t0;
} many_t;

LY_INLINE void unpack_half(q_fmt f, const uint8_t *grp, int64_t nb, int h, const many_t *m) {
    const uint8_t *qhreg, *dreg;
    q32_regions(f, grp, nb, &qhreg, &dreg);
    const int dstep = f.has_min ? 64 : 32;
    for (int64_t b = 0; b < nb; b++) {
        unpack_q32(f, grp + b * f.vec_bytes + h * HALF, qhreg + b * 64 + h * HALF, m->v + 8 * b);
        _mm256_store_ps(m->dw + 8 * b, f16x8(dreg + b * dstep + 16 * h));
        if (f.has_min) _mm256_store_ps(m->mw + 8 * b, f16x8(dreg + b * dstep + 32 + 16 * h));
    }
}

LY_INLINE void run_half(q_fmt f, const many_t *m, const src_t *s, int64_t t, int NT, float *y, int64_t ldy,
                        int nrows) {
    __m256 acc[NT_MAX];
    const int8_t *x[NT_MAX];
    for (int u = 0; u < NT; u++) {
        acc[u] = _mm256_setzero_ps();
        x[u] = xq(s, t + u, 0);
    }
    for (int64_t b = 0; b < s->nb; b++) {
        __m256i dot[NT_MAX];
        dots_nt(f.kind, m->v + 8 * b, x, NT, dot);
        const __m256 dw = _mm256_load_ps(m->dw + 8 * b), mw = f.has_min ? _mm256_load_ps(m->mw + 8 * b) : dw;
        for (int u = 0; u < NT; u++) {
            const int64_t ib = (t + u - m->t0) * s->nb + b;
            const __m256 dx = _mm256_broadcast_ss(s->a->d + (t + u) * s->nb + b);
            if (f.offset) dot[u] = _mm256_sub_epi32(dot[u], _mm256_set1_epi32(m->sxo[ib]));
            __m256 v = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(dot[u]));
            if (f.has_min) v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(mw, dx), _mm256_broadcast_ss(m->sxf + ib)));
            acc[u] = _mm256_add_ps(acc[u], v);
            x[u] += 32;
        }
    }
    store_half(acc, NT, y + t * ldy, ldy, nrows);
}

LY_INLINE q_fmt q32_fmt(int type) {
    switch (type) {
    case LY_Q8_0: return (q_fmt){LY_Q8_0, S8_KIND, 512, 0, 0, S8_OFFSET};
    case LY_Q4_1: return (q_fmt){LY_Q4_1, K_U4, 256, 0, 1, 0};
    case LY_Q5_0: return (q_fmt){LY_Q5_0, K_U5, 256, 1, 0, 16};
    case LY_Q5_1: return (q_fmt){LY_Q5_1, K_U5, 256, 1, 1, 0};
    case LY_IQ4_NL: return (q_fmt){LY_IQ4_NL, S8_KIND, 256, 0, 0, S8_OFFSET};
    default: return (q_fmt){LY_Q4_0, K_U4, 256, 0, 0, 8};
    }
}

/* More than NT_MAX tokens of a 32-block format: each half of a group unpacked once, as the GGML tiles do */
LY_INLINE void tile_buffered(q_fmt f, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                             int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t nb = a->k / 32, nt = t1 - t0;
    char *mem = ly_aligned_alloc(32, nb * (8 * 32 + 16 * sizeof(float)) + nt * nb * 8 + 32);
    many_t m = {(__m256i *)mem, (float *)(mem + nb * 256), (float *)(mem + nb * 256) + nb * 8, NULL, NULL, t0};
    m.sxf = m.mw + nb * 8;
    m.sxo = (int32_t *)(m.sxf + nt * nb);
    for (int64_t i = 0; i < nt * nb; i++) {
        int32_t sx = a->s16[2 * (t0 * nb + i)] + a->s16[2 * (t0 * nb + i) + 1];
        m.sxf[i] = (float)sx;
        m.sxo[i] = f.offset * sx;
    }
    const src_t s = {a, a->k, nb, NULL, 0};
    for (int64_t r = r0; r < r1; r += X16_ROWS) {
        for (int h = 0; h < 2 && r + 8 * h < r1; h++) {
            const int nrows = r1 - r - 8 * h < 8 ? (int)(r1 - r - 8 * h) : 8;
            float *yh = y + r + 8 * h;
            unpack_half(f, w + r * row_bytes, nb, h, &m);
            int64_t t = t0;
            for (; t + NT_MAX <= t1; t += NT_MAX) run_half(f, &m, &s, t, NT_MAX, yh, ldy, nrows);
            switch (t1 - t) {
            case 3: run_half(f, &m, &s, t, 3, yh, ldy, nrows); break;
            case 2: run_half(f, &m, &s, t, 2, yh, ldy, nrows); break;
            case 1: run_half(f, &m, &s, t, 1, yh, ldy, nrows); break;
            }
        }
    }
    ly_aligned_free(mem);
}

