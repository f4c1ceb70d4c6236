#include "graph.h"
#include "matmul.h"
#include "pool.h"
#include "thread.h"
#include <stdatomic.h>
#include <stdlib.h>

/* Polls of a node's completion (each with a pause, ~20 us in all) before the waiting thread sleeps on a
 * futex until the node's last chunk is done: on a busy machine the thread it waits for is often
 * descheduled, and a sleeping waiter gives its core back instead of spending its share spinning. */
#define SPINS_BEFORE_SLEEP 256

static void run_node(const ly_node *nd, int ith, int nth) {
    switch (nd->op) {
    case LY_OP_RMSNORM: ly_rmsnorm_slice(nd, ith, nth); break;
    case LY_OP_QUANT: ly_quant_slice(nd, ith, nth); break;
    case LY_OP_MATMUL: ly_matmul_slice(nd, ith, nth); break;
    case LY_OP_ROPE: ly_rope_slice(nd, ith, nth); break;
    case LY_OP_KV_WRITE: ly_kv_write_slice(nd, ith, nth); break;
    case LY_OP_ATTENTION: ly_attention_slice(nd, ith, nth); break;
    case LY_OP_GATED: ly_gated_slice(nd, ith, nth); break;
    case LY_OP_ADD: ly_add_slice(nd, ith, nth); break;
    case LY_OP_SCALE: ly_scale_slice(nd, ith, nth); break;
    case LY_OP_SOFTCAP: ly_softcap_slice(nd, ith, nth); break;
    case LY_OP_LAYERNORM: ly_layernorm_slice(nd, ith, nth); break;
    case LY_OP_MOE_ROUTE: ly_moe_route_slice(nd, ith, nth); break;
    case LY_OP_GATHER: ly_gather_slice(nd, ith, nth); break;
    case LY_OP_MOE_MATMUL: ly_moe_matmul_slice(nd, ith, nth); break;
    case LY_OP_MOE_COMBINE: ly_moe_combine_slice(nd, ith, nth); break;
    case LY_OP_POS_SCALE: ly_pos_scale_slice(nd, ith, nth); break;
    case LY_OP_SIGMOID_SCALE: ly_sigmoid_scale_slice(nd, ith, nth); break;
    case LY_OP_ROW_SCALE: ly_row_scale_slice(nd, ith, nth); break;
    case LY_OP_CONV: ly_conv_slice(nd, ith, nth); break;
    case LY_OP_DELTA_RULE: ly_delta_rule_slice(nd, ith, nth); break;
    case LY_OP_SSM_SCAN: ly_ssm_scan_slice(nd, ith, nth); break;
    case LY_OP_HEAD_MATMUL: ly_head_matmul_slice(nd, ith, nth); break;
    case LY_OP_COPY_ROWS: ly_copy_rows_slice(nd, ith, nth); break;
    default: break;
    }
}

/* Work (elements or weight bytes touched, weighted by cost) below which a node is not split further: each
 * chunk costs an atomic claim and an atomic completion on a line every thread touches. */
#define MIN_CHUNK_WORK 16384

static int64_t node_work(const ly_node *nd) {
    switch (nd->op) {
    case LY_OP_MATMUL: return nd->n[0] * nd->n[2] * nd->n[3];
    case LY_OP_QUANT: return nd->n[0] * ((const ly_act *)nd->p[0])->k;
    case LY_OP_RMSNORM: return nd->n[0] * nd->n[1] * (nd->p[3] ? 2 : 1);
    case LY_OP_LAYERNORM: return nd->n[0] * nd->n[1];
    case LY_OP_ROPE: return nd->n[0] * nd->n[1] * nd->n[3] * 8;
    case LY_OP_KV_WRITE: return ((const ly_batch *)nd->p[2])->n_tokens * nd->n[0] * nd->n[1];
    case LY_OP_GATED: case LY_OP_SOFTCAP: return nd->n[0] * 8;
    case LY_OP_ADD: case LY_OP_SCALE: return nd->n[0];
    case LY_OP_MOE_ROUTE: return 0; /* one chunk: it groups every token */
    case LY_OP_CONV: return nd->n[0] * nd->n[1] * nd->n[2];
    case LY_OP_DELTA_RULE: return nd->n[0] * nd->n[2] * nd->n[3] * nd->n[4] * 4;
    case LY_OP_SSM_SCAN: return nd->n[0] * nd->n[1] * nd->n[2] * nd->n[3] * 4;
    case LY_OP_GATHER: case LY_OP_COPY_ROWS: return nd->n[0] * nd->n[1];
    case LY_OP_HEAD_MATMUL: return nd->n[0] * nd->n[2] * nd->n[3];
    case LY_OP_MOE_MATMUL: return nd->n[0] * nd->n[2] * (nd->n[3] < nd->n[4] ? nd->n[3] : nd->n[4]); /* experts' bytes */
    case LY_OP_MOE_COMBINE: return nd->n[0] * nd->n[1] * nd->n[2];
    case LY_OP_POS_SCALE: case LY_OP_SIGMOID_SCALE: case LY_OP_ROW_SCALE: return nd->n[0] * nd->n[1];
    default: return INT64_MAX; /* attention: its positions are not known here; always split */
    }
}

static int node_chunks(const ly_node *nd, int nthreads) {
    int64_t most = (int64_t)nthreads * LY_CHUNKS_PER_THREAD, w = node_work(nd) / MIN_CHUNK_WORK;
    return (int)(w < 1 ? 1 : w < most ? w : most);
}

typedef struct {
    atomic_int claimed, done; /* done: the futex word */
    atomic_int sleepers;
    int chunks;
    char pad[64 - 4 * sizeof(int)]; /* one node per cache line: threads on the next node do not slow this one */
} node_progress;

/* Returns when node p's chunks are all done: polls, then sleeps until the last chunk's wake. */
static void wait_done(node_progress *p) {
    for (int spins = 0;; spins++) {
        int done = atomic_load_explicit(&p->done, memory_order_acquire);
        if (done >= p->chunks) return;
        if (spins < SPINS_BEFORE_SLEEP) { LY_CPU_RELAX(); continue; }
        atomic_fetch_add_explicit(&p->sleepers, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&p->done, memory_order_seq_cst) == done) ly_wait_while(&p->done, done);
        atomic_fetch_sub_explicit(&p->sleepers, 1, memory_order_relaxed);
    }
}

/* Every thread claims chunks of node i from its counter until none is left. Before node i it makes sure
 * that every node up to nodes[i].after is complete (`verified`: all nodes up to it are), so a node that
 * does not depend on the one before starts while that one's last chunks still run. A thread waits only
 * on nodes whose chunks are all claimed (it passed them), and a claimed chunk runs to its end: no
 * deadlock. The region's end (every thread returned) completes the graph. */
typedef struct {
    const ly_node *nodes;
    int64_t n_nodes;
    node_progress *prog;
} graph_run;

static void run_claiming(void *arg, int ith, int nth) {
    const graph_run *g = arg;
    const ly_node *nodes = g->nodes;
    node_progress *prog = g->prog;
    int64_t n_nodes = g->n_nodes;
    (void)ith; (void)nth;
    int64_t verified = -1;
    for (int64_t i = 0; i < n_nodes; i++) {
        int64_t need = nodes[i].after < i ? nodes[i].after : i - 1;
        while (verified < need) wait_done(&prog[++verified]);
        node_progress *p = &prog[i];
        int c;
        while ((c = atomic_fetch_add_explicit(&p->claimed, 1, memory_order_relaxed)) < p->chunks) {
            run_node(&nodes[i], c, p->chunks);
            /* seq_cst pairs with the sleeper's increment-then-recheck: a wake is never missed */
            if (atomic_fetch_add_explicit(&p->done, 1, memory_order_seq_cst) + 1 == p->chunks
                && atomic_load_explicit(&p->sleepers, memory_order_seq_cst))
                ly_wake_all(&p->done);
        }
    }
}

/* Runs nodes in order; a node starts only when the work it depends on (`after`) is complete. Returns the index of
 * the first node with an unknown op, or -1 when all are known (checked before running); -2 when the
 * progress counters cannot be allocated. */
LY_API int64_t ly_graph_run(const ly_node *nodes, int64_t n_nodes, int nthreads) {
    for (int64_t i = 0; i < n_nodes; i++)
        if (nodes[i].op < LY_OP_RMSNORM || nodes[i].op > LY_OP_LAST) return i;
    if (nthreads < 1) nthreads = 1;
    if (nthreads == 1 || n_nodes == 0) {
        for (int64_t i = 0; i < n_nodes; i++) run_node(&nodes[i], 0, 1);
        return -1;
    }
    node_progress *prog = ly_aligned_alloc(64, (size_t)n_nodes * sizeof *prog);
    if (!prog) return -2;
    for (int64_t i = 0; i < n_nodes; i++) {
        atomic_init(&prog[i].claimed, 0);
        atomic_init(&prog[i].done, 0);
        atomic_init(&prog[i].sleepers, 0);
        prog[i].chunks = node_chunks(&nodes[i], nthreads);
    }
    graph_run g = {nodes, n_nodes, prog};
    ly_parallel(run_claiming, &g, nthreads);
    ly_aligned_free(prog);
    return -1;
}

/* Profiling form (bench/profile_ops.py): the same nodes and chunks, a barrier after each node, and
 * seconds[i] = node i's wall time from the barrier before it to the one after it (its slowest thread). */
typedef struct {
    const ly_node *nodes;
    int64_t n_nodes;
    double *seconds;
    ly_barrier barrier;
} graph_profile;

static void run_profiled(void *arg, int ith, int nth) {
    graph_profile *g = arg;
    double t = ly_now();
    for (int64_t i = 0; i < g->n_nodes; i++) {
        int chunks = node_chunks(&g->nodes[i], nth);
        for (int c = ith; c < chunks; c += nth) run_node(&g->nodes[i], c, chunks);
        ly_barrier_wait(&g->barrier, nth);
        if (ith == 0) {
            double now = ly_now();
            g->seconds[i] = now - t;
            t = now;
        }
    }
}

LY_API int64_t ly_graph_profile(const ly_node *nodes, int64_t n_nodes, int nthreads, double *seconds) {
    for (int64_t i = 0; i < n_nodes; i++)
        if (nodes[i].op < LY_OP_RMSNORM || nodes[i].op > LY_OP_LAST) return i;
    graph_profile g = {nodes, n_nodes, seconds, {0}};
    ly_parallel(run_profiled, &g, nthreads);
    return -1;
}
