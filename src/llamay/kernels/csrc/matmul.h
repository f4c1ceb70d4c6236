/* Quantized matmul interface shared by the per-format kernel files.
 *
 * Activations are quantized once per matmul input into the canonical Q8 form (ly_act): per block of bs
 * values, d = amax / 127 (float32), q = rint(x * (d ? 1/d : 0)) rounded half to even, plus the integer
 * sums of q over each 16-value half (for formats with per-block minimums). bs is 32 for the 32-value
 * formats and 256 for the K-quants (one scale per super-block, so a super-block's integer sums meet one
 * float step: qk.h), LY_ACT_BS(type).
 *
 * A tile function computes y[t * ldy + r] for tokens t in [t0, t1) and weight rows r in [r0, r1). Its
 * result for each (t, r) must not depend on the tile bounds: one canonical float sequence per element,
 * blocks accumulated in index order into one float32 accumulator starting at 0.0f. */
#ifndef LLAMAY_MATMUL_H
#define LLAMAY_MATMUL_H
#include "common.h"

typedef struct {
    const int8_t *q;    /* [n_tokens, k] */
    const float *d;     /* [n_tokens, k / bs] */
    const int32_t *s16; /* [n_tokens, k / 16]: sum of q over each 16-value half-block */
    const float *x;     /* [n_tokens, k] the float input (for F32/F16/BF16 weights) */
    int64_t k;
    int64_t bs;         /* values per scale d: 32, or 256 for the K-quants */
} ly_act;

/* The activation block a weight type's tiles read: the K-quants' (Q2_K .. Q6_K, type ids 10 .. 14) 256 */
#define LY_ACT_BS(type) (((type) & 0xff) >= 10 && ((type) & 0xff) <= 14 ? 256 : 32)

/* Quantizes rows [lo, hi) of a->x into a (act.c); the fused norm and activation nodes call it per row. */
void ly_quant_rows(const ly_act *a, int64_t lo, int64_t hi);

typedef void (*ly_tile_fn)(const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1,
                           const ly_act *a, int64_t t0, int64_t t1, float *y, int64_t ldy);
/* A type's tile in the current path: ly_tile(type) (kernels.h). */
#endif
