/* Activation quantization into the canonical Q8 form of matmul.h (ly_act).
 *
 * Per token and 32-value block: amax = max |x|; d = amax / 127.0f; id = d != 0 ? 1.0f / d : 0.0f;
 * q[i] = rint(x[i] * id) (half to even; |q| <= 127 since |x * id| <= 127 up to rounding);
 * s16[h] = sum of q over the 16-value half h. Portable and AVX2 are bit-identical. */
#include "common.h"
#include <immintrin.h>
#include "graph.h"
#include "matmul.h"

static void act_row_portable(const float *x, int64_t k, int8_t *q, float *d, int32_t *s16) {
    for (int64_t b = 0; b < k / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int h = 0; h < 2; h++) {
            int32_t s = 0;
            for (int i = h * 16; i < h * 16 + 16; i++) {
                int v = (int)nearbyintf(xb[i] * id);
                q[b * 32 + i] = (int8_t)v;
                s += v;
            }
            s16[b * 2 + h] = s;
        }
    }
}

LY_AVX2 static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

LY_AVX2 static void act_row_avx2(const float *x, int64_t k, int8_t *q, float *d, int32_t *s16) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < k / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v[4], m = _mm256_setzero_ps();
        for (int j = 0; j < 4; j++) {
            v[j] = _mm256_loadu_ps(xb + 8 * j);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[j]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4), db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        const __m256 idv = _mm256_set1_ps(id);
        __m256i iv[4];
        for (int j = 0; j < 4; j++) /* cvtps rounds half to even in the default MXCSR mode, as rint */
            iv[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], idv));
        s16[b * 2] = hsum_epi32(_mm256_add_epi32(iv[0], iv[1]));
        s16[b * 2 + 1] = hsum_epi32(_mm256_add_epi32(iv[2], iv[3]));
        /* |q| <= 127: the saturating packs are exact; dwords then hold q[0:4], q[8:12], ..., q[4:8], ... */
        __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + b * 32), p8);
    }
}

/* Rows [lo, hi) of a->x [n, k] float32, k % 32 == 0 -> q: [n, k] int8, d: [n, k/32], s16: [n, k/16].
 * Each token is independent, so a result depends on no share or thread count. */
void ly_quant_rows(const ly_act *a, int64_t lo, int64_t hi) {
    int64_t k = a->k;
    for (int64_t t = lo; t < hi; t++) {
        const float *x = a->x + t * k;
        int8_t *q = (int8_t *)a->q + t * k;
        float *d = (float *)a->d + t * (k / 32);
        int32_t *s16 = (int32_t *)a->s16 + t * (k / 16);
        if (ly_avx2) act_row_avx2(x, k, q, d, s16);
        else act_row_portable(x, k, q, d, s16);
    }
}

/* Shares: tokens. */
void ly_quant_slice(const ly_node *nd, int ith, int nth) {
    int64_t lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    ly_quant_rows(nd->p[0], lo, hi);
}

LY_API void ly_quantize_act(const float *x, int64_t n, int64_t k, int8_t *q, float *d, int32_t *s16,
                            int nthreads) {
    ly_act a = {q, d, s16, x, k};
    ly_node nd = {.op = LY_OP_QUANT, .p = {&a}, .n = {n}};
    ly_graph_run(&nd, 1, n * k >= 65536 ? nthreads : 1);
}
