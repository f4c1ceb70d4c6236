/* Activation quantization into the canonical Q8 form of matmul.h (ly_act).
 *
 * Per token and block of bs values (32, or 256 for the K-quants): amax = max |x|; d = amax / 127.0f;
 * id = d != 0 ? 1.0f / d : 0.0f; q[i] = rint(x[i] * id) (half to even; |q| <= 127 since |x * id| <= 127 up
 * to rounding); s16[h] = sum of q over the 16-value half h. The portable row is here, the AVX2 and NEON ones
 * (bit-identical) in act_avx2.c and act_neon.c. */
#include "graph.h"
#include "kernels.h"

void ly_quant_row_portable(const float *x, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16) {
    for (int64_t b = 0; b < k / bs; b++) {
        const float *xb = x + b * bs;
        float amax = 0.0f;
        for (int64_t i = 0; i < bs; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        d[b] = db;
        for (int64_t h = 0; h < bs / 16; h++) {
            int32_t s = 0;
            for (int64_t i = h * 16; i < h * 16 + 16; i++) {
                int v = (int)nearbyintf(xb[i] * id);
                q[b * bs + i] = (int8_t)v;
                s += v;
            }
            s16[b * (bs / 16) + h] = s;
        }
    }
}

/* Rows [lo, hi) of a->x [n, k] float32, k % a->bs == 0 -> q: [n, k] int8, d: [n, k/bs], s16: [n, k/16].
 * Each token is independent, so a result depends on no share or thread count. */
void ly_quant_rows(const ly_act *a, int64_t lo, int64_t hi) {
    int64_t k = a->k, bs = a->bs;
    void (*quant_row)(const float *, int64_t, int64_t, int8_t *, float *, int32_t *) = ly_kernels->quant_row;
    for (int64_t t = lo; t < hi; t++) {
        const float *x = a->x + t * k;
        int8_t *q = (int8_t *)a->q + t * k;
        float *d = (float *)a->d + t * (k / bs);
        int32_t *s16 = (int32_t *)a->s16 + t * (k / 16);
        quant_row(x, k, bs, q, d, s16);
    }
}

/* Shares: tokens. */
void ly_quant_slice(const ly_node *nd, int ith, int nth) {
    int64_t lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    ly_quant_rows(nd->p[0], lo, hi);
}

LY_API void ly_quantize_act(const float *x, int64_t n, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16,
                            int nthreads) {
    ly_act a = {q, d, s16, x, k, bs};
    ly_node nd = {.op = LY_OP_QUANT, .p = {&a}, .n = {n}};
    ly_graph_run(&nd, 1, n * k >= 65536 ? nthreads : 1);
}

/* matmul.h's LY_ACT_BS for Python (kernels/matmul.py act_block): one source for a type's activation block */
LY_API int64_t ly_act_block(int type) { return LY_ACT_BS(type); }
