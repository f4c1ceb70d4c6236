/* The gated delta rule's two passes over one head's state, W columns of the value dimension at once
 * (graph.h DELTA_RULE; deltanet.c's portable passes are the order): included by recurrent_avx2.c and
 * recurrent_avx512.c with VEC (the vector type), W, LOAD, STORE, SET1, ADD, MUL, ATTR (the target
 * attribute) and ISA (the names' suffix) defined. Columns past the last whole vector run the portable
 * sequence. */
#define LY_NAME2(a, b) a##b
#define LY_NAME(a, b) LY_NAME2(a, b)

ATTR void LY_NAME(ly_delta_pass1_, ISA)(float *S, const float *k, const float *decay, float *kv, int64_t dk,
                                        int64_t dv) {
    int64_t whole = dv / W * W;
    for (int64_t j = 0; j < dv; j++) kv[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i], di = decay[i];
        VEC vk = SET1(ki), vdecay = SET1(di);
        for (int64_t j = 0; j < whole; j += W) {
            VEC s = MUL(LOAD(Si + j), vdecay);
            STORE(Si + j, s);
            STORE(kv + j, ADD(LOAD(kv + j), MUL(s, vk)));
        }
        for (int64_t j = whole; j < dv; j++) {
            Si[j] = Si[j] * di;
            kv[j] = kv[j] + Si[j] * ki;
        }
    }
}

ATTR void LY_NAME(ly_delta_pass2_, ISA)(float *S, const float *k, const float *delta, const float *q, float *out,
                                        const float *kn, const float *decay_n, float *kv_n, int64_t dk, int64_t dv) {
    int64_t whole = dv / W * W;
    for (int64_t j = 0; j < dv; j++) out[j] = 0.0f;
    for (int64_t j = 0; j < dv && kn; j++) kv_n[j] = 0.0f;
    for (int64_t i = 0; i < dk; i++) {
        float *Si = S + i * dv, ki = k[i], qi = q[i];
        VEC vk = SET1(ki), vq = SET1(qi);
        if (kn) {
            float kni = kn[i], dni = decay_n[i];
            VEC vkn = SET1(kni), vdecay = SET1(dni);
            for (int64_t j = 0; j < whole; j += W) {
                VEC s = ADD(LOAD(Si + j), MUL(vk, LOAD(delta + j)));
                STORE(out + j, ADD(LOAD(out + j), MUL(s, vq)));
                s = MUL(s, vdecay);
                STORE(Si + j, s);
                STORE(kv_n + j, ADD(LOAD(kv_n + j), MUL(s, vkn)));
            }
            for (int64_t j = whole; j < dv; j++) {
                Si[j] = Si[j] + ki * delta[j];
                out[j] = out[j] + Si[j] * qi;
                Si[j] = Si[j] * dni;
                kv_n[j] = kv_n[j] + Si[j] * kni;
            }
            continue;
        }
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

#undef LY_NAME
#undef LY_NAME2
