/* A causal depthwise convolution over each sequence's tokens, its last K - 1 inputs kept in a state slot
 * (graph.h CONV): LFM2's short convolutions and the convolutions before Mamba2's and the gated delta
 * net's scans. Shares are channel ranges; each channel walks the batch's tokens in order, so a token's
 * output depends only on its slot's state and its own input, however the batch is made. One multiply and
 * one add per tap, taps ascending, in every path (no FMA: -ffp-contract=off; conv_x.h runs 8 or 16
 * channels at once in recurrent_avx2.c and recurrent_avx512.c). */
#include "graph.h"
#include "kernels.h"

/* Channels [lo, hi) of one token: w [K, C] taps-major, s [K - 1, C] its sequence's state, x and y [C]
 * (y may be x). */
void ly_conv_row_portable(const float *w, float *s, const float *x, float *y, const float *bias, int64_t lo,
                          int64_t hi, int64_t C, int64_t K) {
    for (int64_t c = lo; c < hi; c++) {
        float in = x[c], acc = 0.0f;
        for (int64_t j = 0; j < K - 1; j++) acc = acc + w[j * C + c] * s[j * C + c];
        acc = acc + w[(K - 1) * C + c] * in;
        if (bias) acc = acc + bias[c];
        for (int64_t j = 0; j + 1 < K - 1; j++) s[j * C + c] = s[(j + 1) * C + c];
        s[(K - 2) * C + c] = in;
        y[c] = acc;
    }
}

void ly_conv_slice(const ly_node *nd, int ith, int nth) {
    const float *x = nd->p[0], *w = nd->p[1], *bias = nd->p[5];
    float *y = nd->p[2], *pool = nd->p[3];
    const ly_batch *b = nd->p[4];
    int64_t n = nd->n[0], C = nd->n[1], K = nd->n[2], lo, hi;
    ly_share(C, ith, nth, &lo, &hi);
    void (*row)(const float *, float *, const float *, float *, const float *, int64_t, int64_t, int64_t,
                int64_t) = ly_kernels->conv_row;
    for (int64_t t = 0; t < n; t++) {
        float *s = pool + (int64_t)b->state_slots[b->tok_seq[t]] * (K - 1) * C;
        row(w, s, x + t * C, y + t * C, bias, lo, hi, C, K);
    }
}
