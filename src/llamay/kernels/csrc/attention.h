/* The grouped f16 attention kernels (attention_f16.c): one (token, KV head) with its G query heads. */
#ifndef LLAMAY_ATTENTION_H
#define LLAMAY_ATTENTION_H
#include "common.h"
#include "mathfn.h"

#define LY_MAX_GROUP 8 /* query heads per KV head the grouped kernels take */
/* A key whose score is this far below the maximum gets weight exactly 0: exp(-40) = 4e-18 changes no
 * float32 sum that holds the maximum's weight 1, and its products with values would be subnormal (each
 * one a slow microcode assist) where the values are small. */
#define LY_ATT_DROP -40.0f

static inline float ly_att_weight(float x) { return x < LY_ATT_DROP ? 0.0f : ly_exp(x); }

typedef struct {
    const float *q;          /* [G, d] the token's query heads of this KV head */
    float *o;                /* [G, d] their outputs */
    const uint16_t **k, **v; /* [n_keys] each key's and value's head, in position order */
    int64_t n_keys, d, G;
    float scale, softcap;
    const float *sinks;      /* [G] the heads' sink logits, or NULL */
} ly_att;

/* s: scratch of G * n_keys floats */
void ly_attend_group_f16_avx2(const ly_att *at, float *s);
void ly_attend_group_f16_avx512(const ly_att *at, float *s);
#endif
