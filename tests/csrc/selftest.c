/* The C core's self-test, without Python: every kernel-table path this CPU runs (or those named on the
 * command line) against the portable path, byte for byte, on seeded random inputs. Tiles run as graph
 * MATMUL nodes at 1, 2 and 3 threads (a path's x16 tiles on the weights repacked, against the portable
 * GGML tile); the other entries are called straight from the table. Built with
 * the core's sources by scripts/cross_test.sh (natively, and cross-built for arm64 to run under qemu).
 * Prints what it compared per path; exits 1 on any difference, 2 on a path this CPU cannot run. */
#include "../../src/llamay/kernels/csrc/graph.h"
#include "../../src/llamay/kernels/csrc/kernels.h"
#include "../../src/llamay/kernels/csrc/kvtypes.h"
#include <stdio.h>
#include <stdlib.h>

LY_API int ly_init(int path);
LY_API int ly_can_run(int path);
LY_API int64_t ly_quantize_rows(int type, const void *src, int src_type, void *dst, int64_t nrows,
                                int64_t n_per_row, const float *imatrix, int nthreads);
LY_API void ly_quantize_act(const float *x, int64_t n, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16,
                            int nthreads);
LY_API int64_t ly_graph_run(const ly_node *nodes, int64_t n_nodes, int nthreads);
LY_API int ly_x16_repack(int type, const uint8_t *w, size_t row_bytes, int64_t m, uint8_t *out, int nthreads);

static const char *PATH_NAMES[LY_N_PATHS] = {"portable", "avx2", "avxvnni", "avx512", "neon", "dotprod", "i8mm"};
static const char *TYPE_NAMES[LY_N_TYPES] = {
    [0] = "F32", [1] = "F16", [2] = "Q4_0", [3] = "Q4_1", [6] = "Q5_0", [7] = "Q5_1", [8] = "Q8_0",
    [10] = "Q2_K", [11] = "Q3_K", [12] = "Q4_K", [13] = "Q5_K", [14] = "Q6_K", [16] = "IQ2_XXS",
    [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S", [22] = "IQ2_S",
    [23] = "IQ4_XS", [29] = "IQ1_M", [30] = "BF16", [34] = "TQ1_0", [35] = "TQ2_0", [39] = "MXFP4"};

enum { K = 512, M = 70 };           /* a matmul's inner size and rows: 4 full 16-row groups and a part */
static const int N_TOKENS[] = {1, 2, 5}; /* one (decode), a pair (smmla), an odd count past the 4 of x86 */

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float rnd(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(int64_t)(rng >> 40) / (float)(1 << 23) - 1.0f;
}
static float *rnd_floats(int64_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = rnd() * scale;
    return x;
}

static int n_diff, n_cmp; /* differences and comparisons for the current path */
static char names[64][64]; /* the kernels compared, in order; bad[i]: kernel i differed */
static int n_names, bad[64];

static void note(const char *what, int same) {
    int i = 0;
    while (i < n_names && strcmp(names[i], what)) i++;
    if (i == n_names && n_names < 64) snprintf(names[n_names++], sizeof names[0], "%s", what);
    n_cmp++;
    if (!same) n_diff++, bad[i] = 1;
}

/* ---- tiles: one MATMUL node over M rows, n tokens, at 1..3 threads ---- */
static void matmul(const uint8_t *w, size_t row_bytes, int type, const ly_act *a, int64_t n, float *y, int nth) {
    ly_node nd = {.op = LY_OP_MATMUL, .p = {(void *)w, (void *)a, y}, .n = {(int64_t)row_bytes, type, M, n},
                  .after = -1};
    ly_graph_run(&nd, 1, nth);
}

/* Formats the quantizer does not write: random bytes with finite scales (q32.h's layouts). */
static const struct { int type, size, elems; } RANDOM_BLOCKS[] = {{20, 18, 32}, {23, 136, 256}, {39, 17, 32}};

static int64_t random_blocks(int type, uint8_t *w) {
    for (size_t f = 0; f < sizeof RANDOM_BLOCKS / sizeof RANDOM_BLOCKS[0]; f++) {
        if (RANDOM_BLOCKS[f].type != type) continue;
        int64_t nblk = (int64_t)M * K / RANDOM_BLOCKS[f].elems, size = RANDOM_BLOCKS[f].size;
        for (int64_t i = 0; i < nblk * size; i++) w[i] = (uint8_t)(rnd() * 128.0f + 128.0f);
        for (int64_t i = 0; i < nblk; i++) {
            uint8_t *blk = w + i * size;
            uint16_t h = ly_f32_to_f16(rnd() * 0.05f);
            if (type == 39) blk[0] = (uint8_t)(120 + (int)(rnd() * 8.0f)); /* MXFP4: e8m0 near 2^-8 */
            else memcpy(blk, &h, 2);
        }
        return nblk * size;
    }
    return -1;
}

/* M rows of weights of `type`: random floats by the library's quantizer, F32 copied, else random_blocks */
static uint8_t *weights(int type, size_t *row_bytes) {
    float *src = rnd_floats((int64_t)M * K, 1.0f);
    uint8_t *w = malloc((size_t)M * K * 4);
    int64_t bytes = type == 0 ? (memcpy(w, src, (size_t)M * K * 4), (int64_t)M * K * 4)
                              : ly_quantize_rows(type, src, 0, w, M, K, NULL, 1);
    if (bytes < 0) bytes = random_blocks(type, w);
    free(src);
    if (bytes < 0) { free(w); return NULL; }
    *row_bytes = (size_t)(bytes / M);
    return w;
}

static void check_tiles(int path, const ly_kernel_table *own, const ly_kernel_table *base) {
    int64_t nmax = 5;
    float *x = rnd_floats(nmax * K, 2.0f), *want = malloc(nmax * M * 4), *got = malloc(nmax * M * 4);
    int8_t *q = malloc(2 * nmax * K);
    float *d = malloc(2 * nmax * K / 32 * 4);
    int32_t *s16 = malloc(2 * nmax * K / 16 * 4);
    ly_act forms[2] = {{q, d, s16, x, K, 32}, {q + nmax * K, d + nmax * K / 32, s16 + nmax * K / 16, x, K, 256}};
    for (int f = 0; f < 2; f++)
        ly_quantize_act(x, nmax, K, forms[f].bs, (int8_t *)forms[f].q, (float *)forms[f].d, (int32_t *)forms[f].s16, 1);
    for (int type = 0; type < LY_N_TYPES; type++) {
        int own_tile = base->tile[type] && own->tile[type] != base->tile[type];
        int own_x16 = own->tile_x16[type] && own->tile_x16[type] != base->tile_x16[type];
        if (!own_tile && !own_x16) continue; /* the path has no tile of its own for the type */
        size_t rb;
        uint8_t *w = weights(type, &rb), *w16 = NULL;
        if (!w) { printf("  (no quantizer for %s: not compared)\n", TYPE_NAMES[type]); continue; }
        if (own_x16) { /* the same rows in the x16 layout: its tiles must give the GGML tile's bits */
            w16 = malloc((M + 15) / 16 * 16 * rb);
            ly_x16_repack(type, w, rb, M, w16, 1);
        }
        for (size_t i = 0; i < sizeof N_TOKENS / sizeof N_TOKENS[0]; i++) {
            int64_t n = N_TOKENS[i];
            ly_init(LY_PATH_PORTABLE);
            const ly_act *a = &forms[LY_ACT_BS(type) == 256];
            matmul(w, rb, type, a, n, want, 1);
            ly_init(path);
            for (int nth = 1; nth <= 3; nth++)
                for (int x16 = !own_tile; x16 <= own_x16; x16++) {
                    memset(got, 0xff, n * M * 4);
                    matmul(x16 ? w16 : w, rb, x16 ? type | LY_X16 : type, a, n, got, nth);
                    char what[64];
                    snprintf(what, sizeof what, "%s:%s", x16 ? "x16" : "tile", TYPE_NAMES[type] ? TYPE_NAMES[type] : "?");
                    note(what, memcmp(want, got, n * M * 4) == 0);
                }
        }
        free(w), free(w16);
    }
    free(x), free(want), free(got), free(q), free(d), free(s16);
}

/* ---- attention: one ATTENTION node over a paged pool (pages out of order), at 1..3 threads ---- */
typedef struct { int64_t n_head, n_kv_head, d, window; float softcap; int sinks, kt, vt; } att_case;

static const att_case ATT_CASES[] = {
    {8, 2, 64, 0, 0.0f, 0, LY_KV_F16, LY_KV_F16}, {6, 2, 32, 5, 30.0f, 1, LY_KV_F16, LY_KV_F16},
    {8, 1, 48, 0, 0.0f, 1, LY_KV_F16, LY_KV_F16}, {4, 4, 64, 0, 0.0f, 0, LY_KV_F16, LY_KV_F16},
    {4, 2, 40, 0, 0.0f, 0, LY_KV_F32, LY_KV_F16}, {4, 2, 64, 9, 20.0f, 1, LY_KV_Q8, LY_KV_Q8},
    {2, 1, 96, 0, 0.0f, 0, LY_KV_F16, LY_KV_Q8},  {2, 2, 36, 0, 0.0f, 0, LY_KV_F32, LY_KV_F32},
};

static uint8_t *kv_pool(int type, int64_t slots, int64_t heads, int64_t d) {
    int64_t hb = ly_kv_head_bytes(type, d);
    uint8_t *pool = malloc(slots * heads * hb);
    float *x = rnd_floats(d, 1.0f);
    for (int64_t i = 0; i < slots * heads; i++) {
        for (int64_t j = 0; j < d; j++) x[j] = rnd();
        ly_kv_store(type, pool + i * hb, x, d);
    }
    free(x);
    return pool;
}

static void check_attention(int path) {
    static const int32_t pages[4] = {2, 0, 3, 1}, pos[2][4] = {{37, 0, 0, 0}, {20, 21, 22, 23}};
    static const int32_t seq[4] = {0, 0, 0, 0};
    for (size_t c = 0; c < sizeof ATT_CASES / sizeof ATT_CASES[0]; c++) {
        const att_case *ac = &ATT_CASES[c];
        uint8_t *kp = kv_pool(ac->kt, 64, ac->n_kv_head, ac->d), *vp = kv_pool(ac->vt, 64, ac->n_kv_head, ac->d);
        float *q = rnd_floats(4 * ac->n_head * ac->d, 1.0f), *sinks = rnd_floats(ac->n_head, 2.0f);
        size_t out = 4 * ac->n_head * ac->d * sizeof(float);
        float *want = malloc(out), *got = malloc(out);
        for (int prefill = 0; prefill < 2; prefill++) {
            ly_batch b = {pos[prefill], seq, pages, prefill ? 4 : 1, 4, 16, NULL};
            ly_node nd = {.op = LY_OP_ATTENTION, .p = {q, want, kp, vp, &b, ac->sinks ? sinks : NULL},
                          .n = {ac->n_head, ac->n_kv_head, ac->d, ac->window, ac->kt | ac->vt << 8},
                          .f = {0.125f, ac->softcap}, .after = -1};
            ly_init(LY_PATH_PORTABLE);
            ly_graph_run(&nd, 1, 1);
            ly_init(path);
            nd.p[1] = got;
            for (int nth = 1; nth <= 3; nth++) {
                memset(got, 0xff, out);
                ly_graph_run(&nd, 1, nth);
                char what[64];
                snprintf(what, sizeof what, "attention:%s/%s", ac->kt == 0 ? "f32" : ac->kt == 1 ? "f16" : "q8",
                         ac->vt == 0 ? "f32" : ac->vt == 1 ? "f16" : "q8");
                note(what, memcmp(want, got, b.n_tokens * ac->n_head * ac->d * sizeof(float)) == 0);
            }
        }
        free(kp), free(vp), free(q), free(sinks), free(want), free(got);
    }
}

/* ---- the other entries, called straight from the two tables ---- */
#define SAME(what, a, b, bytes) note(what, memcmp(a, b, bytes) == 0)

static void check_reductions(const ly_kernel_table *own, const ly_kernel_table *base) {
    static const int64_t D[] = {1, 7, 8, 67, 256, 1000};
    for (size_t i = 0; i < sizeof D / sizeof D[0]; i++) {
        float *x = rnd_floats(D[i], 3.0f), a, b;
        if (own->sum != base->sum) { a = base->sum(x, D[i]); b = own->sum(x, D[i]); SAME("sum", &a, &b, 4); }
        if (own->sumsq != base->sumsq) { a = base->sumsq(x, D[i]); b = own->sumsq(x, D[i]); SAME("sumsq", &a, &b, 4); }
        free(x);
    }
}

static void check_elementwise(const ly_kernel_table *own, const ly_kernel_table *base) {
    const int64_t n = 300;
    float *g = rnd_floats(n, 12.0f), *up = rnd_floats(n, 12.0f), *x = malloc(n * 4), *y = malloc(n * 4);
    static const float edges[] = {100.0f, -100.0f, 0.0f, -0.0f, 1e-30f, -1e-30f, 7.0f, -7.0f, 0.1f, -0.6f, 3e4f};
    memcpy(g + 10, edges, sizeof edges); /* exp's clamps, signed zeros, the clamps at 7 and 10 */
    for (int act = 0; act <= 5 && own->gated != base->gated; act++)
        for (int with_up = 0; with_up < 2; with_up++) {
            if (act == 2 && !with_up) continue; /* gpt-oss's is gated only */
            memcpy(x, g, n * 4), memcpy(y, g, n * 4);
            base->gated(x, with_up ? up : NULL, 3, n - 2, act);
            own->gated(y, with_up ? up : NULL, 3, n - 2, act);
            SAME("gated", x, y, n * 4);
        }
    if (own->softcap != base->softcap) {
        memcpy(x, g, n * 4), memcpy(y, g, n * 4);
        base->softcap(x, 1, n, 5.0f);
        own->softcap(y, 1, n, 5.0f);
        SAME("softcap", x, y, n * 4);
    }
    if (own->quant_row != base->quant_row) {
        int8_t q[2][288];
        float d[2][9];
        int32_t s[2][18];
        g[5] = 0.0f, g[40] = -12.0f; /* an exact amax */
        for (int i = 0; i < 32; i++) g[64 + i] = 0.0f; /* an all-zero block */
        for (int bs = 32; bs <= 256; bs *= 8) { /* the 32-value formats' blocks (288 values), the K-quants' (256) */
            int64_t k = bs == 32 ? 288 : 256;
            base->quant_row(g, k, bs, q[0], d[0], s[0]);
            own->quant_row(g, k, bs, q[1], d[1], s[1]);
            note(bs == 32 ? "quant_row" : "quant_row 256", !memcmp(q[0], q[1], k) && !memcmp(d[0], d[1], k / bs * 4)
                                                              && !memcmp(s[0], s[1], k / 16 * 4));
        }
    }
    free(g), free(up), free(x), free(y);
}

static void check_kv(const ly_kernel_table *own, const ly_kernel_table *base) {
    static const int64_t D[] = {32, 40, 64, 100, 128};
    for (int type = 0; type < 3; type++)
        for (size_t i = 0; i < sizeof D / sizeof D[0]; i++) {
            int64_t d = D[i];
            if (type == LY_KV_Q8 && d % 32) continue;
            uint8_t *k = kv_pool(type, 1, 1, d);
            float *a = rnd_floats(d, 1.0f), *o1 = rnd_floats(d, 1.0f), *o2 = malloc(d * 4), r1, r2;
            if (own->kv_dot != base->kv_dot) {
                r1 = base->kv_dot(type, a, k, d), r2 = own->kv_dot(type, a, k, d);
                SAME("kv_dot", &r1, &r2, 4);
            }
            if (own->kv_acc != base->kv_acc) {
                memcpy(o2, o1, d * 4);
                base->kv_acc(type, o1, 0.37f, k, d);
                own->kv_acc(type, o2, 0.37f, k, d);
                SAME("kv_acc", o1, o2, d * 4);
            }
            free(k), free(a), free(o1), free(o2);
        }
}

/* The selective scan's Mamba2 row (37 states: whole vectors and a tail) and Mamba1 columns (channels [2, 69) of
 * 70: a partial vector at the end), dt spanning softplus's both sides of 20. */
static void check_scan(const ly_kernel_table *own, const ly_kernel_table *base) {
    const int64_t N = 37, H = 70;
    float *B = rnd_floats(N, 1.0f), *C = rnd_floats(N, 1.0f), *s0 = rnd_floats(N * H, 1.0f), *A = rnd_floats(N * H, 1.0f);
    float *x = rnd_floats(H, 1.0f), *dt = rnd_floats(H, 12.0f), *dtb = rnd_floats(H, 12.0f), *D = rnd_floats(H, 1.0f);
    float *s1 = malloc(N * H * 4), *s2 = malloc(N * H * 4), y1[70] = {0}, y2[70] = {0};
    for (int64_t i = 0; i < N * H; i++) A[i] = -1.0f - A[i] * A[i];
    if (own->ssm_row != base->ssm_row) {
        memcpy(s1, s0, N * 4), memcpy(s2, s0, N * 4);
        float r1 = base->ssm_row(s1, B, C, 0.93f, -0.4f, N), r2 = own->ssm_row(s2, B, C, 0.93f, -0.4f, N);
        note("ssm_row", !memcmp(&r1, &r2, 4) && !memcmp(s1, s2, N * 4));
    }
    if (own->ssm_cols != base->ssm_cols) {
        memcpy(s1, s0, N * H * 4), memcpy(s2, s0, N * H * 4);
        base->ssm_cols(s1, A, B, C, x, dt, dtb, D, y1, 2, H - 1, H, N);
        own->ssm_cols(s2, A, B, C, x, dt, dtb, D, y2, 2, H - 1, H, N);
        note("ssm_cols", !memcmp(y1, y2, sizeof y1) && !memcmp(s1, s2, N * H * 4));
    }
    free(B), free(C), free(s0), free(A), free(x), free(dt), free(dtb), free(D), free(s1), free(s2);
}

static void check_recurrent(const ly_kernel_table *own, const ly_kernel_table *base) {
    const int64_t C = 70, Kt = 4, dk = 24, dv = 40;
    float *w = rnd_floats(Kt * C, 1.0f), *x = rnd_floats(C, 1.0f), *bias = rnd_floats(C, 1.0f);
    float *s0 = rnd_floats((Kt - 1) * C, 1.0f), *s1 = malloc((Kt - 1) * C * 4), *s2 = malloc((Kt - 1) * C * 4);
    float y1[70], y2[70];
    if (own->conv_row != base->conv_row)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            memcpy(s1, s0, (Kt - 1) * C * 4), memcpy(s2, s0, (Kt - 1) * C * 4);
            base->conv_row(w, s1, x, y1, with_bias ? bias : NULL, 2, C - 1, C, Kt);
            own->conv_row(w, s2, x, y2, with_bias ? bias : NULL, 2, C - 1, C, Kt);
            note("conv_row", !memcmp(y1 + 2, y2 + 2, (C - 3) * 4) && !memcmp(s1, s2, (Kt - 1) * C * 4));
        }
    float *S0 = rnd_floats(dk * dv, 1.0f), *S1 = malloc(dk * dv * 4), *S2 = malloc(dk * dv * 4);
    float *k = rnd_floats(dk, 1.0f), *kn = rnd_floats(dk, 1.0f), *q = rnd_floats(dk, 1.0f), *dl = rnd_floats(dv, 1.0f);
    float *d1 = rnd_floats(dk, 0.1f), *d2 = rnd_floats(dk, 0.1f); /* each state row's decay */
    for (int64_t i = 0; i < dk; i++) d1[i] += 0.85f, d2[i] += 0.75f;
    float kv1[40], kv2[40], o1[40], o2[40];
    if (own->delta_pass1 != base->delta_pass1) {
        memcpy(S1, S0, dk * dv * 4), memcpy(S2, S0, dk * dv * 4);
        base->delta_pass1(S1, k, d1, kv1, dk, dv);
        own->delta_pass1(S2, k, d1, kv2, dk, dv);
        note("delta_pass1", !memcmp(S1, S2, dk * dv * 4) && !memcmp(kv1, kv2, sizeof kv1));
    }
    for (int fused = 0; fused < 2 && own->delta_pass2 != base->delta_pass2; fused++) {
        memcpy(S1, S0, dk * dv * 4), memcpy(S2, S0, dk * dv * 4);
        base->delta_pass2(S1, k, dl, q, o1, fused ? kn : NULL, d2, kv1, dk, dv);
        own->delta_pass2(S2, k, dl, q, o2, fused ? kn : NULL, d2, kv2, dk, dv);
        note("delta_pass2", !memcmp(S1, S2, dk * dv * 4) && !memcmp(o1, o2, sizeof o1)
                                && (!fused || !memcmp(kv1, kv2, sizeof kv1)));
    }
    free(w), free(x), free(bias), free(s0), free(s1), free(s2), free(S0), free(S1), free(S2);
    free(k), free(kn), free(q), free(dl), free(d1), free(d2);
    check_scan(own, base);
}

static int path_of(const char *name) {
    for (int p = 0; p < LY_N_PATHS; p++)
        if (!strcmp(name, PATH_NAMES[p])) return p;
    return -1;
}

/* Compares one path with portable; returns its differences. */
static int check_path(int path) {
    n_diff = n_cmp = n_names = 0;
    memset(bad, 0, sizeof bad);
    ly_init(LY_PATH_PORTABLE);
    const ly_kernel_table *base = ly_kernels;
    ly_init(path);
    const ly_kernel_table *own = ly_kernels;
    check_reductions(own, base);
    check_elementwise(own, base);
    check_kv(own, base);
    check_recurrent(own, base);
    check_tiles(path, own, base);
    check_attention(path);
    printf("%s vs portable, %d comparisons of %d kernels:", PATH_NAMES[path], n_cmp, n_names);
    for (int i = 0; i < n_names; i++) printf(" %s%s", names[i], bad[i] ? "(DIFFERENT)" : "");
    printf("\n%s: %s\n", PATH_NAMES[path], n_diff ? "DIFFERENT" : "identical");
    return n_diff;
}

static void print_paths(void) {
    printf("paths this CPU runs:");
    for (int p = 0; p < LY_N_PATHS; p++)
        if (ly_can_run(p)) printf(" %s", PATH_NAMES[p]);
    printf("\n");
}

/* selftest [--paths | path ...]: --paths lists the paths this CPU runs; no argument: check them all */
int main(int argc, char **argv) {
    int paths[LY_N_PATHS], n = 0, n_bad = 0;
    print_paths();
    if (argc == 2 && !strcmp(argv[1], "--paths")) return 0;
    for (int i = 1; i < argc; i++) {
        int p = path_of(argv[i]);
        if (p < 0 || !ly_can_run(p)) {
            printf("%s: not a path this CPU runs\n", argv[i]);
            return 2;
        }
        paths[n++] = p;
    }
    for (int p = 1; argc == 1 && p < LY_N_PATHS; p++)
        if (ly_can_run(p)) paths[n++] = p;
    for (int i = 0; i < n; i++) n_bad += check_path(paths[i]) != 0;
    if (n_bad) printf("%d path(s) differ from portable\n", n_bad);
    return n_bad ? 1 : 0;
}
