/* A causal depthwise convolution over each sequence's tokens, its last K - 1 inputs kept in a state slot
 * (graph.h CONV): LFM2's short convolutions and the convolutions before Mamba2's and the gated delta
 * net's scans. Shares are channel ranges; each channel walks the batch's tokens in order, so a token's
 * output depends only on its slot's state and its own input, however the batch is made. One multiply and
 * one add per tap, taps ascending, in every path (no FMA: -ffp-contract=off). */
#include "graph.h"

void ly_conv_slice(const ly_node *nd, int ith, int nth) {
    const float *x = nd->p[0], *w = nd->p[1], *bias = nd->p[5];
    float *y = nd->p[2], *pool = nd->p[3];
    const ly_batch *b = nd->p[4];
    int64_t n = nd->n[0], C = nd->n[1], K = nd->n[2], lo, hi;
    ly_share(C, ith, nth, &lo, &hi);
    for (int64_t t = 0; t < n; t++) {
        float *s = pool + (int64_t)b->state_slots[b->tok_seq[t]] * (K - 1) * C;
        const float *xt = x + t * C;
        float *yt = y + t * C;
        for (int64_t c = lo; c < hi; c++) {
            const float *wc = w + c * K;
            float in = xt[c], acc = 0.0f;
            for (int64_t j = 0; j < K - 1; j++) acc = acc + wc[j] * s[j * C + c];
            acc = acc + wc[K - 1] * in;
            if (bias) acc = acc + bias[c];
            for (int64_t j = 0; j + 1 < K - 1; j++) s[j * C + c] = s[(j + 1) * C + c];
            if (K > 1) s[(K - 2) * C + c] = in;
            yt[c] = acc;
        }
    }
}
