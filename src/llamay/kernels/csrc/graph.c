#include "graph.h"
#include <omp.h>

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

/* Runs nodes in order; a node starts only when every thread finished the previous one. Returns the
 * index of the first node with an unknown op, or -1 when all are known (checked before running). */
LY_API int64_t ly_graph_run(const ly_node *nodes, int64_t n_nodes, int nthreads) {
    for (int64_t i = 0; i < n_nodes; i++)
        if (nodes[i].op < LY_OP_RMSNORM || nodes[i].op > LY_OP_BIAS) return i;
    if (nthreads < 1) nthreads = 1;
    if (nthreads == 1 || n_nodes == 0) {
        for (int64_t i = 0; i < n_nodes; i++) run_node(&nodes[i], 0, 1);
        return -1;
    }
    #pragma omp parallel num_threads(nthreads)
    {
        int ith = omp_get_thread_num(), nth = omp_get_num_threads();
        for (int64_t i = 0; i < n_nodes; i++) {
            run_node(&nodes[i], ith, nth);
            #pragma omp barrier
        }
    }
    return -1;
}
