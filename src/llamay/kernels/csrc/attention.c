/* Attention over paged f16 KV.
 *
 * KV pool of one layer: [n_slots, n_kv_head, head_dim] f16, slot = page * page_size + pos % page_size, the
 * page taken from the token's sequence page table (ly_batch). A query at position p attends keys at
 * positions [lo, p], lo = window ? max(0, p - window + 1) : 0 (causal, optionally sliding).
 *
 * Canonical order per (token, head): s_j = dot(q, k_j) * scale (lanes.h order), optional softcap,
 * m = max s_j, p_j = exp(s_j - m), sum = sum of p_j in key order, o = sum of p_j * v_j in key order,
 * then o / sum. Keys in position order whatever the page layout. */
#include "graph.h"
#include "lanes.h"
#include <stdlib.h>

static inline int64_t slot_of(const ly_batch *b, int64_t seq, int64_t pos) {
    int32_t page = b->page_tables[seq * b->max_pages + pos / b->page_size];
    return (int64_t)page * b->page_size + pos % b->page_size;
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

static void attend_one(const ly_node *nd, int64_t t, int64_t h, float *s) {
    const ly_batch *b = nd->p[4];
    const uint16_t *k_pool = nd->p[2], *v_pool = nd->p[3];
    int64_t n_head = nd->n[0], n_kv_head = nd->n[1], d = nd->n[2], window = nd->n[3];
    float scale = nd->f[0], softcap = nd->f[1];
    int64_t kvh = h / (n_head / n_kv_head), seq = b->tok_seq[t], row = n_kv_head * d;
    int64_t p = b->tok_pos[t], lo = window ? p - window + 1 : 0;
    if (lo < 0) lo = 0;
    const float *q = (const float *)nd->p[0] + (t * n_head + h) * d;
    float *o = (float *)nd->p[1] + (t * n_head + h) * d;
    float m = -INFINITY;
    for (int64_t j = lo; j <= p; j++) {
        const uint16_t *k = k_pool + slot_of(b, seq, j) * row + kvh * d;
        float sj = (ly_avx2 ? ly_dot_f16_avx2(q, k, d) : ly_dot_f16_portable(q, k, d)) * scale;
        if (softcap != 0.0f) sj = softcap * tanhf(sj / softcap);
        s[j - lo] = sj;
        if (sj > m) m = sj;
    }
    float sum = 0.0f;
    memset(o, 0, d * sizeof(float));
    for (int64_t j = lo; j <= p; j++) {
        float pj = expf(s[j - lo] - m);
        sum = sum + pj;
        const uint16_t *v = v_pool + slot_of(b, seq, j) * row + kvh * d;
        if (ly_avx2) accumulate_v_avx2(o, pj, v, d); else accumulate_v_portable(o, pj, v, d);
    }
    for (int64_t i = 0; i < d; i++) o[i] = o[i] / sum;
}

/* Shares: (token, head) pairs dealt round-robin, so causal prefill work is balanced across threads. */
void ly_attention_slice(const ly_node *nd, int ith, int nth) {
    const ly_batch *b = nd->p[4];
    int64_t n_head = nd->n[0], max_pos = 0;
    for (int64_t t = 0; t < b->n_tokens; t++) if (b->tok_pos[t] > max_pos) max_pos = b->tok_pos[t];
    float *s = malloc((size_t)(max_pos + 1) * sizeof(float));
    for (int64_t w = ith; w < b->n_tokens * n_head; w += nth) attend_one(nd, w / n_head, w % n_head, s);
    free(s);
}

/* Rows of K or V [n_tokens, row] (float) into a pool as f16 at the tokens' slots. Shares: tokens. */
void ly_kv_write_slice(const ly_node *nd, int ith, int nth) {
    uint16_t *pool = nd->p[0];
    const float *x = nd->p[1];
    const ly_batch *b = nd->p[2];
    int64_t row = nd->n[0], lo, hi;
    ly_share(b->n_tokens, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        uint16_t *dst = pool + slot_of(b, b->tok_seq[t], b->tok_pos[t]) * row;
        for (int64_t i = 0; i < row; i++) dst[i] = ly_f32_to_f16(x[t * row + i]);
    }
}
