/* One token of the gated delta rule on one head, W columns of the value dimension at once (graph.h
 * DELTA_RULE; deltanet.c ly_delta_step_portable is the order): included by recurrent_avx2.c and
 * recurrent_avx512.c with VEC (the vector type), W, LOAD, STORE, SET1, ADD, SUB, MUL and FN (the function's
 * name and target attribute) defined. Columns past the last whole vector run the portable sequence. */
FN(float *S, const float *q, const float *k, const float *v, float beta, float decay, float *out, int64_t dk,
   int64_t dv) {
    float delta[LY_DELTA_MAX_DIM];
    int64_t whole = dv / W * W;
    for (int64_t j = 0; j < dv; j++) delta[j] = 0.0f;
    VEC vdecay = SET1(decay);
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i];
        VEC vk = SET1(ki);
        for (int64_t j = 0; j < whole; j += W) {
            VEC s = MUL(LOAD(Si + j), vdecay);
            STORE(Si + j, s);
            STORE(delta + j, ADD(LOAD(delta + j), MUL(s, vk)));
        }
        for (int64_t j = whole; j < dv; j++) {
            Si[j] = Si[j] * decay;
            delta[j] = delta[j] + Si[j] * ki;
        }
    }
    VEC vbeta = SET1(beta);
    for (int64_t j = 0; j < whole; j += W) {
        STORE(delta + j, MUL(SUB(LOAD(v + j), LOAD(delta + j)), vbeta));
        STORE(out + j, SET1(0.0f));
    }
    for (int64_t j = whole; j < dv; j++) {
        delta[j] = (v[j] - delta[j]) * beta;
        out[j] = 0.0f;
    }
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i], qi = q[i];
        VEC vk = SET1(ki), vq = SET1(qi);
        for (int64_t j = 0; j < whole; j += W) {
            VEC s = ADD(LOAD(Si + j), MUL(vk, LOAD(delta + j)));
            STORE(Si + j, s);
            STORE(out + j, ADD(LOAD(out + j), MUL(s, vq)));
        }
        for (int64_t j = whole; j < dv; j++) {
            Si[j] = Si[j] + ki * delta[j];
            out[j] = out[j] + Si[j] * qi;
        }
    }
}
