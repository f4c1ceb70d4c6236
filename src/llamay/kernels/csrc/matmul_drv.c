/* The matmul driver: y[n, m] = x[n, k] . w[m, k]^T for one weight matrix in a GGML block format.
 * Activations arrive already quantized (ly_act). Threads take static contiguous ranges of 16-row groups
 * (never a split of a reduction); each thread walks token tiles whose activations fit in L2 and hands
 * (rows, tokens) tiles to the format's tile function. Every output element follows its format's canonical
 * sequence, so y does not depend on nthreads, on tile bounds or on n. */
#include "graph.h"
#include "kernels.h"
#include "pool.h"
#include "thread.h"

#define ACT_TILE_BYTES (512 * 1024)
/* Rows per share: the widest tile's row group (AVX-512: 16), so no share ends in a part-empty group. */
#define ROW_GROUP 16
/* A thread is worth waking for at least this many weight bytes x tokens (fork/join costs microseconds). */
#define MIN_THREAD_WORK (48 * 1024)

static int64_t token_tile(int64_t k, int64_t n) {
    int64_t tt = (ACT_TILE_BYTES / (k + 1)) & ~(int64_t)3;
    tt = tt < 4 ? 4 : tt;
    return tt < n ? tt : n;
}

typedef struct {
    ly_tile_fn tile;
    const uint8_t *w;
    size_t row_bytes;
    int64_t m;
    const ly_act *a;
    int64_t n;
    float *y;
    int64_t groups, tt;
} matmul_job;

/* Thread i of nt: its contiguous share of the 16-row groups, token tile by token tile. */
static void matmul_part(void *arg, int i, int nt) {
    const matmul_job *j = arg;
    int64_t ra = j->groups * i / nt * ROW_GROUP, rb = j->groups * (i + 1) / nt * ROW_GROUP;
    rb = rb < j->m ? rb : j->m;
    for (int64_t t0 = 0; t0 < j->n && ra < rb; t0 += j->tt)
        j->tile(j->w, j->row_bytes, ra, rb, j->a, t0, t0 + j->tt < j->n ? t0 + j->tt : j->n, j->y, j->m);
}

/* w: m rows of row_bytes; y: [n, m]. Returns 0, or -1 for a type without a tile function. */
LY_API int ly_matmul(const uint8_t *w, size_t row_bytes, int type, int64_t m, const ly_act *a, int64_t n,
                     float *y, int nthreads) {
    ly_tile_fn tile = ly_tile(type);
    if (!tile) return -1;
    if (m <= 0 || n <= 0) return 0;
    int64_t groups = (m + ROW_GROUP - 1) / ROW_GROUP, tt = token_tile(a->k, n);
    if (nthreads < 1) nthreads = ly_cpu_count();
    int64_t useful = (int64_t)(m * row_bytes) * n / MIN_THREAD_WORK;
    if (nthreads > useful) nthreads = useful > 1 ? (int)useful : 1;
    if (nthreads > groups) nthreads = (int)groups;
    matmul_job j = {tile, w, row_bytes, m, a, n, y, groups, tt};
    ly_parallel(matmul_part, &j, nthreads);
    return 0;
}

/* Graph form: chunk ith takes its contiguous share of 16-row groups. An unsupported type was refused
 * when the node was built (QWeight checks support), so a missing tile here computes nothing. */
void ly_matmul_slice(const ly_node *nd, int ith, int nth) {
    const ly_act *a = nd->p[1];
    int64_t m = nd->n[2], n = nd->n[3], groups = (m + ROW_GROUP - 1) / ROW_GROUP, ga, gb;
    ly_tile_fn tile = ly_tile((int)nd->n[1]);
    if (!tile || n <= 0) return;
    ly_share(groups, ith, nth, &ga, &gb);
    int64_t ra = ga * ROW_GROUP, rb = gb * ROW_GROUP < m ? gb * ROW_GROUP : m, tt = token_tile(a->k, n);
    float *y = nd->p[2], *res = nd->p[4];
    const float *bias = nd->p[3];
    for (int64_t t0 = 0; t0 < n && ra < rb; t0 += tt)
        tile(nd->p[0], (size_t)nd->n[0], ra, rb, a, t0, t0 + tt < n ? t0 + tt : n, y, m);
    /* the chunk's own rows, still in cache: y += bias, then res += y (as separate bias and add nodes) */
    for (int64_t t = 0; (bias || res) && t < n; t++)
        for (int64_t r = ra; r < rb; r++) {
            float v = y[t * m + r];
            if (bias) y[t * m + r] = v = v + bias[r];
            if (res) res[t * m + r] = res[t * m + r] + v;
        }
}

/* Experts' matmuls over a gathered batch (MOE_MATMUL): expert e's rows of the batch, offs[e] .. offs[e + 1],
 * times its matrix, through the same tiles as one matmul, so a token's result does not depend on which
 * other tokens chose the same expert. The work items are (expert in use, 16-row group) pairs, expert by
 * expert; chunk ith takes a contiguous range of them, so each thread streams long runs of one matrix. */
void ly_moe_matmul_slice(const ly_node *nd, int ith, int nth) {
    const ly_act *a = nd->p[1];
    const int32_t *offs = nd->p[3];
    const float *bias = nd->p[4];
    int64_t row_bytes = nd->n[0], m = nd->n[2], n_expert = nd->n[3], groups = (m + ROW_GROUP - 1) / ROW_GROUP;
    ly_tile_fn tile = ly_tile((int)nd->n[1]);
    if (!tile) return;
    int64_t used = 0, lo, hi, tt = token_tile(a->k, nd->n[4]);
    for (int64_t e = 0; e < n_expert; e++) used += offs[e + 1] > offs[e];
    ly_share(used * groups, ith, nth, &lo, &hi);
    float *y = nd->p[2];
    for (int64_t e = 0, u = 0; e < n_expert && u * groups < hi; e++) {
        if (offs[e + 1] <= offs[e]) continue;
        int64_t ga = lo - u * groups, gb = hi - u * groups;
        u++;
        ga = ga < 0 ? 0 : ga;
        gb = gb > groups ? groups : gb;
        if (ga >= gb) continue;
        int64_t ra = ga * ROW_GROUP, rb = gb * ROW_GROUP < m ? gb * ROW_GROUP : m;
        const uint8_t *w = (const uint8_t *)nd->p[0] + (size_t)e * (size_t)nd->n[5];
        for (int64_t t0 = offs[e]; t0 < offs[e + 1]; t0 += tt)
            tile(w, (size_t)row_bytes, ra, rb, a, t0, t0 + tt < offs[e + 1] ? t0 + tt : offs[e + 1], y, m);
        for (int64_t t = offs[e]; bias && t < offs[e + 1]; t++)
            for (int64_t r = ra; r < rb; r++) y[t * m + r] += bias[e * m + r];
    }
}
