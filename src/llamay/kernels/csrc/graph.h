/* A forward pass as a list of nodes run inside ONE parallel region (pool.h): threads stay hot for the
 * whole pass instead of a fork/join per op (hundreds per token). Every op is a slice function: chunk ith
 * of nth does its fixed share, claimed by whichever thread is running (graph.c), and a node completes
 * when its chunks are done, not when every thread arrives. Shares split output rows, tokens or
 * (token, head) pairs, never a reduction, so results depend neither on nth nor on who ran a chunk. */
#ifndef LLAMAY_GRAPH_H
#define LLAMAY_GRAPH_H
#include "common.h"

enum { LY_OP_RMSNORM = 1, LY_OP_QUANT = 2, LY_OP_MATMUL = 3, LY_OP_ROPE = 4, LY_OP_KV_WRITE = 5,
       LY_OP_ATTENTION = 6, LY_OP_GATED = 7, LY_OP_ADD = 8, LY_OP_SCALE = 9, LY_OP_SOFTCAP = 10,
       LY_OP_LAYERNORM = 11, LY_OP_MOE_ROUTE = 12, LY_OP_GATHER = 13, LY_OP_MOE_MATMUL = 14,
       LY_OP_MOE_COMBINE = 15, LY_OP_POS_SCALE = 16, LY_OP_SIGMOID_SCALE = 17, LY_OP_ROW_SCALE = 18,
       LY_OP_CONV = 19, LY_OP_SSM_SCAN = 20, LY_OP_DELTA_RULE = 21, LY_OP_HEAD_MATMUL = 22, LY_OP_COPY_ROWS = 23,
       LY_OP_LAST = LY_OP_COPY_ROWS };

/* Chunks per thread of a node that is worth splitting (attention always is): a thread the OS deschedules
 * mid-node holds back at most one small chunk, the running threads take the rest. Results never depend
 * on it (slices split outputs, never a reduction). */
#define LY_CHUNKS_PER_THREAD 4

#define LY_DELTA_MAX_DIM 512 /* DELTA_RULE's largest head size */
/* DELTA_RULE's flags (n[5]) */
#define LY_DELTA_TILED 1   /* v-head h reads k-head h % Hk; else h / (Hv / Hk) */
#define LY_DELTA_PLANAR 2  /* q, k, v in three planes [tokens, Hk dk], [tokens, Hk dk], [tokens, Hv dv] */
#define LY_DELTA_PER_ROW 4 /* a decay per state row: a [tokens, Hv dk], dt_bias [Hv dk] (Kimi's KDA) */

/* Where each token of a batch lives; shared by every attention, KV-write and recurrent node of a pass.
 * A sequence's tokens are contiguous and in position order (recurrent ops rely on it). */
typedef struct {
    const int32_t *tok_pos;     /* [n_tokens] */
    const int32_t *tok_seq;     /* [n_tokens] row of page_tables */
    const int32_t *page_tables; /* [n_seq, max_pages] */
    int64_t n_tokens, max_pages, page_size;
    const int32_t *state_slots; /* [n_seq] each sequence's slot in the recurrent state pools, or NULL */
} ly_batch;

/* Operands by op (p: pointers, n: sizes, f: floats). Built only by kernels/builder.py, which checks them.
 * RMSNORM   p: x, w, y, ly_act* over y or NULL (quantize each row once normed)   n: rows, d, G (> 1: w is
 *           [G, d], row r takes w[r % G])   f: eps
 * QUANT     p: ly_act* (x in, q/d/s16 out)  n: tokens
 * MATMUL    p: w, ly_act*, y, bias [m] or NULL (y += bias), res [tokens, m] or NULL (res += y)
 *           n: row_bytes, type, m, tokens
 * ROPE      p: x, pos, freq factors [n_rot/2] or NULL   n: tokens, heads, head_dim, n_rot, neox
 *           f: base, linear scaling factor (1: none), scale of cos and sin (1: none; LongRoPE's attention factor)
 * KV_WRITE  p: pool, x, ly_batch*  n: n_kv_head, head_dim, element type (kvtypes.h)
 * ATTENTION p: q, out, k_pool, v_pool, ly_batch*, sinks [n_head] or NULL
 *           n: n_head, n_kv_head, head_dim, window, k | v << 8 element types   f: scale, softcap
 * GATED     p: gate (out), up (NULL: act(gate) alone), ly_act* over gate or NULL (quantize each row
 *           of act->k once done; shares are then rows)   n: count, act
 * ADD       p: x (x += y), y      n: count
 * SCALE     p: x (x *= s)         n: count                  f: s
 * SOFTCAP   p: x (cap tanh(x / cap))  n: count              f: cap
 * LAYERNORM p: x, w, b, y         n: rows, d                f: eps
 * MOE_ROUTE p: router logits [tokens, E], weights [tokens, K] out, order [tokens K] out (slot t K + j of
 *           each row of the gathered batch, expert by expert, tokens ascending), pos [tokens K] out (its
 *           inverse), offs [E + 1] out (each expert's first gathered row)
 *           n: tokens, E, K, gating (0: softmax over all E; 1: softmax over the K chosen), norm (weights
 *           divided by their sum)   f: scale of the weights   p[5]: per-expert factors of the weights [E]
 *           or NULL (Gemma 4's per_expert_scale); gating 2: sigmoid scores, the K largest of score +
 *           p[5] [E] (selection biases, or NULL) chosen, each weighted by its score (LFM2-MoE)
 * GATHER    p: x [tokens, d], order, y [tokens K, d]   n: tokens K, d, K   (y[r] = x[order[r] / K])
 * MOE_MATMUL p: w (E matrices of m rows), ly_act* over gathered rows, y [tokens K, m], offs, bias [E, m]
 *           or NULL   n: row_bytes, type, m, E, tokens K, bytes from one expert's matrix to the next (its
 *           m rows, or more when the m rows are part of a fused matrix)
 * MOE_COMBINE p: y [tokens K, d], weights, pos, out [tokens, d]   n: tokens, d, K
 *           (out[t] = sum over slots j in order of weight[t, j] y[pos[t K + j]])
 * POS_SCALE p: x [tokens, d], pos   n: tokens, d, floor   f: beta
 *           (row t times (float)(1 + beta ln(1 + floor(pos_t / floor))), computed in double)
 * SIGMOID_SCALE p: y [rows, d], g [rows]   n: rows, d   (row t times 1 / (1 + exp(-g[t])))
 * ROW_SCALE p: y [rows, d], s [rows]   n: rows, d   f: alpha, rank   (row t times s[t] * alpha / rank, or
 *           s[t] when alpha is 0: a LoRA term's scale per token; a row of scale 0 becomes zeros)
 * Recurrent ops: each token reads and updates its sequence's slot (ly_batch.state_slots) of an f32 state
 * pool, tokens in batch order; shares split channels or heads, never tokens, so a token's result depends
 * only on its slot's state and its own row: prefill == decode == batched, at any thread count.
 * CONV      p: x [tokens, C], w [K, C] (taps-major, oldest first), y [tokens, C] (may alias x), state pool
 *           [slots, K - 1, C] (the last K - 1 inputs, oldest first), ly_batch*, bias [C] or NULL
 *           n: tokens, C, K   (y[t, c] = sum_j w[j, c] win[j, c] (+ bias[c]), j ascending, win = state
 *           rows then x[t]; then the state drops its oldest row and takes x[t])
 * SSM_SCAN  Mamba's selective scan (ssm.c)   p: xBC [tokens, H P + 2 G N] (x, then B and C of each
 *           group), dt [tokens, H] (raw), params [H A_n + 2 H] (A, D, dt_bias), y [tokens, H P], state
 *           pool, ly_batch*, BC [tokens, 2 G N] or NULL (B and C in a row of their own, not after x in
 *           xBC's)   n: tokens, H, P, N, G (head h uses group h / (H / G)), mamba1
 *           Mamba2 (mamba1 0): one A per head (A_n 1), state pool [slots, H, P, N]; per token and head
 *           sp = softplus(dt + dt_bias) (mathfn.h ly_softplus), dA = expf(sp A); per row p:
 *           xdt = x sp; s[i] = s[i] dA + B[i] xdt, acc = the sum of s[i] C[i] in lanes.h order; y = acc + D x
 *           Mamba1 (mamba1 1; P = G = 1): A [N, H] (A_n N), state pool [slots, N, H]; per token and
 *           channel the same with ly_softplus_poly, dA_i = expf(sp A[i]) per state and acc summed
 *           over i ascending
 * DELTA_RULE p: qkv [tokens, 2 Hk dk + Hv dv] (q, k, v heads per row; or planes, LY_DELTA_PLANAR), ba
 *           (b's rows [tokens, Hv], then a's [tokens, Hv], or [tokens, Hv dk] with LY_DELTA_PER_ROW), params
 *           (A [Hv] then dt_bias [Hv] or [Hv dk]), y [tokens, Hv dv] out, state pool [slots, Hv, dk, dv],
 *           ly_batch*   n: tokens, Hk, Hv, dk, dv (<= LY_DELTA_MAX_DIM), flags (LY_DELTA_*)
 *           f: eps, q scale   (deltanet.c) Per token and v-head, on S [dk, dv]:
 *           q = q / sqrt(sum q^2 + eps) * scale, k = k / sqrt(sum k^2 + eps) (sums in lanes.h order),
 *           beta = sigmoid(b), decay = exp(A softplus(a + dt_bias)) (per head, or per row i of S);
 *           row i of S times decay[i]; delta = (v - S^T k) beta; S = S + k delta^T; y = S^T q (sums over dk
 *           ascending, exp is mathfn.h's)
 * HEAD_MATMUL p: x, w [H, M, K] float32, y   n: rows (tokens H), H, M, K, x stride, y stride   (latent.c)
 *           y[r sy + m] = dot(w[r % H, m], x[r sx ..]) in lanes.h order: each head's own matrix on its
 *           own slice of the row (multi-head latent attention's absorbed projections)
 * COPY_ROWS p: x, y   n: rows, width, x stride, y stride   (y[r sy + j] = x[r sx + j]) */
/* after: the latest earlier node whose work this one reads or overwrites; a thread starts it once every
 * node up to `after` is complete (i - 1 when unknown: wait for everything before). */
typedef struct {
    int64_t op;
    void *p[7];
    int64_t n[6];
    float f[3];
    int64_t after;
} ly_node;

/* [lo, hi) of n items for thread ith of nth, contiguous. */
static inline void ly_share(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}

int64_t ly_graph_run(const ly_node *nodes, int64_t n_nodes, int nthreads);
void ly_rmsnorm_slice(const ly_node *nd, int ith, int nth);
void ly_rope_slice(const ly_node *nd, int ith, int nth);
void ly_gated_slice(const ly_node *nd, int ith, int nth);
void ly_add_slice(const ly_node *nd, int ith, int nth);
void ly_scale_slice(const ly_node *nd, int ith, int nth);
void ly_softcap_slice(const ly_node *nd, int ith, int nth);
void ly_layernorm_slice(const ly_node *nd, int ith, int nth);
void ly_quant_slice(const ly_node *nd, int ith, int nth);
void ly_matmul_slice(const ly_node *nd, int ith, int nth);
void ly_kv_write_slice(const ly_node *nd, int ith, int nth);
void ly_attention_slice(const ly_node *nd, int ith, int nth);
void ly_moe_route_slice(const ly_node *nd, int ith, int nth);
void ly_gather_slice(const ly_node *nd, int ith, int nth);
void ly_moe_matmul_slice(const ly_node *nd, int ith, int nth);
void ly_moe_combine_slice(const ly_node *nd, int ith, int nth);
void ly_pos_scale_slice(const ly_node *nd, int ith, int nth);
void ly_sigmoid_scale_slice(const ly_node *nd, int ith, int nth);
void ly_row_scale_slice(const ly_node *nd, int ith, int nth);
void ly_conv_slice(const ly_node *nd, int ith, int nth);
void ly_ssm_scan_slice(const ly_node *nd, int ith, int nth);
void ly_delta_rule_slice(const ly_node *nd, int ith, int nth);
void ly_head_matmul_slice(const ly_node *nd, int ith, int nth);
void ly_copy_rows_slice(const ly_node *nd, int ith, int nth);
#endif
