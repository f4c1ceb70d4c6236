/* The grouped f16 attention kernels (attention_avx2.c, attention_avx512.c; in the kernel table): one
 * (token, KV head) with its G query heads. */
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

/* A grouped kernel's body fn(at, s, G) with G a literal for every group size it takes (s: scratch of
 * G * n_keys floats): with G unknown the accumulators live in memory, three times slower (Llama 3.2 3B's
 * G = 3, Qwen2.5's 6 and 7). */
#define BY_GROUP(fn)                                  \
    switch (at->G) {                                  \
    case 1: fn(at, s, 1); break;                      \
    case 2: fn(at, s, 2); break;                      \
    case 3: fn(at, s, 3); break;                      \
    case 4: fn(at, s, 4); break;                      \
    case 5: fn(at, s, 5); break;                      \
    case 6: fn(at, s, 6); break;                      \
    case 7: fn(at, s, 7); break;                      \
    default: fn(at, s, 8); break;                     \
    }

/* s[g * n + j] holds the raw dot of head g with key j: -> p_j, and sum[g] (key order); attention_avx2.c */
void ly_att_weights_avx2(float *s, int64_t n, int64_t G, float scale, float softcap, const float *sinks,
                         float *sum);
#endif
