/* The grouped f16 attention kernels (attention_f16.c): one (token, KV head) with its G query heads. */
#ifndef LLAMAY_ATTENTION_H
#define LLAMAY_ATTENTION_H
#include "common.h"

#define LY_MAX_GROUP 8 /* query heads per KV head the grouped kernels take */

typedef struct {
    const float *q;          /* [G, d] the token's query heads of this KV head */
    float *o;                /* [G, d] their outputs */
    const uint16_t **k, **v; /* [n_keys] each key's and value's head, in position order */
    int64_t n_keys, d, G;
    float scale, softcap;
} ly_att;

/* s: scratch of G * n_keys floats */
void ly_attend_group_f16_avx2(const ly_att *at, float *s);
void ly_attend_group_f16_avx512(const ly_att *at, float *s);
#endif
