#include "graph.h"
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Chunks per thread and node: a thread the OS deschedules mid-node holds back at most one small chunk,
 * the running threads take the rest. Results never depend on it (slices split outputs, never a reduction). */
#define CHUNKS_PER_THREAD 4
/* Polls of a node's completion before each sched_yield: short, so a waiting thread hands its core to
 * the one it waits for (on a busy machine, often the descheduled thread itself). */
#define SPINS_BEFORE_YIELD 256

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
    case LY_OP_BIAS: ly_bias_slice(nd, ith, nth); break;
    default: break;
    }
}

typedef struct {
    atomic_int_fast64_t claimed, done;
} node_progress;

/* Every thread claims chunks of node i from its counter until none is left, then waits until all of
 * node i's chunks are done (not until every thread arrives): a node completes when its work does. */
static void run_claiming(const ly_node *nodes, int64_t n_nodes, node_progress *prog, int64_t n_chunks) {
    for (int64_t i = 0; i < n_nodes; i++) {
        int64_t c;
        while ((c = atomic_fetch_add_explicit(&prog[i].claimed, 1, memory_order_relaxed)) < n_chunks) {
            run_node(&nodes[i], (int)c, (int)n_chunks);
            atomic_fetch_add_explicit(&prog[i].done, 1, memory_order_release);
        }
        for (int spins = 0; atomic_load_explicit(&prog[i].done, memory_order_acquire) < n_chunks; spins++)
            if (spins % SPINS_BEFORE_YIELD == SPINS_BEFORE_YIELD - 1) sched_yield();
    }
}

/* Runs nodes in order; a node starts only when the previous one's work is complete. Returns the index of
 * the first node with an unknown op, or -1 when all are known (checked before running); -2 when the
 * progress counters cannot be allocated. */
LY_API int64_t ly_graph_run(const ly_node *nodes, int64_t n_nodes, int nthreads) {
    for (int64_t i = 0; i < n_nodes; i++)
        if (nodes[i].op < LY_OP_RMSNORM || nodes[i].op > LY_OP_BIAS) return i;
    if (nthreads < 1) nthreads = 1;
    if (nthreads == 1 || n_nodes == 0) {
        for (int64_t i = 0; i < n_nodes; i++) run_node(&nodes[i], 0, 1);
        return -1;
    }
    node_progress *prog = calloc((size_t)n_nodes, sizeof *prog);
    if (!prog) return -2;
    int64_t n_chunks = (int64_t)nthreads * CHUNKS_PER_THREAD;
    #pragma omp parallel num_threads(nthreads)
    run_claiming(nodes, n_nodes, prog, n_chunks);
    free(prog);
    return -1;
}
