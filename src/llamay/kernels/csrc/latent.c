/* Multi-head latent attention's per-head pieces (graph.h HEAD_MATMUL, COPY_ROWS). Shares split outputs;
 * each output is one dot in lanes.h order (ly_kernels->kv_dot over float32), the same bits in every path
 * and however the rows are batched. */
#include "graph.h"
#include "kernels.h"
#include "kvtypes.h"
#include <string.h>

void ly_head_matmul_slice(const ly_node *nd, int ith, int nth) {
    const float *x = nd->p[0], *w = nd->p[1];
    float *y = nd->p[2];
    int64_t H = nd->n[1], M = nd->n[2], K = nd->n[3], sx = nd->n[4], sy = nd->n[5], lo, hi;
    ly_share(nd->n[0] * M, ith, nth, &lo, &hi);
    for (int64_t i = lo; i < hi; i++) {
        int64_t r = i / M, m = i % M;
        y[r * sy + m] = ly_kernels->kv_dot(LY_KV_F32, x + r * sx, (const uint8_t *)(w + ((r % H) * M + m) * K), K);
    }
}

void ly_copy_rows_slice(const ly_node *nd, int ith, int nth) {
    const float *x = nd->p[0];
    float *y = nd->p[1];
    int64_t width = nd->n[1], sx = nd->n[2], sy = nd->n[3], lo, hi;
    ly_share(nd->n[0], ith, nth, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) memcpy(y + r * sy, x + r * sx, (size_t)width * sizeof(float));
}
