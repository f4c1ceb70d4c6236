/* The canonical float reduction: 8 lane accumulators (lane j sums the terms i with i % 8 == j, in index
 * order, multiply then add), then the fixed tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
 * These portable functions spell the lanes out; the AVX2 ones (avx2.h, *_avx2.c) hold them in one register.
 * Equal bit for bit. */
#ifndef LLAMAY_LANES_H
#define LLAMAY_LANES_H
#include "common.h"

static inline float ly_lanes_reduce(const float l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static inline float ly_dot_f32_portable(const float *a, const float *b, int64_t d) {
    float l[8] = {0};
    for (int64_t i = 0; i < d; i++) l[i & 7] = l[i & 7] + a[i] * b[i];
    return ly_lanes_reduce(l);
}

/* dot of float a with f16 b (K cache rows) */
static inline float ly_dot_f16_portable(const float *a, const uint16_t *b, int64_t d) {
    float l[8] = {0};
    for (int64_t i = 0; i < d; i++) l[i & 7] = l[i & 7] + a[i] * ly_f16_to_f32(b[i]);
    return ly_lanes_reduce(l);
}

#endif
