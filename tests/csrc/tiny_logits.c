/* A tiny two-layer decoder's logits, without Python: the graph runner's real ops (RMSNorm, quantized
 * matmuls of six formats, RoPE, f16 paged KV, grouped attention, SiLU-gated FFN, residuals) on seeded
 * random weights, a prefill of 7 tokens then one decode token. Prints one FNV-1a digest of all logits per
 * kernel path and thread count; scripts/cross_test.sh logits checks that every path of the x86-64 build and
 * of the arm64 build (under qemu) prints the same one. Usage: tiny_logits [path ...] (default: all). */
#include "../../src/llamay/kernels/csrc/graph.h"
#include "../../src/llamay/kernels/csrc/kernels.h"
#include "../../src/llamay/kernels/csrc/kvtypes.h"
#include <stdio.h>
#include <stdlib.h>

LY_API int ly_init(int path);
LY_API int ly_can_run(int path);
LY_API int64_t ly_quantize_rows(int type, const void *src, int src_type, void *dst, int64_t nrows,
                                int64_t n_per_row, const float *imatrix, int nthreads);
LY_API int64_t ly_graph_run(const ly_node *nodes, int64_t n_nodes, int nthreads);

enum { D = 256, HEADS = 4, KV_HEADS = 2, HD = 64, FFN = 512, VOCAB = 96, LAYERS = 2, PROMPT = 7, MAX_T = 8 };
static const char *PATH_NAMES[LY_N_PATHS] = {"portable", "avx2", "avxvnni", "avx512", "neon", "dotprod", "i8mm"};

static uint64_t rng = 0x2545f4914f6cdd1du;
static float rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(int64_t)(rng >> 40) / (float)(1 << 23) - 1.0f;
}

typedef struct { uint8_t *w; int64_t row_bytes, type; } qmat;

static qmat qmatrix(int type, int64_t m, int64_t k, float scale) {
    float *src = malloc(m * k * 4);
    for (int64_t i = 0; i < m * k; i++) src[i] = rnd() * scale;
    qmat q = {malloc(m * k * 4), 0, type};
    q.row_bytes = ly_quantize_rows(type, src, 0, q.w, m, k, NULL, 1) / m;
    free(src);
    return q;
}

typedef struct { qmat wq, wk, wv, wo, gate, up, down; float norm1[D], norm2[D]; } layer;

typedef struct { /* activations of up to MAX_T tokens */
    float x[MAX_T * D], h[MAX_T * D], q[MAX_T * D], k[MAX_T * KV_HEADS * HD], v[MAX_T * KV_HEADS * HD];
    float att[MAX_T * D], y[MAX_T * D], g[MAX_T * FFN], u[MAX_T * FFN], logits[MAX_T * VOCAB];
    int8_t qh[MAX_T * D], qa[MAX_T * D], qg[MAX_T * FFN];
    float dh[MAX_T * D / 32], da[MAX_T * D / 32], dg[MAX_T * FFN / 32];
    int32_t sh[MAX_T * D / 16], sa[MAX_T * D / 16], sg[MAX_T * FFN / 16];
} acts;

static layer L[LAYERS];
static qmat w_out;
static float embd[VOCAB * D], out_norm[D];
static uint16_t k_pool[LAYERS][16 * KV_HEADS * HD], v_pool[LAYERS][16 * KV_HEADS * HD];

static void build_model(void) {
    static const int types[LAYERS][3] = {{12, 14, 2}, {8, 13, 3}}; /* attention, FFN down, gate/up */
    for (int l = 0; l < LAYERS; l++) {
        L[l].wq = qmatrix(types[l][0], D, D, 0.1f), L[l].wk = qmatrix(types[l][0], KV_HEADS * HD, D, 0.1f);
        L[l].wv = qmatrix(types[l][0], KV_HEADS * HD, D, 0.1f), L[l].wo = qmatrix(types[l][0], D, D, 0.1f);
        L[l].gate = qmatrix(types[l][2], FFN, D, 0.1f), L[l].up = qmatrix(types[l][2], FFN, D, 0.1f);
        L[l].down = qmatrix(types[l][1], D, FFN, 0.1f);
        for (int i = 0; i < D; i++) L[l].norm1[i] = 1.0f + 0.1f * rnd(), L[l].norm2[i] = 1.0f + 0.1f * rnd();
    }
    w_out = qmatrix(14, VOCAB, D, 0.1f);
    for (int i = 0; i < VOCAB * D; i++) embd[i] = rnd();
    for (int i = 0; i < D; i++) out_norm[i] = 1.0f + 0.1f * rnd();
}

static ly_node node(int64_t op, int64_t i) { return (ly_node){.op = op, .after = i - 1}; }

static ly_node matmul(qmat w, ly_act *a, float *y, float *res, int64_t m, int64_t T, int64_t i) {
    ly_node n = node(LY_OP_MATMUL, i);
    n.p[0] = w.w, n.p[1] = a, n.p[2] = y, n.p[4] = res;
    n.n[0] = w.row_bytes, n.n[1] = w.type, n.n[2] = m, n.n[3] = T;
    return n;
}

/* An activation's two forms over the same buffers: [0] blocks of 32, [1] of 256 (the K-quants'); a
 * quantizing node writes the form its matmuls read (each norm's, quant's or gated node's are of one kind) */
#define FORM(a, w) (&(a)[LY_ACT_BS((w).type) == 256])

/* The nodes of one pass over T tokens at positions pos into nd; returns their count. */
static int64_t pass(acts *s, ly_act ah[2], ly_act aa[2], ly_act ag[2], ly_batch *b, const int32_t *pos, int64_t T,
                    ly_node *nd) {
    int64_t i = 0;
    for (int l = 0; l < LAYERS; l++) {
        ly_node n = node(LY_OP_RMSNORM, i);
        n.p[0] = s->x, n.p[1] = L[l].norm1, n.p[2] = s->h, n.p[3] = FORM(ah, L[l].wq), n.n[0] = T, n.n[1] = D;
        n.f[0] = 1e-5f;
        nd[i] = n, i++;
        nd[i] = matmul(L[l].wq, FORM(ah, L[l].wq), s->q, NULL, D, T, i), i++;
        nd[i] = matmul(L[l].wk, FORM(ah, L[l].wk), s->k, NULL, KV_HEADS * HD, T, i), i++;
        nd[i] = matmul(L[l].wv, FORM(ah, L[l].wv), s->v, NULL, KV_HEADS * HD, T, i), i++;
        for (int kq = 0; kq < 2; kq++) {
            n = node(LY_OP_ROPE, i);
            n.p[0] = kq ? s->k : s->q, n.p[1] = (void *)pos, n.n[0] = T, n.n[1] = kq ? KV_HEADS : HEADS;
            n.n[2] = HD, n.n[3] = HD, n.f[0] = 10000.0f, n.f[1] = 1.0f, n.f[2] = 1.0f;
            nd[i] = n, i++;
        }
        for (int kv = 0; kv < 2; kv++) {
            n = node(LY_OP_KV_WRITE, i);
            n.p[0] = kv ? v_pool[l] : k_pool[l], n.p[1] = kv ? s->v : s->k, n.p[2] = b;
            n.n[0] = KV_HEADS, n.n[1] = HD, n.n[2] = LY_KV_F16;
            nd[i] = n, i++;
        }
        n = node(LY_OP_ATTENTION, i);
        n.p[0] = s->q, n.p[1] = s->att, n.p[2] = k_pool[l], n.p[3] = v_pool[l], n.p[4] = b;
        n.n[0] = HEADS, n.n[1] = KV_HEADS, n.n[2] = HD, n.n[4] = LY_KV_F16 | LY_KV_F16 << 8, n.f[0] = 0.125f;
        nd[i] = n, i++;
        n = node(LY_OP_QUANT, i);
        n.p[0] = FORM(aa, L[l].wo), n.n[0] = T;
        nd[i] = n, i++;
        nd[i] = matmul(L[l].wo, FORM(aa, L[l].wo), s->y, s->x, D, T, i), i++;
        n = node(LY_OP_RMSNORM, i);
        n.p[0] = s->x, n.p[1] = L[l].norm2, n.p[2] = s->h, n.p[3] = FORM(ah, L[l].gate), n.n[0] = T, n.n[1] = D;
        n.f[0] = 1e-5f;
        nd[i] = n, i++;
        nd[i] = matmul(L[l].gate, FORM(ah, L[l].gate), s->g, NULL, FFN, T, i), i++;
        nd[i] = matmul(L[l].up, FORM(ah, L[l].up), s->u, NULL, FFN, T, i), i++;
        n = node(LY_OP_GATED, i);
        n.p[0] = s->g, n.p[1] = s->u, n.p[2] = FORM(ag, L[l].down), n.n[0] = T * FFN, n.n[1] = 0;
        nd[i] = n, i++;
        nd[i] = matmul(L[l].down, FORM(ag, L[l].down), s->y, s->x, D, T, i), i++;
    }
    ly_node n = node(LY_OP_RMSNORM, i);
    n.p[0] = s->x, n.p[1] = out_norm, n.p[2] = s->h, n.p[3] = FORM(ah, w_out), n.n[0] = T, n.n[1] = D;
    n.f[0] = 1e-5f;
    nd[i] = n, i++;
    nd[i] = matmul(w_out, FORM(ah, w_out), s->logits, NULL, VOCAB, T, i), i++;
    return i;
}

static acts s;

/* FNV-1a over the logits of the prompt's tokens, then the decode token's */
static uint64_t run(int nthreads) {
    static const int32_t tokens[MAX_T] = {3, 41, 7, 88, 15, 60, 2, 29}, pages[1] = {0}, seq[MAX_T] = {0};
    static const int32_t pos[MAX_T] = {0, 1, 2, 3, 4, 5, 6, 7};
    uint64_t h = 0xcbf29ce484222325u;
    for (int step = 0; step < 2; step++) {
        int64_t T = step ? 1 : PROMPT, t0 = step ? PROMPT : 0;
        ly_act ah[2] = {{s.qh, s.dh, s.sh, s.h, D, 32}, {s.qh, s.dh, s.sh, s.h, D, 256}};
        ly_act aa[2] = {{s.qa, s.da, s.sa, s.att, D, 32}, {s.qa, s.da, s.sa, s.att, D, 256}};
        ly_act ag[2] = {{s.qg, s.dg, s.sg, s.g, FFN, 32}, {s.qg, s.dg, s.sg, s.g, FFN, 256}};
        ly_batch b = {pos + t0, seq, pages, T, 1, 16, NULL};
        for (int64_t t = 0; t < T; t++) memcpy(s.x + t * D, embd + tokens[t0 + t] * D, D * 4);
        ly_node nd[64];
        if (ly_graph_run(nd, pass(&s, ah, aa, ag, &b, pos + t0, T, nd), nthreads) != -1) exit(1);
        const uint8_t *p = (const uint8_t *)s.logits;
        for (int64_t i = 0; i < T * VOCAB * 4; i++) h = (h ^ p[i]) * 0x100000001b3u;
    }
    return h;
}

int main(int argc, char **argv) {
    build_model();
    for (int p = 0; p < LY_N_PATHS; p++) {
        int asked = argc == 1;
        for (int i = 1; i < argc; i++) asked |= !strcmp(argv[i], PATH_NAMES[p]);
        if (!asked || !ly_can_run(p)) continue;
        ly_init(p);
        for (int nth = 1; nth <= 3; nth += 2) printf("%s, %d thread(s): %016llx\n", PATH_NAMES[p], nth,
                                                      (unsigned long long)run(nth));
    }
    printf("the decode token's first logits: %.9g %.9g %.9g\n", s.logits[0], s.logits[1], s.logits[2]);
    return 0;
}
