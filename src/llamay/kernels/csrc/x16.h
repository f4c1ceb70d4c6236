/* Row-interleaved weights ("x16"): a matrix's rows regrouped 16 at a time, so that one contiguous stream
 * feeds 16 rows, one per 32-bit lane, with no transposes or gathers at run time (a GGML row-major matrix
 * is 16 strided streams for a 16-row tile). Built once at load by ly_x16_repack for the types whose x16
 * tiles the path has; a matmul passes the type as type | LY_X16. Every x16 tile gives the same bits as the
 * type's GGML tile: the layouts only move bytes, and the kernels keep q32.h's and qk.h's sequences.
 *
 * Group g holds rows 16g .. 16g + 15 (past m, the last row repeated) in the bytes the 16 rows would take,
 * [16 g row_bytes, 16 (g + 1) row_bytes). A row's bytes are cut into units (a 32-block, or a K-quant
 * superblock) and each unit into pieces; piece p of every unit goes to region p of the group, unit after
 * unit. A piece of len bytes at offset `at` of a unit, in elements of es bytes, is stored column-wise:
 * element e of row i at (e * 16 + i) * es of the unit's part of the region. With es = 4 that is the
 * "T-form": 64-byte vector e holds in lane i the 4 bytes 4e .. 4e + 3 of row i.
 *   Q4_0 (18): qs (2, 16, es 4: 4 vectors) | d (0, 2, es 2: 16 f16)
 *   Q8_0 (34): qs (2, 32, es 4: 8 vectors) | d (0, 2, es 2)
 *   Q4_K (144): qs (16, 128, es 4: 32 vectors) | d, dmin (0, 4, es 2: [2][16] f16) | scales (4, 12, es 4)
 *   Q6_K (210): ql (0, 128, es 4) | qh (128, 64, es 4) | scales (192, 16, es 1: [16][16] int8) | d (208, 2, es 2)
 *   Q4_1 (20): qs (4, 16, es 4) | d, m (0, 4, es 2: [2][16] f16)
 *   Q5_0 (22): qs (6, 16, es 4) | qh (2, 4, es 4: 1 vector, lane i = row i's qh) | d (0, 2, es 2)
 *   Q5_1 (24): qs (8, 16, es 4) | qh (4, 4, es 4) | d, m (0, 4, es 2)
 *   IQ4_NL (18): as Q4_0
 *   Q5_K (176): qs (48, 128, es 4) | qh (16, 32, es 4: 8 vectors) | d, dmin (0, 4, es 2) | scales (4, 12, es 4)
 * Region starts are 64-byte aligned in a group whenever the group is (all regions' unit sizes are
 * multiples of 32, and of 64 for an even unit count). */
#ifndef LLAMAY_X16_H
#define LLAMAY_X16_H
#include "matmul.h"

#define LY_X16 0x100 /* type | LY_X16: the type's blocks in the x16 layout */
#define X16_ROWS 16

typedef struct { int at, len, es; } x16_piece;

typedef struct {
    int type, unit_bytes, unit_values, n_pieces;
    x16_piece piece[4];
} x16_layout;

/* NULL for a type without an x16 layout */
const x16_layout *ly_x16_layout(int type);

/* Byte offset of region p in a group of n_units units */
static inline int64_t x16_region(const x16_layout *l, int p, int64_t n_units) {
    int64_t off = 0;
    for (int i = 0; i < p; i++) off += (int64_t)l->piece[i].len * X16_ROWS * n_units;
    return off;
}
#endif
