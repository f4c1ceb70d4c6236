/* Attention over paged f16 KV.
 *
 * KV pool of one layer: [n_slots, n_kv_head, head_dim] f16, slot = page * page_size + pos % page_size, the
 * page taken from the query's sequence page table. A query at position p attends keys at positions
 * [lo, p], lo = window ? max(0, p - window + 1) : 0 (causal, optionally sliding).
 *
 * Canonical order per (token, head): s_j = dot(q, k_j) * scale (lanes.h order), optional softcap,
 * m = max s_j, p_j = exp(s_j - m), sum = sum of p_j in key order, o = sum of p_j * v_j in key order,
 * then o / sum. Keys in position order whatever the page layout. */
#include "lanes.h"
#include <stdlib.h>
#include <omp.h>

typedef struct {
    const float *q;            /* [n_tokens, n_head, head_dim] */
    float *out;                /* [n_tokens, n_head, head_dim] */
    const uint16_t *k_pool;    /* [n_slots, n_kv_head, head_dim] */
    const uint16_t *v_pool;
    const int32_t *tok_pos;    /* [n_tokens] */
    const int32_t *tok_seq;    /* [n_tokens] row of page_tables */
    const int32_t *page_tables;/* [n_seq, max_pages] */
    int64_t n_tokens, n_head, n_kv_head, head_dim, page_size, max_pages;
    int64_t window;            /* 0: full causal */
    float scale, softcap;      /* softcap 0: none */
} ly_attn_args;

static inline int64_t slot_of(const ly_attn_args *a, int64_t seq, int64_t pos) {
    int32_t page = a->page_tables[seq * a->max_pages + pos / a->page_size];
    return (int64_t)page * a->page_size + pos % a->page_size;
}

static void accumulate_v_portable(float *o, float p, const uint16_t *v, int64_t d) {
    for (int64_t i = 0; i < d; i++) o[i] = o[i] + p * ly_f16_to_f32(v[i]);
}

LY_AVX2 static void accumulate_v_avx2(float *o, float p, const uint16_t *v, int64_t d) {
    __m256 vp = _mm256_set1_ps(p);
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) {
        __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
        _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_loadu_ps(o + i), _mm256_mul_ps(vp, vv)));
    }
    for (; i < d; i++) o[i] = o[i] + p * ly_f16_to_f32(v[i]);
}

static void attend_one(const ly_attn_args *a, int64_t t, int64_t h, float *s) {
    int64_t d = a->head_dim, kvh = h / (a->n_head / a->n_kv_head), seq = a->tok_seq[t];
    int64_t p = a->tok_pos[t], lo = a->window ? p - a->window + 1 : 0;
    if (lo < 0) lo = 0;
    const float *q = a->q + (t * a->n_head + h) * d;
    float *o = a->out + (t * a->n_head + h) * d;
    int64_t row = a->n_kv_head * d;
    float m = -INFINITY;
    for (int64_t j = lo; j <= p; j++) {
        const uint16_t *k = a->k_pool + slot_of(a, seq, j) * row + kvh * d;
        float sj = (ly_avx2 ? ly_dot_f16_avx2(q, k, d) : ly_dot_f16_portable(q, k, d)) * a->scale;
        if (a->softcap != 0.0f) sj = a->softcap * tanhf(sj / a->softcap);
        s[j - lo] = sj;
        if (sj > m) m = sj;
    }
    float sum = 0.0f;
    memset(o, 0, d * sizeof(float));
    for (int64_t j = lo; j <= p; j++) {
        float pj = expf(s[j - lo] - m);
        sum = sum + pj;
        const uint16_t *v = a->v_pool + slot_of(a, seq, j) * row + kvh * d;
        if (ly_avx2) accumulate_v_avx2(o, pj, v, d); else accumulate_v_portable(o, pj, v, d);
    }
    for (int64_t i = 0; i < d; i++) o[i] = o[i] / sum;
}

LY_API void ly_attention(const ly_attn_args *a, int nthreads) {
    int64_t max_pos = 0;
    for (int64_t t = 0; t < a->n_tokens; t++) if (a->tok_pos[t] > max_pos) max_pos = a->tok_pos[t];
    int64_t n_work = a->n_tokens * a->n_head;
    #pragma omp parallel num_threads(nthreads) if (n_work > 1)
    {
        float *s = malloc((size_t)(max_pos + 1) * sizeof(float));
        #pragma omp for schedule(dynamic, 4)
        for (int64_t w = 0; w < n_work; w++) attend_one(a, w / a->n_head, w % a->n_head, s);
        free(s);
    }
}

/* Writes rows of K or V [n_tokens, row] (float) into a pool as f16 at the tokens' slots. */
LY_API void ly_kv_write(uint16_t *pool, const float *x, const int32_t *tok_pos, const int32_t *tok_seq,
                        const int32_t *page_tables, int64_t max_pages, int64_t page_size,
                        int64_t n_tokens, int64_t row) {
    for (int64_t t = 0; t < n_tokens; t++) {
        int64_t pos = tok_pos[t];
        int32_t page = page_tables[(int64_t)tok_seq[t] * max_pages + pos / page_size];
        uint16_t *dst = pool + ((int64_t)page * page_size + pos % page_size) * row;
        for (int64_t i = 0; i < row; i++) dst[i] = ly_f32_to_f16(x[t * row + i]);
    }
}
