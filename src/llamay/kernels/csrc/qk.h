/* K-quant super-blocks (256 weights) decoded into one shape that the portable and AVX2 tiles share.
 *
 * Weight value i of a super-block is q[i] - off, with q unsigned (0..63) and off 0 (Q2_K, Q4_K, Q5_K),
 * 4 (Q3_K) or 32 (Q6_K). Each 16-value sub-block h has an integer scale sc[h] and a correction multiplier
 * cm[h]: the sub-block minimum for the formats with dmin, off * sc[h] for the others. The activations come
 * with one scale dx per super-block (ly_act bs = 256; x: int8 activations, s16: their 16-value sums):
 *   raw  = sum over h of sc[h] * dot16(q, x)[h]      (exact int32: |raw| < 2^29 for every format)
 *   corr = sum over h of cm[h] * s16[h]              (exact int32)
 * so a path may add a super-block's integer terms in any order. The canonical float step, one per format
 * and super-block, accumulated over super-blocks in index order from acc = 0.0f:
 *   Q2_K, Q4_K, Q5_K: acc = acc + ((d * dx) * (float)raw - (dmin * dx) * (float)corr)
 *   Q3_K, Q6_K:       acc = acc + (d * dx) * (float)(raw - corr)   (= the dot with the signed values)
 * where d, dmin are the super-block's f16 scales. For Q4_K and Q5_K (one scale and min per 32 values) sc and
 * cm hold each value twice, which gives the same integers. */
#ifndef LLAMAY_QK_H
#define LLAMAY_QK_H
#include "matmul.h"

enum { QK_Q2_K = 10, QK_Q3_K = 11, QK_Q4_K = 12, QK_Q5_K = 13, QK_Q6_K = 14 };

typedef struct {
    int16_t sc[16], cm[16];
    float d, dmin;
} qk_scales;

typedef struct {
    int type, type_size, has_min;
    void (*scales)(const uint8_t *blk, qk_scales *s);
    void (*unpack)(const uint8_t *blk, uint8_t q[256]); /* portable; the AVX2 file has its own */
} qk_format;

/* NULL for a type that is not a K-quant */
const qk_format *qk_format_of(int type);

/* A path's five tiles, each defined by ENTRY(name, type); QK_PICK returns the one of a type (or NULL). */
#define QK_ENTRIES(ENTRY) \
    ENTRY(tile_q2k, QK_Q2_K) ENTRY(tile_q3k, QK_Q3_K) ENTRY(tile_q4k, QK_Q4_K) ENTRY(tile_q5k, QK_Q5_K) \
    ENTRY(tile_q6k, QK_Q6_K)
#define QK_PICK(type)                                                                              \
    do {                                                                                           \
        static const ly_tile_fn tiles[] = {tile_q2k, tile_q3k, tile_q4k, tile_q5k, tile_q6k};       \
        return (type) >= QK_Q2_K && (type) <= QK_Q6_K ? tiles[(type) - QK_Q2_K] : NULL;            \
    } while (0)
#endif
