/* Row quantizers: float32 rows -> GGML block formats, byte-identical to ggml_quantize_chunk: with no
 * importance matrix its reference quantizers (quantize_row_*_ref for every type here), with one ggml's
 * weighted ones (quantize_row_*_impl; Q8_0, F16 and BF16 ignore the matrix there, so here too).
 *
 * Byte identity needs ggml's exact float operation sequence: every expression below keeps ggml's operand
 * order and float (never double) arithmetic, rounds through nearest_int's bit trick (not rintf: they differ
 * outside |x| < 2^22, which a clamp may then see), and converts float -> fp16 with ly_f32_to_f16 (checked
 * equal to ggml_compute_fp32_to_fp16 on all 2^32 inputs). Built with -ffp-contract=off: no FMA, as in
 * ggml's own build (no -march). Blocks are independent (but for the row's mean square that weights the
 * 32-element blocks with an importance matrix), so rows (and threads) are too. The helpers' pointers
 * are restrict (an int8 output could alias the input otherwise, which keeps their loops from vectorizing). */
#include "common.h"
#include "pool.h"
#include <stdatomic.h>
#include <float.h>
#include <stdlib.h>

enum { F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
       Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, BF16 = 30 };
#define QK 32   /* elements per block of the 32-formats */
#define QK_K 256 /* elements per K-quant superblock */
#define GROUP_MAX_EPS 1e-15f /* ggml: a group with amax below this quantizes to zero */

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int clampi(int v, int lo, int hi) { return imax(lo, imin(hi, v)); }

/* Round to nearest (even) for |f| < 2^22 by adding 1.5 * 2^23 and reading the low mantissa bits; outside
 * that range it wraps exactly as ggml's does (never an out-of-range float -> int conversion). */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i; memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* (int32_t)v as x86's cvttss2si gives it: NaN and values beyond int32 become INT32_MIN. ggml's reference
 * casts such floats straight to a byte (undefined: a scale that overflowed to inf); gcc's x86 code takes
 * the low byte of this, which the fixtures hold, so every compiler is pinned to it (clang's differed). */
static inline int32_t trunc_i32(float v) {
    return v >= -2147483648.0f && v < 2147483648.0f ? (int32_t)v : INT32_MIN;
}

/* fp16 fields are stored little-endian byte by byte: dst need not be 2-byte aligned. */
static inline void put16(uint8_t *p, uint16_t h) { p[0] = (uint8_t)h; p[1] = (uint8_t)(h >> 8); }
static inline void put_f16(uint8_t *p, float f) { put16(p, ly_f32_to_f16(f)); }
static inline float get_f16(const uint8_t *p) { return ly_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* ggml_compute_fp32_to_bf16: round to nearest even; a NaN keeps its top bits and is made quiet. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

/* ---------------------------------------------------------------- fitting helpers (ggml's make_*_quants) */

/* The signed extreme (largest |v|, the first one on ties), as Q4_0 / Q5_0 and the
 * symmetric fits scale by. */
static float signed_amax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    }
    return max;
}

/* ggml's make_qx_quants with rmse_type 1: symmetric quants L in [0, 2 nmax) of a group, searching 18
 * scales around nmax / max for the best fit weighted by qw (NULL: w = x^2). Returns the scale. */
static float qx_quants(int n, int nmax, const float *restrict x, const float *restrict qw, int8_t *restrict L) {
    const float max = signed_amax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ggml's make_q3_quants with do_rmse: start from nmax / max, then up to 5 passes moving single quants
 * to their best value under w = x^2 while the fit improves. L in [0, 2 nmax); returns the scale. */
static float q3_quants(int n, int nmax, const float *restrict x, int8_t *restrict L) {
    const float max = signed_amax(x, n);
    if (fabsf(max) < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i], slx = sumlx - w * x[i] * L[i];
            if (!(slx > 0)) continue;
            float sl2 = suml2 - w * L[i] * L[i];
            int new_l = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (new_l == L[i]) continue;
            slx += w * x[i] * new_l;
            sl2 += w * new_l * new_l;
            if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (int8_t)new_l; sumlx = slx; suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ggml's make_qkx2_quants: affine quants x ~ scale * L + min (min <= 0, L in [0, nmax]), the initial fit
 * from the range, then nstep + 1 candidate scales (rmin + rdelta * is + nmax) / range, each refit by
 * weighted least squares and kept when its weighted error (|.| with use_mad, else squared) is lower.
 * Writes -min to *the_min; Laux is scratch of n. Returns the scale. Also ggml's make_qkx3_quants given
 * weights: its one difference, max <= min for max == min, decides alike (max >= min here, NaN fails both). */
static float qkx2_quants(int n, int nmax, const float *restrict x, const float *restrict weights, uint8_t *restrict L,
                         float *restrict the_min, uint8_t *restrict Laux, float rmin, float rdelta, int nstep,
                         int use_mad) {
    float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float cur_error = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            diff = use_mad ? fabsf(diff) : diff * diff;
            cur_error += weights[i] * diff;
        }
        if (cur_error < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* ggml's make_qp_quants: quants L in [0, nmax] (unclamped below: a negative one wraps, as in ggml) of
 * non-negative values x (a superblock's scales or mins) under weights w: the scale nmax / max or one of 8
 * around it with the least weighted squared error, then up to 5 passes moving single quants while the
 * fit improves. The first quants are stored unclamped and read back as uint8 before the search, as ggml's.
 * Returns the scale. */
static float qp_quants(int n, int nmax, const float *restrict x, const float *restrict w, uint8_t *restrict L) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    float scale = 1 / iscale, best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        float iscale_is = (0.1f * is + nmax) / max, scale_is = 1 / iscale_is, mse = 0;
        for (int i = 0; i < n; i++) {
            int l = imin(nmax, nearest_int(iscale_is * x[i]));
            float diff = x[i] - scale_is * l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = imin(nmax, nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * L[i], sl2 = suml2 - w[i] * L[i] * L[i];
            if (!(slx > 0 && sl2 > 0)) continue;
            int new_l = imin(nmax, nearest_int(x[i] * sl2 / slx));
            if (new_l == L[i]) continue;
            slx += w[i] * x[i] * new_l;
            sl2 += w[i] * new_l * new_l;
            if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                L[i] = (uint8_t)new_l; sumlx = slx; suml2 = sl2;
                n_changed++;
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ---------------------------------------------------------------- 32-element blocks
 * Each takes the block's weights w[32] (NULL: ggml's reference quantizer). ggml's weighted ones are
 * w = imatrix * sqrt(sigma2 + x^2), sigma2 the row's mean square (the row loop computes them), fit by
 * qx_quants (Q4_0, Q5_0: no requantization against the fp16 scale) or qkx2_quants (Q4_1, Q5_1). */

static void min_max(const float *x, int n, float *mn, float *mx) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    *mn = min; *mx = max;
}

/* d f16 | qs[16]: element j in the low nibble of qs[j], element j + 16 in the high one. */
static void block_q4_0(const float *x, const float *w, uint8_t *b) {
    if (w) {
        int8_t L[QK];
        put_f16(b, qx_quants(QK, 8, x, w, L));
        for (int j = 0; j < QK / 2; j++) b[2 + j] = (uint8_t)(L[j] | L[j + QK / 2] << 4);
        return;
    }
    const float d = signed_amax(x, QK) / -8, id = d ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < QK / 2; j++) {
        /* the cast truncates a value in [0.5, 16.5]: the +8.5 makes it a rounding */
        const uint8_t q0 = (uint8_t)imin(15, (int8_t)trunc_i32(x[j] * id + 8.5f));
        const uint8_t q1 = (uint8_t)imin(15, (int8_t)trunc_i32(x[j + QK / 2] * id + 8.5f));
        b[2 + j] = (uint8_t)(q0 | q1 << 4);
    }
}

/* d f16 | m f16 | qs[16] */
static void block_q4_1(const float *x, const float *w, uint8_t *b) {
    if (w) {
        uint8_t L[QK], Laux[QK];
        float the_min;
        const float d = qkx2_quants(QK, 15, x, w, L, &the_min, Laux, -0.9f, 0.05f, 36, 0);
        put_f16(b, d);
        put_f16(b + 2, -the_min);
        for (int j = 0; j < QK / 2; j++) b[4 + j] = (uint8_t)(L[j] | L[j + QK / 2] << 4);
        return;
    }
    float min, max;
    min_max(x, QK, &min, &max);
    const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, min);
    for (int j = 0; j < QK / 2; j++) {
        const uint8_t q0 = (uint8_t)imin(15, (int8_t)trunc_i32((x[j] - min) * id + 0.5f));
        const uint8_t q1 = (uint8_t)imin(15, (int8_t)trunc_i32((x[j + QK / 2] - min) * id + 0.5f));
        b[4 + j] = (uint8_t)(q0 | q1 << 4);
    }
}

/* 5-bit quants q[32] -> qh (bit 4 of element j at bit j, little-endian u32) and qs (low nibbles, as Q4). */
static void pack_q5(const uint8_t *q, uint8_t *qh, uint8_t *qs) {
    uint32_t h = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | (q[j + QK / 2] & 0x0f) << 4);
        h |= (uint32_t)(q[j] >> 4 & 1) << j;
        h |= (uint32_t)(q[j + QK / 2] >> 4 & 1) << (j + QK / 2);
    }
    for (int i = 0; i < 4; i++) qh[i] = (uint8_t)(h >> 8 * i);
}

/* d f16 | qh[4] | qs[16] */
static void block_q5_0(const float *x, const float *w, uint8_t *b) {
    if (w) {
        int8_t L[QK];
        put_f16(b, qx_quants(QK, 16, x, w, L));
        pack_q5((const uint8_t *)L, b + 2, b + 6);
        return;
    }
    const float d = signed_amax(x, QK) / -16, id = d ? 1.0f / d : 0.0f;
    uint8_t q[QK];
    put_f16(b, d);
    for (int j = 0; j < QK; j++) q[j] = (uint8_t)imin(31, (int8_t)trunc_i32(x[j] * id + 16.5f));
    pack_q5(q, b + 2, b + 6);
}

/* d f16 | m f16 | qh[4] | qs[16] */
static void block_q5_1(const float *x, const float *w, uint8_t *b) {
    if (w) {
        uint8_t L[QK], Laux[QK];
        float the_min;
        const float d = qkx2_quants(QK, 31, x, w, L, &the_min, Laux, -0.9f, 0.05f, 36, 0);
        put_f16(b, d);
        put_f16(b + 2, -the_min);
        pack_q5(L, b + 4, b + 8);
        return;
    }
    float min, max;
    min_max(x, QK, &min, &max);
    const float d = (max - min) / 31, id = d ? 1.0f / d : 0.0f;
    uint8_t q[QK];
    put_f16(b, d);
    put_f16(b + 2, min);
    for (int j = 0; j < QK; j++) q[j] = (uint8_t)trunc_i32((x[j] - min) * id + 0.5f); /* no clamp, as ggml */
    pack_q5(q, b + 4, b + 8);
}

/* d f16 | qs int8[32]. ggml's Q8_0 ignores an importance matrix: w is unused. */
static void block_q8_0(const float *x, const float *w, uint8_t *b) {
    (void)w;
    float amax = 0.0f;
    for (int j = 0; j < QK; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < QK; j++) b[2 + j] = (uint8_t)trunc_i32(roundf(x[j] * id));
}

/* ---------------------------------------------------------------- K-quant helpers */

/* A superblock's sum of squares over QK_K in order, as ggml's weighted K-quants start with. */
static float sum_squares(const float *x) {
    float s = 0;
    for (int j = 0; j < QK_K; j++) s += x[j] * x[j];
    return s;
}

/* weights[n] = qw sqrt(sigma2 + x^2) and their sum from 0 in order: ggml's importance weights of a group. */
static float imatrix_weights(int n, const float *x, const float *qw, float sigma2, float *weights) {
    float sum = 0;
    for (int l = 0; l < n; l++) weights[l] = qw[l] * sqrtf(sigma2 + x[l] * x[l]);
    for (int l = 0; l < n; l++) sum += weights[l];
    return sum;
}

/* 2-bit quants L[256] -> qs[64]: per 128 elements, byte l holds elements l, l+32, l+64, l+96 (2 bits each). */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

/* The 12-byte 6-bit scale/min table of Q4_K / Q5_K from 8 scale and min quants: the writer of
 * get_scale_min_k4's layout. A quant over 63 (only ggml's unclamped imatrix Q4_K passes one) spills its
 * bits as ggml's does. */
static void pack_scales_k4(const uint8_t *Ls, const uint8_t *Lm, uint8_t *s) {
    for (int j = 0; j < QK_K / 32; j++) {
        const uint8_t ls = Ls[j], lm = Lm[j];
        if (j < 4) {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 0xf) | (lm & 0xf) << 4);
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
}

static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63; *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xf) | (q[j - 4] >> 6) << 4);
        *m = (uint8_t)((q[j + 4] >> 4) | (q[j] >> 6) << 4);
    }
}

/* Q4_K / Q5_K's common part: 8 groups of 32 fit by qkx2_quants, their scales and mins quantized to 6 bits
 * into s[12] with fp16 d, dmin at dm[0..3], then the quants L[256] in [0, nmax] redone against the
 * quantized scales (a group whose scale rounds to 0 keeps its fitted quants). Without an importance
 * matrix (qw NULL, ggml's _ref) the weights are av_x + |x| per group and the 6-bit quants come from the
 * largest scale and min; with one (qw[256] of this superblock, ggml's _impl) the weights are
 * qw sqrt(sigma2 + x^2) with sigma2 twice the superblock's mean square, the fit searches 37 scales, and
 * qp_quants fits the 6-bit quants under each group's weight sum (clamped to 63 at Q5_K only, as ggml). */
static void quantize_k4(const float *x, const float *qw, int nmax, float rmin, int nstep, uint8_t *dm, uint8_t *s,
                        uint8_t *L) {
    float scales[QK_K / 32], mins[QK_K / 32], weights[32], sw[QK_K / 32], max_scale = 0, max_min = 0;
    uint8_t Laux[32], Ls[QK_K / 32], Lm[QK_K / 32];
    if (qw) {
        const float sigma2 = 2 * sum_squares(x) / QK_K;
        for (int j = 0; j < QK_K / 32; j++) {
            sw[j] = imatrix_weights(32, x + 32 * j, qw + 32 * j, sigma2, weights);
            scales[j] = qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
        }
        const float d_block = qp_quants(QK_K / 32, 63, scales, sw, Ls);
        const float m_block = qp_quants(QK_K / 32, 63, mins, sw, Lm);
        if (nmax == 31) {
            for (int j = 0; j < QK_K / 32; j++) {
                Ls[j] = Ls[j] < 63 ? Ls[j] : 63;
                Lm[j] = Lm[j] < 63 ? Lm[j] : 63;
            }
        }
        pack_scales_k4(Ls, Lm, s);
        put_f16(dm, d_block);
        put_f16(dm + 2, m_block);
    } else {
        for (int j = 0; j < QK_K / 32; j++) {
            const float *xg = x + 32 * j;
            float sum_x2 = 0;
            for (int l = 0; l < 32; l++) sum_x2 += xg[l] * xg[l];
            float av_x = sqrtf(sum_x2 / 32);
            for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xg[l]);
            scales[j] = qkx2_quants(32, nmax, xg, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, 0);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < QK_K / 32; j++) {
            const uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
            const uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
            Ls[j] = ls < 63 ? ls : 63;
            Lm[j] = lm < 63 ? lm : 63;
        }
        pack_scales_k4(Ls, Lm, s);
        put_f16(dm, max_scale / 63.f);
        put_f16(dm + 2, max_min / 63.f);
    }
    for (int j = 0; j < QK_K / 32; j++) {
        uint8_t sc, m;
        scale_min_k4(j, s, &sc, &m);
        const float d = get_f16(dm) * sc;
        if (!d) continue;
        const float dmin = get_f16(dm + 2) * m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)clampi(nearest_int((x[32 * j + i] + dmin) / d), 0, nmax);
    }
}

/* ---------------------------------------------------------------- K-quant superblocks
 * Each takes qw, the importance matrix's 256 values for this superblock (NULL: ggml's reference
 * quantizer), and derives its weights from them as ggml's quantize_row_*_impl does. */

/* Q2_K's end: the quants L redone against the block's quantized scales and mins (a group whose scale is
 * 0 keeps its fitted ones), packed into qs. */
static void requantize_q2_k(const float *x, uint8_t *b, uint8_t *L) {
    const uint8_t *sc = b, *dm = b + 80;
    for (int j = 0; j < QK_K / 16; j++) {
        const float d = get_f16(dm) * (sc[j] & 0xf);
        if (!d) continue;
        const float dmin = get_f16(dm + 2) * (sc[j] >> 4);
        for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)clampi(nearest_int((x[16 * j + i] + dmin) / d), 0, 3);
    }
    pack_2bit(L, b + 16);
}

/* scales[16] (low nibble scale, high nibble min) | qs[64] | d f16 | dmin f16. With qw: groups fit by
 * 37-scale qkx2_quants under weights with sigma2 the mean square, 4-bit scales and mins by qp_quants. */
static void block_q2_k(const float *x, const float *qw, uint8_t *b) {
    uint8_t L[QK_K], Laux[16], *sc = b, *dm = b + 80;
    float weights[16], mins[QK_K / 16], scales[QK_K / 16], max_scale = 0, max_min = 0;
    const float q4scale = 15.f;
    if (qw) {
        float sw[QK_K / 16];
        uint8_t Ls[QK_K / 16], Lm[QK_K / 16];
        const float sigma2 = sum_squares(x) / QK_K;
        for (int j = 0; j < QK_K / 16; j++) {
            sw[j] = imatrix_weights(16, x + 16 * j, qw + 16 * j, sigma2, weights);
            scales[j] = qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, 0);
        }
        const float d = qp_quants(QK_K / 16, 15, scales, sw, Ls), m = qp_quants(QK_K / 16, 15, mins, sw, Lm);
        put_f16(dm, d);
        put_f16(dm + 2, m);
        for (int j = 0; j < QK_K / 16; j++) sc[j] = (uint8_t)(Ls[j] | Lm[j] << 4);
        requantize_q2_k(x, b, L);
        return;
    }
    for (int j = 0; j < QK_K / 16; j++) {
        for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
        scales[j] = qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, 1);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        float iscale = q4scale / max_scale;
        for (int j = 0; j < QK_K / 16; j++) sc[j] = (uint8_t)nearest_int(iscale * scales[j]);
        put_f16(dm, max_scale / q4scale);
    } else {
        memset(sc, 0, QK_K / 16);
        put_f16(dm, 0.f);
    }
    if (max_min > 0) {
        float iscale = q4scale / max_min;
        for (int j = 0; j < QK_K / 16; j++) sc[j] = (uint8_t)(sc[j] | nearest_int(iscale * mins[j]) << 4);
        put_f16(dm + 2, max_min / q4scale);
    } else {
        put_f16(dm + 2, 0.f);
    }
    requantize_q2_k(x, b, L);
}

/* Q3_K's 6-bit scale quants l[16] in [0, 64) -> s[12]: low nibbles of 0..7 then 8..15 in s[0..7], the
 * top 2 bits of j at bits 2 (j / 4) of s[8 + j % 4]. s must be zero. */
static void pack_scales_q3_k(const int8_t *ls, uint8_t *s) {
    for (int j = 0; j < QK_K / 16; j++) {
        const int l = ls[j];
        if (j < 8) s[j] = (uint8_t)(l & 0xf);
        else s[j - 8] |= (uint8_t)((l & 0xf) << 4);
        s[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
}

/* hmask[32] | qs[64] | scales[12] (16 6-bit signed scales + 32) | d f16. With qw: groups fit by
 * qx_quants under weights with sigma2 twice the mean square, their scales by qx_quants under each
 * group's weight sum. */
static void block_q3_k(const float *x, const float *qw, uint8_t *b) {
    int8_t L[QK_K];
    float scales[QK_K / 16], max_scale = 0, amax = 0;
    uint8_t *hmask = b, *qs = b + 32, *s = b + 96, *dp = b + 108;
    memset(s, 0, 12);
    if (qw) {
        float weights[16], sw[QK_K / 16];
        int8_t Ls[QK_K / 16];
        const float sigma2 = 2 * sum_squares(x) / QK_K;
        for (int j = 0; j < QK_K / 16; j++) {
            sw[j] = imatrix_weights(16, x + 16 * j, qw + 16 * j, sigma2, weights);
            scales[j] = qx_quants(16, 4, x + 16 * j, weights, L + 16 * j);
        }
        const float d_block = qx_quants(QK_K / 16, 32, scales, sw, Ls);
        pack_scales_q3_k(Ls, s);
        put_f16(dp, d_block);
    } else {
        for (int j = 0; j < QK_K / 16; j++) {
            scales[j] = q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float a = fabsf(scales[j]);
            if (a > amax) { amax = a; max_scale = scales[j]; }
        }
        if (max_scale) {
            int8_t ls[QK_K / 16];
            float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; j++)
                ls[j] = (int8_t)(clampi((int8_t)nearest_int(iscale * scales[j]), -32, 31) + 32);
            pack_scales_q3_k(ls, s);
            put_f16(dp, 1 / iscale);
        } else {
            put_f16(dp, 0.f);
        }
    }
    /* the quants redone against the quantized scales (a group whose scale is 0 keeps its fitted ones) */
    for (int j = 0; j < QK_K / 16; j++) {
        int sc = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
        sc = (int8_t)((sc | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32);
        float d = get_f16(dp) * sc;
        if (!d) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(clampi(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
    }
    /* bit 2 of each quant: element j at bit j / 32 of hmask[j % 32] */
    memset(hmask, 0, QK_K / 8);
    for (int j = 0; j < QK_K; j++) {
        if (L[j] > 3) {
            hmask[j % 32] |= (uint8_t)(1 << (j / 32));
            L[j] = (int8_t)(L[j] - 4);
        }
    }
    pack_2bit((const uint8_t *)L, qs);
}

/* d f16 | dmin f16 | scales[12] | qs[128]: per 64 elements, byte l holds element l (low) and l + 32 (high) */
static void block_q4_k(const float *x, const float *qw, uint8_t *b) {
    uint8_t L[QK_K], *q = b + 16;
    quantize_k4(x, qw, 15, -1.f, 20, b, b + 4, L);
    for (int j = 0; j < QK_K; j += 64, q += 32)
        for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
}

/* d f16 | dmin f16 | scales[12] | qh[32] | qs[128]: low nibbles as Q4_K; bit 4 of element 64 n + j
 * (j < 32) at bit 2n of qh[j], of element 64 n + 32 + j at bit 2n + 1 */
static void block_q5_k(const float *x, const float *qw, uint8_t *b) {
    uint8_t L[QK_K], *qh = b + 16, *ql = b + 48;
    quantize_k4(x, qw, 31, -0.5f, 15, b, b + 4, L);
    memset(qh, 0, QK_K / 8);
    for (int n = 0; n < QK_K / 64; n++, ql += 32) {
        for (int j = 0; j < 32; j++) {
            int l1 = L[64 * n + j], l2 = L[64 * n + j + 32];
            if (l1 > 15) { l1 -= 16; qh[j] |= (uint8_t)(1 << 2 * n); }
            if (l2 > 15) { l2 -= 16; qh[j] |= (uint8_t)(2 << 2 * n); }
            ql[j] = (uint8_t)(l1 | l2 << 4);
        }
    }
}

/* ql[128] | qh[64] | scales int8[16] | d f16: per 128 elements, ql[l] holds elements l (low nibble) and
 * l + 64 (high), ql[l + 32] elements l + 32 and l + 96, qh[l] the top 2 bits of all four. With qw the
 * groups' fit is weighted by the importance matrix itself (no sigma2 term, as ggml's). */
static void block_q6_k(const float *x, const float *qw, uint8_t *b) {
    int8_t L[QK_K];
    float scales[QK_K / 16], max_scale = 0, max_abs_scale = 0;
    uint8_t *ql = b, *qh = b + 128, *dp = b + 208;
    int8_t *s = (int8_t *)(b + 192);
    for (int ib = 0; ib < QK_K / 16; ib++) {
        scales[ib] = qx_quants(16, 32, x + 16 * ib, qw ? qw + 16 * ib : NULL, L + 16 * ib);
        if (fabsf(scales[ib]) > max_abs_scale) { max_abs_scale = fabsf(scales[ib]); max_scale = scales[ib]; }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(b, 0, 210);
        put_f16(dp, 0.f);
        return;
    }
    float iscale = -128.f / max_scale;
    put_f16(dp, 1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ib++) s[ib] = (int8_t)imin(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < QK_K / 16; j++) {
        float d = get_f16(dp) * s[j];
        if (!d) continue;
        for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(clampi(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
    }
    for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            const uint8_t *u = (const uint8_t *)L + j + l;
            ql[l] = (uint8_t)((u[0] & 0xf) | (u[64] & 0xf) << 4);
            ql[l + 32] = (uint8_t)((u[32] & 0xf) | (u[96] & 0xf) << 4);
            qh[l] = (uint8_t)(u[0] >> 4 | (u[32] >> 4) << 2 | (u[64] >> 4) << 4 | (u[96] >> 4) << 6);
        }
    }
}

/* ---------------------------------------------------------------- rows */

/* A block quantizer: x -> b, with w the block's weights (32-element blocks) or importance matrix values
 * (superblocks), or NULL for ggml's reference quantizer. */
typedef void (*block_fn)(const float *x, const float *w, uint8_t *b);

/* The type's block function with its block size and bytes; NULL for F16/BF16 (element-wise) or unknown. */
static int block_info(int type, block_fn *fn, int *bs, int *ts) {
    switch (type) {
    case F16: case BF16: *fn = NULL; *bs = 1; *ts = 2; return 0;
    case Q4_0: *fn = block_q4_0; *bs = QK; *ts = 18; return 0;
    case Q4_1: *fn = block_q4_1; *bs = QK; *ts = 20; return 0;
    case Q5_0: *fn = block_q5_0; *bs = QK; *ts = 22; return 0;
    case Q5_1: *fn = block_q5_1; *bs = QK; *ts = 24; return 0;
    case Q8_0: *fn = block_q8_0; *bs = QK; *ts = 34; return 0;
    case Q2_K: *fn = block_q2_k; *bs = QK_K; *ts = 84; return 0;
    case Q3_K: *fn = block_q3_k; *bs = QK_K; *ts = 110; return 0;
    case Q4_K: *fn = block_q4_k; *bs = QK_K; *ts = 144; return 0;
    case Q5_K: *fn = block_q5_k; *bs = QK_K; *ts = 176; return 0;
    case Q6_K: *fn = block_q6_k; *bs = QK_K; *ts = 210; return 0;
    default: return -1;
    }
}

/* One row of n. imatrix (n values, or NULL) is only passed for types whose ggml quantizer uses it; for
 * 32-element blocks it becomes per-block weights imatrix * sqrt(sigma2 + x^2) with sigma2 the row's
 * mean square (sum in order, divided by n as a float), as ggml's quantize_row_q4_0_impl etc. */
static void quantize_row(int type, block_fn fn, int bs, int ts, const float *x, const float *imatrix,
                         uint8_t *out, int64_t n) {
    if (type == F16) {
        for (int64_t i = 0; i < n; i++) put16(out + 2 * i, ly_f32_to_f16(x[i]));
    } else if (type == BF16) {
        for (int64_t i = 0; i < n; i++) put16(out + 2 * i, f32_to_bf16(x[i]));
    } else if (imatrix && bs == QK) {
        float sum_x2 = 0, w[QK];
        for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
        const float sigma2 = sum_x2 / (float)n;
        for (int64_t i = 0; i < n / QK; i++) {
            const float *xb = x + i * QK, *qw = imatrix + i * QK;
            for (int j = 0; j < QK; j++) w[j] = qw[j] * sqrtf(sigma2 + xb[j] * xb[j]);
            fn(xb, w, out + i * ts);
        }
    } else {
        for (int64_t i = 0; i < n / bs; i++) fn(x + i * bs, imatrix ? imatrix + i * bs : NULL, out + i * ts);
    }
}

/* Source row r as float32: the row itself, or converted into buf (F16 and BF16 widen exactly). */
static const float *source_row(const void *src, int src_type, int64_t r, int64_t n, float *buf) {
    if (src_type == 0) return (const float *)src + r * n;
    const uint16_t *h = (const uint16_t *)src + r * n;
    for (int64_t i = 0; i < n; i++) {
        if (src_type == F16) {
            buf[i] = ly_f16_to_f32(h[i]);
        } else {
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(&buf[i], &u, 4);
        }
    }
    return buf;
}

typedef struct {
    int type, bs, ts, src_type;
    block_fn fn;
    const void *src;
    void *dst;
    int64_t nrows, n_per_row, row_bytes;
    const float *imatrix;
    atomic_int failed;
} quantize_job;

/* Thread ith of nth: its contiguous share of the rows. */
static void quantize_part(void *arg, int ith, int nth) {
    quantize_job *j = arg;
    int64_t lo = j->nrows * ith / nth, hi = j->nrows * (ith + 1) / nth;
    float *buf = j->src_type && lo < hi ? malloc((size_t)j->n_per_row * sizeof(float)) : NULL;
    if (j->src_type && lo < hi && !buf) {
        atomic_store(&j->failed, 1);
        return;
    }
    for (int64_t r = lo; r < hi; r++)
        quantize_row(j->type, j->fn, j->bs, j->ts, source_row(j->src, j->src_type, r, j->n_per_row, buf), j->imatrix,
                     (uint8_t *)j->dst + r * j->row_bytes, j->n_per_row);
    free(buf);
}

/* Quantizes nrows rows of n_per_row values of src_type (0: F32, F16 or BF16, widened to float32 row by
 * row in the thread that quantizes it) into ggml type `type` (ggml type ids), rows one after another,
 * as ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, imatrix). imatrix: NULL, or n_per_row
 * importance values shared by every row (finite: the caller checks); Q8_0, F16 and BF16 ignore it, as
 * ggml does. Returns the bytes written, or -1 when a type is not one of these, n_per_row is not a multiple
 * of the block size, or memory for a row runs out. Rows are independent: nthreads > 1 splits them into
 * contiguous shares, one per thread (same bytes). */
LY_API int64_t ly_quantize_rows(int type, const void *src, int src_type, void *dst, int64_t nrows,
                                int64_t n_per_row, const float *imatrix, int nthreads) {
    block_fn fn;
    int bs, ts;
    if (block_info(type, &fn, &bs, &ts) || n_per_row <= 0 || n_per_row % bs || nrows < 0) return -1;
    if (src_type != 0 && src_type != F16 && src_type != BF16) return -1;
    if (type == Q8_0 || type == F16 || type == BF16) imatrix = NULL;
    const int64_t row_bytes = n_per_row / bs * ts;
    if (nthreads < 1) nthreads = 1;
    if (nthreads > nrows) nthreads = nrows > 1 ? (int)nrows : 1;
    quantize_job j = {type, bs, ts, src_type, fn, src, dst, nrows, n_per_row, row_bytes, imatrix, 0};
    ly_parallel(quantize_part, &j, nthreads);
    return atomic_load(&j.failed) ? -1 : nrows * row_bytes;
}
