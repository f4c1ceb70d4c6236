/* Attention over paged KV (f32, f16 or q8 per K and V: kvtypes.h).
 *
 * KV pool of one layer: [n_slots, n_kv_head, head bytes] in the K or V type of kvtypes.h, slot = page * page_size + pos % page_size, the
 * page taken from the token's sequence page table (ly_batch). A query at position p attends keys at
 * positions [lo, p], lo = window ? max(0, p - window + 1) : 0 (causal, optionally sliding).
 *
 * n: n_head, n_kv_head, head_dim, window, k_type | v_type << 8.
 * Canonical order per (token, head): s_j = dot(q, k_j) * scale (lanes.h order), optional softcap,
 * m = max s_j, p_j = ly_att_weight(s_j - m) (exp, or 0 below LY_ATT_DROP: attention.h), sum = sum of p_j in key order, o = sum of p_j * v_j in key order,
 * then o / sum. Keys in position order whatever the page layout. With a sink logit z for the head
 * (gpt-oss): m = max(m, z) and sum = sum + ly_att_weight(z - m) after the keys. */
#include "graph.h"
#include "kernels.h"
#include "kvtypes.h"
#include <stdlib.h>

/* The portable KV dot and accumulate of the kernel table (the AVX2 ones: attention_avx2.c). */
float ly_kv_dot_portable(int type, const float *a, const uint8_t *k, int64_t d) {
    if (type == LY_KV_F16) return ly_dot_f16_portable(a, (const uint16_t *)k, d);
    if (type == LY_KV_F32) return ly_dot_f32_portable(a, (const float *)k, d);
    return ly_dot_q8_portable(a, k, d);
}

void ly_kv_acc_portable(int type, float *o, float p, const uint8_t *v, int64_t d) {
    ly_acc_portable(type, o, p, v, d);
}

static inline int64_t slot_of(const ly_batch *b, int64_t seq, int64_t pos) {
    int32_t page = b->page_tables[seq * b->max_pages + pos / b->page_size];
    return (int64_t)page * b->page_size + pos % b->page_size;
}

/* Calls fn(j, pointer to key j's head) for keys j in [lo, p] in position order, walking the page table
 * page by page (one division per page, not per key). */
#define FOR_KEYS(b, seq, lo, p, pool, head_off, stride, j, ptr, body)                              \
    for (int64_t pg = (lo) / (b)->page_size, j = (lo); j <= (p); pg++) {                            \
        const int32_t *tab = (b)->page_tables + (seq) * (b)->max_pages;                            \
        int64_t end = (pg + 1) * (b)->page_size - 1 < (p) ? (pg + 1) * (b)->page_size - 1 : (p);  \
        const uint8_t *ptr = (pool) + ((int64_t)tab[pg] * (b)->page_size + j % (b)->page_size)     \
                                      * (stride) + (head_off);                                     \
        for (; j <= end; j++, ptr += (stride)) { body }                                            \
    }

static void attend_one(const ly_node *nd, int64_t t, int64_t h, float *s) {
    const ly_batch *b = nd->p[4];
    const uint8_t *k_pool = nd->p[2], *v_pool = nd->p[3];
    int64_t n_head = nd->n[0], n_kv_head = nd->n[1], d = nd->n[2], window = nd->n[3];
    int kt = (int)(nd->n[4] & 0xff), vt = (int)(nd->n[4] >> 8);
    int64_t kb = ly_kv_head_bytes(kt, d), vb = ly_kv_head_bytes(vt, d);
    float scale = nd->f[0], softcap = nd->f[1];
    int64_t kvh = h / (n_head / n_kv_head), seq = b->tok_seq[t];
    int64_t p = b->tok_pos[t], lo = window ? p - window + 1 : 0;
    if (lo < 0) lo = 0;
    const float *q = (const float *)nd->p[0] + (t * n_head + h) * d;
    float *o = (float *)nd->p[1] + (t * n_head + h) * d;
    const float *sinks = nd->p[5];
    float (*kv_dot)(int, const float *, const uint8_t *, int64_t) = ly_kernels->kv_dot;
    void (*kv_acc)(int, float *, float, const uint8_t *, int64_t) = ly_kernels->kv_acc;
    float m = -INFINITY;
    FOR_KEYS(b, seq, lo, p, k_pool, kvh * kb, n_kv_head * kb, j, k, {
        float sj = kv_dot(kt, q, k, d) * scale;
        if (softcap != 0.0f) sj = softcap * tanhf(sj / softcap);
        s[j - lo] = sj;
        if (sj > m) m = sj;
    })
    if (sinks && sinks[h] > m) m = sinks[h];
    float sum = 0.0f;
    memset(o, 0, d * sizeof(float));
    FOR_KEYS(b, seq, lo, p, v_pool, kvh * vb, n_kv_head * vb, j, v, {
        float pj = ly_att_weight(s[j - lo] - m);
        sum = sum + pj;
        kv_acc(vt, o, pj, v, d);
    })
    if (sinks) sum = sum + ly_att_weight(sinks[h] - m);
    for (int64_t i = 0; i < d; i++) o[i] = o[i] / sum;
}

/* Query heads g0 .. g0 + gs - 1 of the G sharing KV head kvh, f16 K and V: key pointers gathered in
 * position order, then the grouped kernel of the path (kernel table), which follows attend_one's
 * sequence per head (so a head's result does not depend on gs). */
static void attend_group_f16(const ly_node *nd, int64_t t, int64_t kvh, int64_t g0, int64_t gs, float *s,
                             const uint16_t **kp, const uint16_t **vp) {
    const ly_batch *b = nd->p[4];
    const uint8_t *k_pool = nd->p[2], *v_pool = nd->p[3];
    int64_t n_head = nd->n[0], n_kv_head = nd->n[1], d = nd->n[2], window = nd->n[3];
    int64_t G = n_head / n_kv_head, hb = 2 * d, seq = b->tok_seq[t];
    int64_t p = b->tok_pos[t], lo = window ? p - window + 1 : 0;
    if (lo < 0) lo = 0;
    FOR_KEYS(b, seq, lo, p, k_pool, kvh * hb, n_kv_head * hb, j, k, { kp[j - lo] = (const uint16_t *)k; })
    FOR_KEYS(b, seq, lo, p, v_pool, kvh * hb, n_kv_head * hb, j, v, { vp[j - lo] = (const uint16_t *)v; })
    int64_t h0 = t * n_head + kvh * G + g0;
    const float *sinks = nd->p[5];
    ly_att at = {(const float *)nd->p[0] + h0 * d, (float *)nd->p[1] + h0 * d, kp, vp, p - lo + 1, d, gs,
                 nd->f[0], nd->f[1], sinks ? sinks + (h0 - t * n_head) : NULL};
    ly_kernels->attend_group_f16(&at, s);
}

/* Shares: (token, head) pairs (or (token, KV head) groups, of LY_MAX_GROUP heads at most) dealt round-robin,
 * so causal prefill work is balanced across threads. With fewer groups than threads (decode), a group's heads
 * are split into the fewest subgroups that give every thread one: each subgroup reads the K/V rows again, so
 * no finer. */
void ly_attention_slice(const ly_node *nd, int ith, int nth) {
    const ly_batch *b = nd->p[4];
    int64_t n_head = nd->n[0], max_pos = 0;
    for (int64_t t = 0; t < b->n_tokens; t++) if (b->tok_pos[t] > max_pos) max_pos = b->tok_pos[t];
    int64_t n_kv_head = nd->n[1], G = n_head / n_kv_head;
    float *s = malloc((size_t)(max_pos + 1) * (size_t)G * sizeof(float));
    if (ly_kernels->attend_group_f16 && nd->n[4] == (LY_KV_F16 | LY_KV_F16 << 8) && nd->n[2] % 16 == 0) {
        const uint16_t **kp = malloc((size_t)(max_pos + 1) * 2 * sizeof *kp), **vp = kp + max_pos + 1;
        int64_t groups = b->n_tokens * n_kv_head, threads = nth / LY_CHUNKS_PER_THREAD, per = 1;
        /* a larger group (latent attention: one KV head for every query head) in subgroups the kernels take */
        while (G % per || G / per > LY_MAX_GROUP) per++;
        while (groups * per < threads && per < G) per++;
        while (G % per) per++; /* subgroups of equal size */
        int64_t gs = G / per;
        for (int64_t w = ith; w < groups * per; w += nth)
            attend_group_f16(nd, w / per / n_kv_head, w / per % n_kv_head, w % per * gs, gs, s, kp, vp);
        free(kp);
    } else {
        for (int64_t w = ith; w < b->n_tokens * n_head; w += nth) attend_one(nd, w / n_head, w % n_head, s);
    }
    free(s);
}

/* x [n_tokens, n_kv_head * head_dim] (float) into a pool of KV type `type` at the tokens' slots.
 * n: n_kv_head, head_dim, type. Shares: tokens. */
void ly_kv_write_slice(const ly_node *nd, int ith, int nth) {
    uint8_t *pool = nd->p[0];
    const float *x = nd->p[1];
    const ly_batch *b = nd->p[2];
    int64_t n_kv_head = nd->n[0], d = nd->n[1], lo, hi;
    int type = (int)nd->n[2];
    int64_t hb = ly_kv_head_bytes(type, d);
    ly_share(b->n_tokens, ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        uint8_t *dst = pool + slot_of(b, b->tok_seq[t], b->tok_pos[t]) * n_kv_head * hb;
        for (int64_t h = 0; h < n_kv_head; h++)
            ly_kv_store(type, dst + h * hb, x + (t * n_kv_head + h) * d, d);
    }
}
