/* x16_x8.h's K-quants: Q4_K, Q5_K, Q6_K (qk.h's sequences). Included only there.
 *
 * Q4_K, Q5_K (five): as x16_avx512.c's, 8 rows a half: block 2g + p of a superblock is nibble p of its qs
 * vectors 8g .. 8g + 7 (Q5_K: plus bit 2g + p of each byte of its 8 qh vectors as 16); sc and m from the 12
 * scale bytes in T-form (qk.c's packing). */
LY_INLINE void unpack_q45k(int five, const uint8_t *grp, int64_t ns, int64_t sb, int B, int h, __m256i V[8]) {
    const uint8_t *qs = grp + sb * 2048 + (B / 2) * 512 + h * HALF, *qh = grp + ns * 2048 + sb * 512 + h * HALF;
    for (int j = 0; j < 8; j++)
        V[j] = _mm256_and_si256(B % 2 ? _mm256_srli_epi16(vload(qs + 64 * j), 4) : vload(qs + 64 * j),
                                _mm256_set1_epi8(15));
    if (five) /* bit B of each qh byte to bit 4 */
        for (int j = 0; j < 8; j++) {
            __m256i q = vload(qh + 64 * j);
            q = B < 4 ? _mm256_slli_epi16(q, 4 - B) : B > 4 ? _mm256_srli_epi16(q, B - 4) : q;
            V[j] = _mm256_or_si256(V[j], _mm256_and_si256(q, _mm256_set1_epi8(0x10)));
        }
}

/* Super-block sb of token t: its 16 sub-block sums s16 as int16 (|s16| <= 2032: packs is exact), and its
 * activation scale (one per 256 values) */
LY_INLINE __m256i ks16_of(const src_t *s, int64_t t, int64_t sb) {
    const int32_t *p = s->a->s16 + t * (s->k / 16) + sb * 16;
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(vload((const uint8_t *)p), vload((const uint8_t *)(p + 8))), 0xd8);
}

LY_INLINE float kdx_of(const src_t *s, int64_t t, int64_t sb) { return s->a->d[t * (s->k / 256) + sb]; }

LY_INLINE __m256i bcast_dw(__m256i v, int i) { return _mm256_permutevar8x32_epi32(v, _mm256_set1_epi32(i)); }

/* One super-block's integer raw and corr (lanes = rows, exact: qk.h) are summed over its 8 blocks, then one
 * float step per super-block: acc + ((d * dx) * raw - (dmin * dx) * corr), or (d * dx) * (raw - corr). */
LY_INLINE __m256 kstep(int has_min, __m256 acc, __m256i raw, __m256i corr, __m256 d, __m256 dmin, float dx) {
    const __m256 dxv = _mm256_set1_ps(dx);
    if (!has_min)
        return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(d, dxv), _mm256_cvtepi32_ps(_mm256_sub_epi32(raw, corr))));
    return _mm256_add_ps(acc, _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, dxv), _mm256_cvtepi32_ps(raw)),
                                            _mm256_mul_ps(_mm256_mul_ps(dmin, dxv), _mm256_cvtepi32_ps(corr))));
}

/* vb: NULL (values unpacked in registers), or half h0's values [nb][8] unpacked before (h1 = h0 + 1) */
LY_INLINE void group_q45k(int five, const uint8_t *grp, src_t s, int64_t t, int NT, int h0, int h1,
                          const __m256i *vb, __m256 acc[2][NT_MAX]) {
    const int64_t ns = s.nb / 8;
    const uint8_t *dm = grp + ns * (five ? 2560 : 2048), *scl = dm + ns * 64;
    const __m256i lo6 = _mm256_set1_epi32(0x3f3f3f3f), lo4 = _mm256_set1_epi32(0x0f0f0f0f);
    const __m256i hi2 = _mm256_set1_epi32(0x30303030), byte = _mm256_set1_epi32(0xff);
    /* per 128-bit lane, int16 pairs (sx[0], sx[2]) and (sx[1], sx[3]) of the block sums sx[B] in the low
     * halves of dwords 0-3 (lane 1: blocks 4-7) */
    const __m256i pairs = _mm256_setr_epi8(0, 1, 8, 9, 4, 5, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
                                           0, 1, 8, 9, 4, 5, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int64_t sb = 0; sb < ns; sb++) {
        __m256i sc4[2][2], mn4[2][2]; /* [half][blocks 0-3 | 4-7]: 4 bytes of scales (mins) a lane */
        __m256i raw[2][NT_MAX];
        for (int h = h0; h < h1; h++) {
            const uint8_t *sp = scl + sb * 192 + h * HALF;
            const __m256i w0 = vload(sp), w1 = vload(sp + 64), w2 = vload(sp + 128);
            sc4[h][0] = _mm256_and_si256(w0, lo6);
            sc4[h][1] = _mm256_or_si256(_mm256_and_si256(w2, lo4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), hi2));
            mn4[h][0] = _mm256_and_si256(w1, lo6);
            mn4[h][1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), lo4),
                                        _mm256_and_si256(_mm256_srli_epi32(w1, 2), hi2));
            for (int u = 0; u < NT; u++) raw[h][u] = _mm256_setzero_si256();
        }
        for (int B = 0; B < 8; B++) {
            const int64_t b = sb * 8 + B;
            prefetch_next(&s, b);
            for (int h = h0; h < h1; h++) {
                __m256i V[8];
                if (vb) for (int j = 0; j < 8; j++) V[j] = _mm256_load_si256(vb + 8 * b + j);
                else unpack_q45k(five, grp, ns, sb, B, h, V);
                const __m256i sc = _mm256_and_si256(_mm256_srli_epi32(sc4[h][B / 4], 8 * (B % 4)), byte);
                for (int u = 0; u < NT; u++)
                    raw[h][u] = _mm256_add_epi32(raw[h][u], scaled_dots(five ? K_U5 : K_U4, V, xq(&s, t + u, b), sc, sc));
            }
        }
        /* corr = sum over B of m[B] * sx[B], sx[B] = s16[2B] + s16[2B + 1]: madd of the int16 pairs
         * (m[0], m[2]), (m[1], m[3]), (m[4], m[6]), (m[5], m[7]) with the same pairs of sx */
        __m256i sxp[NT_MAX][4];
        for (int u = 0; u < NT; u++) {
            const __m256i x16 = ks16_of(&s, t + u, sb);
            const __m256i p = _mm256_shuffle_epi8(_mm256_add_epi16(x16, _mm256_srli_epi32(x16, 16)), pairs);
            sxp[u][0] = bcast_dw(p, 0);
            sxp[u][1] = bcast_dw(p, 1);
            sxp[u][2] = bcast_dw(p, 4);
            sxp[u][3] = bcast_dw(p, 5);
        }
        for (int h = h0; h < h1; h++) {
            const __m256 d = f16x8(dm + sb * 64 + 16 * h), dmin = f16x8(dm + sb * 64 + 32 + 16 * h);
            const __m256i lo8 = _mm256_set1_epi32(0x00ff00ff);
            const __m256i m[4] = {_mm256_and_si256(mn4[h][0], lo8), _mm256_srli_epi16(mn4[h][0], 8),
                                  _mm256_and_si256(mn4[h][1], lo8), _mm256_srli_epi16(mn4[h][1], 8)};
            for (int u = 0; u < NT; u++) {
                __m256i corr = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(m[0], sxp[u][0]), _mm256_madd_epi16(m[1], sxp[u][1])),
                                                _mm256_add_epi32(_mm256_madd_epi16(m[2], sxp[u][2]), _mm256_madd_epi16(m[3], sxp[u][3])));
                acc[h][u] = kstep(1, acc[h][u], raw[h][u], corr, d, dmin, kdx_of(&s, t + u, sb));
            }
        }
    }
}

/* Q6_K: as x16_avx512.c's; block 4hh + j: low 4 bits nibble j / 2 of ql vectors 16hh + 8 (j % 2) + jj, high
 * 2 bits bits 2j of qh vectors 8hh + jj; one float step per super-block of (d * dx) * (raw - corr). */
LY_INLINE void unpack_q6k(const uint8_t *grp, int64_t ns, int64_t sb, int B, int h, __m256i V[8]) {
    const int hh = B / 4, j = B % 4;
    const uint8_t *ql = grp + sb * 2048 + (16 * hh + 8 * (j % 2)) * 64 + h * HALF;
    const uint8_t *qh = grp + ns * 2048 + sb * 1024 + 8 * hh * 64 + h * HALF;
    for (int jj = 0; jj < 8; jj++) { /* bits 2j, 2j + 1 of each qh byte to bits 4, 5 */
        __m256i lo4 = _mm256_and_si256(j / 2 ? _mm256_srli_epi16(vload(ql + 64 * jj), 4) : vload(ql + 64 * jj),
                                       _mm256_set1_epi8(15));
        __m256i q = vload(qh + 64 * jj);
        q = j < 2 ? _mm256_slli_epi16(q, 4 - 2 * j) : j == 3 ? _mm256_srli_epi16(q, 2) : q;
        V[jj] = _mm256_or_si256(lo4, _mm256_and_si256(q, _mm256_set1_epi8(0x30)));
    }
}

LY_INLINE void group_q6k(const uint8_t *grp, src_t s, int64_t t, int NT, int h0, int h1, const __m256i *vb,
                         __m256 acc[2][NT_MAX]) {
    const int64_t ns = s.nb / 8;
    const uint8_t *scl = grp + ns * 3072, *dreg = scl + ns * 256;
    for (int64_t sb = 0; sb < ns; sb++) {
        __m256i raw[2][NT_MAX];
        for (int h = h0; h < h1; h++)
            for (int u = 0; u < NT; u++) raw[h][u] = _mm256_setzero_si256();
        for (int B = 0; B < 8; B++) {
            prefetch_next(&s, sb * 8 + B);
            for (int h = h0; h < h1; h++) {
                const int64_t b = sb * 8 + B;
                __m256i V[8];
                if (vb) for (int j = 0; j < 8; j++) V[j] = _mm256_load_si256(vb + 8 * b + j);
                else unpack_q6k(grp, ns, sb, B, h, V);
                const uint8_t *sc8 = scl + sb * 256 + 2 * B * 16 + 8 * h;
                const __m256i sca = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc8));
                const __m256i scb = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc8 + 16)));
                for (int u = 0; u < NT; u++)
                    raw[h][u] = _mm256_add_epi32(raw[h][u], scaled_dots(K_U6, V, xq(&s, t + u, b), sca, scb));
            }
        }
        /* corr = 32 * sum over sub-blocks j of sc[j] * s16[j]: madd of the int16 pairs (sc[2i], sc[2i + 1])
         * with (s16[2i], s16[2i + 1]) */
        __m256i x16[NT_MAX];
        for (int u = 0; u < NT; u++) x16[u] = ks16_of(&s, t + u, sb);
        for (int h = h0; h < h1; h++) {
            const __m256 d = f16x8(dreg + sb * 32 + 16 * h);
            __m256i scp[8];
            for (int i = 0; i < 8; i++) {
                const uint8_t *sc8 = scl + sb * 256 + 2 * i * 16 + 8 * h;
                scp[i] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)sc8),
                                                                _mm_loadl_epi64((const __m128i *)(sc8 + 16))));
            }
            for (int u = 0; u < NT; u++) {
                __m256i c[4];
                for (int i = 0; i < 4; i++)
                    c[i] = _mm256_add_epi32(_mm256_madd_epi16(scp[i], bcast_dw(x16[u], i)),
                                            _mm256_madd_epi16(scp[i + 4], bcast_dw(x16[u], i + 4)));
                const __m256i corr = _mm256_slli_epi32(_mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3])), 5);
                acc[h][u] = kstep(0, acc[h][u], raw[h][u], corr, d, d, kdx_of(&s, t + u, sb));
            }
        }
    }
}

/* More than NT_MAX tokens of a K-quant: each half of a group's values unpacked once (scales per pass) */
LY_INLINE void run_khalf(int type, const uint8_t *grp, src_t s, int64_t t, int NT, int h, const __m256i *vb,
                         float *y, int64_t ldy, int nrows) {
    __m256 acc[2][NT_MAX];
    for (int u = 0; u < NT; u++) acc[h][u] = _mm256_setzero_ps();
    if (type == QK_Q6_K) group_q6k(grp, s, t, NT, h, h + 1, vb, acc);
    else group_q45k(type == QK_Q5_K, grp, s, t, NT, h, h + 1, vb, acc);
    store_half(acc[h], NT, y + t * ldy, ldy, nrows);
}

LY_INLINE void tile_kbuffered(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                              const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const int64_t nb = a->k / 32;
    __m256i *vb = ly_aligned_alloc(32, nb * 8 * sizeof(__m256i));
    const src_t s = {a, a->k, nb, NULL, 0};
    for (int64_t r = r0; r < r1; r += X16_ROWS) {
        const uint8_t *grp = w + r * row_bytes;
        for (int h = 0; h < 2 && r + 8 * h < r1; h++) {
            const int nrows = r1 - r - 8 * h < 8 ? (int)(r1 - r - 8 * h) : 8;
            float *yh = y + r + 8 * h;
            for (int64_t b = 0; b < nb; b++)
                if (type == QK_Q6_K) unpack_q6k(grp, nb / 8, b / 8, (int)(b % 8), h, vb + 8 * b);
                else unpack_q45k(type == QK_Q5_K, grp, nb / 8, b / 8, (int)(b % 8), h, vb + 8 * b);
            int64_t t = t0;
            for (; t + NT_MAX <= t1; t += NT_MAX) run_khalf(type, grp, s, t, NT_MAX, h, vb, yh, ldy, nrows);
            switch (t1 - t) {
            case 3: run_khalf(type, grp, s, t, 3, h, vb, yh, ldy, nrows); break;
            case 2: run_khalf(type, grp, s, t, 2, h, vb, yh, ldy, nrows); break;
            case 1: run_khalf(type, grp, s, t, 1, h, vb, yh, ldy, nrows); break;
            }
        }
    }
    ly_aligned_free(vb);
}

