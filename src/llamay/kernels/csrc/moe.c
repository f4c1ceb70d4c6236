/* Mixture-of-experts routing (graph.h: MOE_ROUTE, GATHER, MOE_COMBINE; the experts' matmuls are in
 * matmul_drv.c). A token's experts and weights depend on its own router logits only, and its output sums
 * its experts' rows in slot order, so it does not depend on the batch it shares. */
#include "graph.h"
#include "mathfn.h"

#define MAX_EXPERTS_USED 64
#define LY_MOE_MAX_EXPERTS 4096 /* experts of a router with sigmoid gating (builder.py MAX_EXPERTS) */

/* The K largest of l[0..E) by value, ties to the lower index, into idx (descending). */
static void top_k(const float *l, int64_t E, int64_t K, int32_t *idx) {
    for (int64_t j = 0; j < K; j++) idx[j] = -1;
    for (int64_t e = 0; e < E; e++) {
        int64_t j = K;
        while (j > 0 && (idx[j - 1] < 0 || l[e] > l[idx[j - 1]])) j--;
        if (j == K) continue;
        for (int64_t i = K - 1; i > j; i--) idx[i] = idx[i - 1];
        idx[j] = (int32_t)e;
    }
}

/* One chunk does it all: the grouping needs every token's choice. Counting sort by expert keeps tokens
 * ascending within each expert. */
void ly_moe_route_slice(const ly_node *nd, int ith, int nth) {
    (void)nth;
    if (ith != 0) return;
    const float *logits = nd->p[0];
    float *wts = nd->p[1];
    int32_t *order = nd->p[2], *pos = nd->p[3], *offs = nd->p[4];
    int64_t n = nd->n[0], E = nd->n[1], K = nd->n[2];
    int gating = (int)nd->n[3], norm = (int)nd->n[4];
    float scale = nd->f[0];
    const float *escale = gating == 2 ? NULL : nd->p[5], *sbias = gating == 2 ? nd->p[5] : NULL;
    int32_t idx[MAX_EXPERTS_USED];
    float key[LY_MOE_MAX_EXPERTS];
    for (int64_t e = 0; e <= E; e++) offs[e] = 0;
    for (int64_t t = 0; t < n; t++) {
        const float *l = logits + t * E;
        float *w = wts + t * K;
        if (gating == 2) { /* sigmoid scores; the k largest of score + bias chosen, weighted by their score */
            for (int64_t e = 0; e < E; e++) key[e] = 1.0f / (1.0f + ly_exp(-l[e]));
            for (int64_t e = 0; e < E && sbias; e++) key[e] = key[e] + sbias[e];
            top_k(key, E, K, idx);
            for (int64_t j = 0; j < K; j++) w[j] = 1.0f / (1.0f + ly_exp(-l[idx[j]]));
        } else {
            top_k(l, E, K, idx);
        }
        float mx = l[idx[0]], sum = 0.0f;
        if (gating == 0) { /* softmax over all E: exp(l - max) / sum, summed in expert order */
            for (int64_t e = 0; e < E; e++) sum += ly_exp(l[e] - mx);
            for (int64_t j = 0; j < K; j++) w[j] = ly_exp(l[idx[j]] - mx) / sum;
        } else if (gating == 1) { /* softmax over the chosen logits */
            for (int64_t j = 0; j < K; j++) sum += (w[j] = ly_exp(l[idx[j]] - mx));
            for (int64_t j = 0; j < K; j++) w[j] = w[j] / sum;
        }
        if (norm) {
            float s = 0.0f;
            for (int64_t j = 0; j < K; j++) s += w[j];
            for (int64_t j = 0; j < K; j++) w[j] = w[j] / s;
        }
        for (int64_t j = 0; j < K; j++) {
            w[j] = w[j] * scale;
            if (escale) w[j] = w[j] * escale[idx[j]];
            order[t * K + j] = idx[j]; /* the expert, for now */
            offs[idx[j] + 1]++;
        }
    }
    for (int64_t e = 0; e < E; e++) offs[e + 1] += offs[e]; /* offs[e]: expert e's first row */
    for (int64_t s = 0; s < n * K; s++) pos[s] = offs[order[s]]++; /* offs[e] ends at expert e + 1's first */
    for (int64_t e = E; e > 0; e--) offs[e] = offs[e - 1];
    offs[0] = 0;
    for (int64_t s = 0; s < n * K; s++) order[pos[s]] = (int32_t)s;
}

void ly_gather_slice(const ly_node *nd, int ith, int nth) {
    const float *x = nd->p[0];
    const int32_t *order = nd->p[1];
    float *y = nd->p[2];
    int64_t d = nd->n[1], K = nd->n[2], lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const float *src = x + (order[r] / K) * d;
        for (int64_t i = 0; i < d; i++) y[r * d + i] = src[i];
    }
}

void ly_moe_combine_slice(const ly_node *nd, int ith, int nth) {
    const float *y = nd->p[0], *wts = nd->p[1];
    const int32_t *pos = nd->p[2];
    float *out = nd->p[3];
    int64_t d = nd->n[1], K = nd->n[2], lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t t = lo; t < hi; t++)
        for (int64_t i = 0; i < d; i++) {
            float s = 0.0f;
            for (int64_t j = 0; j < K; j++) s += wts[t * K + j] * y[(int64_t)pos[t * K + j] * d + i];
            out[t * d + i] = s;
        }
}
