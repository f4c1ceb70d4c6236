/* The kernel table: every kernel that has ISA versions is called through ly_kernels, the table of the
 * current path (dispatch.c builds one per path at load; ly_init picks one). Callers fetch an entry once per
 * row, tile or call, never per element. Every entry of every table follows the same canonical sequence. */
#ifndef LLAMAY_KERNELS_H
#define LLAMAY_KERNELS_H
#include "attention.h"
#include "matmul.h"
#include "x16.h"

#define LY_N_TYPES 40 /* GGML type ids below this index the tiles */

typedef struct {
    float (*sum)(const float *x, int64_t d);   /* lanes.h order (ops.c) */
    float (*sumsq)(const float *x, int64_t d);
    void (*gated)(float *gate, const float *up, int64_t lo, int64_t hi, int act); /* [lo, hi) of mathfn.h's */
    void (*softcap)(float *x, int64_t lo, int64_t hi, float cap);
    void (*quant_row)(const float *x, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16); /* act.c */
    float (*kv_dot)(int type, const float *a, const uint8_t *k, int64_t d);         /* kvtypes.h */
    void (*kv_acc)(int type, float *o, float p, const uint8_t *v, int64_t d);       /* o += p * v */
    void (*attend_group_f16)(const ly_att *at, float *s); /* NULL: attention.c's per-head loop */
    /* one token's causal depthwise convolution over channels [lo, hi) (conv.c) */
    void (*conv_row)(const float *w, float *s, const float *x, float *y, const float *bias, int64_t lo, int64_t hi,
                     int64_t C, int64_t K);
    /* the gated delta rule's passes over one head's state (deltanet.c); dv <= LY_DELTA_MAX_DIM */
    void (*delta_pass1)(float *S, const float *k, const float *decay, float *kv, int64_t dk, int64_t dv);
    void (*delta_pass2)(float *S, const float *k, const float *delta, const float *q, float *out, const float *kn,
                        const float *decay_n, float *kv_n, int64_t dk, int64_t dv);
    /* the selective scan (ssm.c): one Mamba2 row, s[i] = s[i] dA + B[i] xdt over its N states, -> the sum
     * of s[i] C[i] in lanes.h order; Mamba1's channels [lo, hi) of an [N, H] state, y[r]
     * written */
    float (*ssm_row)(float *s, const float *B, const float *C, float dA, float xdt, int64_t N);
    void (*ssm_cols)(float *s, const float *A, const float *B, const float *C, const float *x, const float *dt,
                     const float *dt_bias, const float *D, float *y, int64_t lo, int64_t hi, int64_t H, int64_t N);
    ly_tile_fn tile[LY_N_TYPES];                           /* by GGML type id; NULL: unsupported */
    ly_tile_fn tile_x16[LY_N_TYPES];                       /* the same for weights in the x16 layout */
} ly_kernel_table;

extern const ly_kernel_table *ly_kernels;

/* type: a GGML type id, or one | LY_X16 for a weight in the x16 layout (x16.h) */
static inline ly_tile_fn ly_tile(int type) {
    if (type & LY_X16) {
        type &= ~LY_X16;
        return type >= 0 && type < LY_N_TYPES ? ly_kernels->tile_x16[type] : NULL;
    }
    return type >= 0 && type < LY_N_TYPES ? ly_kernels->tile[type] : NULL;
}

/* The entries, named for their ISA; a tile getter returns NULL for a type its file has no tile for. */
float ly_sum_portable(const float *x, int64_t d);
float ly_sumsq_portable(const float *x, int64_t d);
void ly_gated_portable(float *gate, const float *up, int64_t lo, int64_t hi, int act);
void ly_softcap_portable(float *x, int64_t lo, int64_t hi, float cap);
void ly_quant_row_portable(const float *x, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16);
float ly_kv_dot_portable(int type, const float *a, const uint8_t *k, int64_t d);
void ly_kv_acc_portable(int type, float *o, float p, const uint8_t *v, int64_t d);
void ly_conv_row_portable(const float *w, float *s, const float *x, float *y, const float *bias, int64_t lo,
                          int64_t hi, int64_t C, int64_t K);
float ly_ssm_row_portable(float *s, const float *B, const float *C, float dA, float xdt, int64_t N);
/* its states [from, N) onto lanes l that hold the states before (the vector rows' tails), -> the sum */
float ly_ssm_row_from(float l[8], float *s, const float *B, const float *C, float dA, float xdt, int64_t from,
                      int64_t N);
void ly_ssm_cols_portable(float *s, const float *A, const float *B, const float *C, const float *x, const float *dt,
                          const float *dt_bias, const float *D, float *y, int64_t lo, int64_t hi, int64_t H, int64_t N);
void ly_delta_pass1_portable(float *S, const float *k, const float *decay, float *kv, int64_t dk, int64_t dv);
void ly_delta_pass2_portable(float *S, const float *k, const float *delta, const float *q, float *out, const float *kn,
                          const float *decay_n, float *kv_n, int64_t dk, int64_t dv);
ly_tile_fn ly_tiles_q32_portable(int type);   /* q32.c: Q4_0 .. Q8_0, IQ4_NL, IQ4_XS, MXFP4, TQ1_0, TQ2_0 */
ly_tile_fn ly_tiles_float_portable(int type); /* qfloat.c: F32, F16, BF16 */
ly_tile_fn ly_tiles_qk_portable(int type);    /* qk.c: Q2_K .. Q6_K */
ly_tile_fn ly_tiles_iq_portable(int type);    /* iq.c: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M */
ly_tile_fn ly_tiles_x16_portable(int type);   /* x16.c: the types with an x16 layout, through the path's GGML tile */

float ly_sum_avx2(const float *x, int64_t d);
float ly_sumsq_avx2(const float *x, int64_t d);
void ly_gated_avx2(float *gate, const float *up, int64_t lo, int64_t hi, int act);
void ly_softcap_avx2(float *x, int64_t lo, int64_t hi, float cap);
void ly_quant_row_avx2(const float *x, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16);
float ly_kv_dot_avx2(int type, const float *a, const uint8_t *k, int64_t d);
void ly_kv_acc_avx2(int type, float *o, float p, const uint8_t *v, int64_t d);
void ly_attend_group_f16_avx2(const ly_att *at, float *s);
void ly_conv_row_avx2(const float *w, float *s, const float *x, float *y, const float *bias, int64_t lo,
                      int64_t hi, int64_t C, int64_t K);
float ly_ssm_row_avx2(float *s, const float *B, const float *C, float dA, float xdt, int64_t N);
void ly_ssm_cols_avx2(float *s, const float *A, const float *B, const float *C, const float *x, const float *dt,
                      const float *dt_bias, const float *D, float *y, int64_t lo, int64_t hi, int64_t H, int64_t N);
void ly_delta_pass1_avx2(float *S, const float *k, const float *decay, float *kv, int64_t dk, int64_t dv);
void ly_delta_pass2_avx2(float *S, const float *k, const float *delta, const float *q, float *out, const float *kn,
                          const float *decay_n, float *kv_n, int64_t dk, int64_t dv);
ly_tile_fn ly_tiles_q32_avx2(int type);   /* Q4_0 .. Q8_0, IQ4_NL, IQ4_XS, MXFP4 */
ly_tile_fn ly_tiles_float_avx2(int type);
ly_tile_fn ly_tiles_qk_avx2(int type);
ly_tile_fn ly_tiles_x16_avx2(int type);   /* the types with an x16 layout */

ly_tile_fn ly_tiles_q32_avxvnni(int type); /* as AVX2's */
ly_tile_fn ly_tiles_qk_avxvnni(int type);
ly_tile_fn ly_tiles_x16_avxvnni(int type);

void ly_attend_group_f16_avx512(const ly_att *at, float *s);
void ly_conv_row_avx512(const float *w, float *s, const float *x, float *y, const float *bias, int64_t lo,
                        int64_t hi, int64_t C, int64_t K);
void ly_delta_pass1_avx512(float *S, const float *k, const float *decay, float *kv, int64_t dk, int64_t dv);
void ly_delta_pass2_avx512(float *S, const float *k, const float *delta, const float *q, float *out, const float *kn,
                          const float *decay_n, float *kv_n, int64_t dk, int64_t dv);
ly_tile_fn ly_tiles_q32_avx512(int type);  /* Q4_0 .. Q8_0 */
ly_tile_fn ly_tiles_float_avx512(int type);
ly_tile_fn ly_tiles_qk_avx512(int type);
ly_tile_fn ly_tiles_x16_avx512(int type);  /* Q4_0, Q8_0, Q4_K, Q6_K in the x16 layout */

float ly_sum_neon(const float *x, int64_t d);
float ly_sumsq_neon(const float *x, int64_t d);
void ly_gated_neon(float *gate, const float *up, int64_t lo, int64_t hi, int act);
void ly_softcap_neon(float *x, int64_t lo, int64_t hi, float cap);
void ly_quant_row_neon(const float *x, int64_t k, int64_t bs, int8_t *q, float *d, int32_t *s16);
void ly_conv_row_neon(const float *w, float *s, const float *x, float *y, const float *bias, int64_t lo,
                      int64_t hi, int64_t C, int64_t K);
void ly_delta_pass1_neon(float *S, const float *k, const float *decay, float *kv, int64_t dk, int64_t dv);
void ly_delta_pass2_neon(float *S, const float *k, const float *delta, const float *q, float *out, const float *kn,
                         const float *decay_n, float *kv_n, int64_t dk, int64_t dv);
float ly_ssm_row_neon(float *s, const float *B, const float *C, float dA, float xdt, int64_t N);
void ly_ssm_cols_neon(float *s, const float *A, const float *B, const float *C, const float *x, const float *dt,
                      const float *dt_bias, const float *D, float *y, int64_t lo, int64_t hi, int64_t H, int64_t N);
float ly_kv_dot_neon(int type, const float *a, const uint8_t *k, int64_t d);
void ly_kv_acc_neon(int type, float *o, float p, const uint8_t *v, int64_t d);
void ly_attend_group_f16_neon(const ly_att *at, float *s);
ly_tile_fn ly_tiles_q32_neon(int type);    /* Q4_0 .. Q8_0, IQ4_NL, IQ4_XS, MXFP4 */
ly_tile_fn ly_tiles_float_neon(int type);  /* F32, F16, BF16 */
ly_tile_fn ly_tiles_qk_neon(int type);     /* Q2_K .. Q6_K */

ly_tile_fn ly_tiles_q32_dotprod(int type); /* as NEON's, sdot for the integer dots */
ly_tile_fn ly_tiles_qk_dotprod(int type);

ly_tile_fn ly_tiles_q32_i8mm(int type);    /* as dotprod's, smmla for two tokens at once */
ly_tile_fn ly_tiles_qk_i8mm(int type);
#endif
