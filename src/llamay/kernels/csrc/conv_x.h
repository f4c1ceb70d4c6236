/* One token's causal depthwise convolution over channels [lo, hi), W channels at once (conv.c's portable
 * row is the order): included by recurrent_avx2.c and recurrent_avx512.c with VEC, W, LOAD, STORE, SET1,
 * ADD, MUL and FN defined. Channels past the last whole vector run the portable row. */
FN(const float *w, float *s, const float *x, float *y, const float *bias, int64_t lo, int64_t hi, int64_t C,
   int64_t K) {
    int64_t c = lo;
    for (; c + W <= hi; c += W) {
        VEC in = LOAD(x + c), acc = SET1(0.0f);
        for (int64_t j = 0; j < K - 1; j++) acc = ADD(acc, MUL(LOAD(w + j * C + c), LOAD(s + j * C + c)));
        acc = ADD(acc, MUL(LOAD(w + (K - 1) * C + c), in));
        if (bias) acc = ADD(acc, LOAD(bias + c));
        for (int64_t j = 0; j + 1 < K - 1; j++) STORE(s + j * C + c, LOAD(s + (j + 1) * C + c));
        STORE(s + (K - 2) * C + c, in);
        STORE(y + c, acc);
    }
    ly_conv_row_portable(w, s, x, y, bias, c, hi, C, K);
}
