/* x16 layouts (x16.h): repacking at load, the way back, and the portable x16 tiles, which rebuild a
 * group's GGML rows and run the path's GGML tile on them (so a path without x16 tiles of its own still
 * reads repacked weights, with the same bits). */
#include "x16.h"
#include "kernels.h"
#include "pool.h"
#include "qk.h"
#include "q32.h"
#include <stdlib.h>

static const x16_layout LAYOUTS[] = {
    {LY_Q4_0, 18, 32, 2, {{2, 16, 4}, {0, 2, 2}}},
    {LY_Q8_0, 34, 32, 2, {{2, 32, 4}, {0, 2, 2}}},
    {QK_Q4_K, 144, 256, 3, {{16, 128, 4}, {0, 4, 2}, {4, 12, 4}}},
    {QK_Q6_K, 210, 256, 4, {{0, 128, 4}, {128, 64, 4}, {192, 16, 1}, {208, 2, 2}}},
    {LY_Q4_1, 20, 32, 2, {{4, 16, 4}, {0, 4, 2}}},
    {LY_Q5_0, 22, 32, 3, {{6, 16, 4}, {2, 4, 4}, {0, 2, 2}}},
    {LY_Q5_1, 24, 32, 3, {{8, 16, 4}, {4, 4, 4}, {0, 4, 2}}},
    {LY_IQ4_NL, 18, 32, 2, {{2, 16, 4}, {0, 2, 2}}},
    {QK_Q5_K, 176, 256, 4, {{48, 128, 4}, {16, 32, 4}, {0, 4, 2}, {4, 12, 4}}},
};

const x16_layout *ly_x16_layout(int type) {
    for (size_t i = 0; i < sizeof LAYOUTS / sizeof LAYOUTS[0]; i++)
        if (LAYOUTS[i].type == type) return &LAYOUTS[i];
    return NULL;
}

/* Element e of a piece of each row <-> position (e * 16 + i) * es of its column-wise part; es a literal in
 * each call (a constant-size copy, not a call per element). */
static inline void move_piece(uint8_t *part, uint8_t *const src[X16_ROWS], int n_rows, int n_el, int es, int back) {
    for (int i = 0; i < n_rows; i++)
        for (int e = 0; e < n_el; e++) {
            uint8_t *col = part + ((int64_t)e * X16_ROWS + i) * es, *row = src[i] + e * es;
            if (back) memcpy(row, col, es);
            else memcpy(col, row, es);
        }
}

/* Group `grp` <-> its 16 rows (rows[i]: row i's bytes; back = 0: rows -> group, 1: group -> rows, where
 * only the first n_valid rows are written). */
static void move_group(const x16_layout *l, uint8_t *grp, uint8_t *const rows[X16_ROWS], int n_valid,
                       int64_t n_units, int back) {
    const int n_rows = back ? n_valid : X16_ROWS;
    for (int p = 0; p < l->n_pieces; p++) {
        const x16_piece pc = l->piece[p];
        uint8_t *region = grp + x16_region(l, p, n_units);
        for (int64_t u = 0; u < n_units; u++) {
            uint8_t *part = region + u * (int64_t)pc.len * X16_ROWS, *src[X16_ROWS];
            for (int i = 0; i < n_rows; i++) src[i] = rows[i] + u * l->unit_bytes + pc.at;
            switch (pc.es) {
            case 1: move_piece(part, src, n_rows, pc.len, 1, back); break;
            case 2: move_piece(part, src, n_rows, pc.len / 2, 2, back); break;
            default: move_piece(part, src, n_rows, pc.len / 4, 4, back); break;
            }
        }
    }
}

typedef struct {
    const x16_layout *l;
    const uint8_t *w;
    uint8_t *out;
    size_t row_bytes;
    int64_t m, groups;
} repack_job;

static void repack_part(void *arg, int ith, int nth) {
    const repack_job *j = arg;
    int64_t lo = j->groups * ith / nth, hi = j->groups * (ith + 1) / nth;
    for (int64_t g = lo; g < hi; g++) {
        uint8_t *rows[X16_ROWS];
        for (int i = 0; i < X16_ROWS; i++) {
            int64_t r = g * X16_ROWS + i < j->m ? g * X16_ROWS + i : j->m - 1;
            rows[i] = (uint8_t *)j->w + r * j->row_bytes;
        }
        move_group(j->l, j->out + g * X16_ROWS * j->row_bytes, rows, X16_ROWS,
                   (int64_t)j->row_bytes / j->l->unit_bytes, 0);
    }
}

/* m rows of row_bytes -> out, ceil(m / 16) * 16 * row_bytes bytes. Returns 0, or -1 for a type without
 * an x16 layout. */
LY_API int ly_x16_repack(int type, const uint8_t *w, size_t row_bytes, int64_t m, uint8_t *out, int nthreads) {
    const x16_layout *l = ly_x16_layout(type);
    if (!l || row_bytes % l->unit_bytes) return -1;
    repack_job j = {l, w, out, row_bytes, m, (m + X16_ROWS - 1) / X16_ROWS};
    ly_parallel(repack_part, &j, nthreads < 1 ? 1 : nthreads);
    return 0;
}

/* The way back: x16 bytes of m rows -> the m GGML rows. Returns 0, or -1 as ly_x16_repack. */
LY_API int ly_x16_unpack(int type, const uint8_t *x, size_t row_bytes, int64_t m, uint8_t *rows_out) {
    const x16_layout *l = ly_x16_layout(type);
    if (!l || row_bytes % l->unit_bytes) return -1;
    for (int64_t g = 0; g * X16_ROWS < m; g++) {
        uint8_t *rows[X16_ROWS];
        int n_valid = m - g * X16_ROWS < X16_ROWS ? (int)(m - g * X16_ROWS) : X16_ROWS;
        for (int i = 0; i < X16_ROWS; i++) rows[i] = rows_out + (g * X16_ROWS + (i < n_valid ? i : 0)) * row_bytes;
        move_group(l, (uint8_t *)x + g * X16_ROWS * row_bytes, rows, n_valid, (int64_t)row_bytes / l->unit_bytes, 1);
    }
    return 0;
}

/* Rows [r0, r1) (r0 a multiple of 16: the matmul driver's shares are whole groups) through the path's
 * GGML tile of the type, one rebuilt group at a time. */
static void tile_via_rows(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                          int64_t t0, int64_t t1, float *y, int64_t ldy) {
    const x16_layout *l = ly_x16_layout(type);
    ly_tile_fn tile = ly_tile(type);
    uint8_t *scratch = malloc(X16_ROWS * row_bytes);
    for (int64_t r = r0; r < r1; r += X16_ROWS) {
        int n_valid = r1 - r < X16_ROWS ? (int)(r1 - r) : X16_ROWS;
        uint8_t *rows[X16_ROWS];
        for (int i = 0; i < X16_ROWS; i++) rows[i] = scratch + i * row_bytes;
        move_group(l, (uint8_t *)w + r * row_bytes, rows, n_valid, (int64_t)row_bytes / l->unit_bytes, 1);
        tile(scratch, row_bytes, 0, n_valid, a, t0, t1, y + r, ldy);
    }
    free(scratch);
}

#define VIA_ROWS(NAME, TYPE)                                                                               \
    static void NAME(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a, int64_t t0,     \
                     int64_t t1, float *y, int64_t ldy) {                                                  \
        tile_via_rows(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                             \
    }
VIA_ROWS(q4_0_via_rows, LY_Q4_0)
VIA_ROWS(q8_0_via_rows, LY_Q8_0)
VIA_ROWS(q4k_via_rows, QK_Q4_K)
VIA_ROWS(q6k_via_rows, QK_Q6_K)
VIA_ROWS(q4_1_via_rows, LY_Q4_1)
VIA_ROWS(q5_0_via_rows, LY_Q5_0)
VIA_ROWS(q5_1_via_rows, LY_Q5_1)
VIA_ROWS(iq4_nl_via_rows, LY_IQ4_NL)
VIA_ROWS(q5k_via_rows, QK_Q5_K)

ly_tile_fn ly_tiles_x16_portable(int type) {
    switch (type) {
    case LY_Q4_0: return q4_0_via_rows;
    case LY_Q8_0: return q8_0_via_rows;
    case QK_Q4_K: return q4k_via_rows;
    case QK_Q6_K: return q6k_via_rows;
    case LY_Q4_1: return q4_1_via_rows;
    case LY_Q5_0: return q5_0_via_rows;
    case LY_Q5_1: return q5_1_via_rows;
    case LY_IQ4_NL: return iq4_nl_via_rows;
    case QK_Q5_K: return q5k_via_rows;
    default: return NULL;
    }
}
