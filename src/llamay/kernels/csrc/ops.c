/* Elementwise and normalisation ops: RMSNorm, RoPE, gated activations, residual add.
 *
 * Reductions (the RMSNorm sum of squares) use the canonical 8-lane order of lanes.h, so the portable and
 * AVX2 paths agree bit for bit. Transcendentals are scalar libm calls in both paths. */
#include "lanes.h"
#include <omp.h>

/* y[r] = (x[r] * (1 / sqrt(mean(x[r]^2) + eps))) * w, for rows r of length d; y may alias x. */
LY_API void ly_rmsnorm(const float *x, const float *w, float *y, int64_t n_rows, int64_t d, float eps,
                       int nthreads) {
    #pragma omp parallel for num_threads(nthreads) schedule(static) if (n_rows > 8)
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float ss = ly_avx2 ? ly_sumsq_avx2(xr, d) : ly_sumsq_portable(xr, d);
        float scale = 1.0f / sqrtf(ss / (float)d + eps);
        for (int64_t i = 0; i < d; i++) yr[i] = (xr[i] * scale) * w[i];
    }
}

/* In-place rotary embedding on x [n_tokens, n_heads, head_dim], first n_rot dims of each head.
 * neox = 0: pairs (2i, 2i+1) (llama); neox = 1: pairs (i, i + n_rot/2) (gemma, qwen2).
 * theta_i = pos * base^(-2i / n_rot), computed in double, then cos/sin rounded to float. */
LY_API void ly_rope(float *x, const int32_t *pos, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                    int64_t n_rot, float base, int neox, int nthreads) {
    int64_t half = n_rot / 2;
    #pragma omp parallel for num_threads(nthreads) schedule(static) if (n_tokens > 8)
    for (int64_t t = 0; t < n_tokens; t++) {
        float cs[512], sn[512];
        for (int64_t i = 0; i < half; i++) {
            double theta = (double)pos[t] * pow((double)base, -2.0 * (double)i / (double)n_rot);
            cs[i] = (float)cos(theta);
            sn[i] = (float)sin(theta);
        }
        for (int64_t h = 0; h < n_heads; h++) {
            float *v = x + (t * n_heads + h) * head_dim;
            for (int64_t i = 0; i < half; i++) {
                int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

/* out = act(gate) * up, elementwise over n values. act 0: SiLU g / (1 + exp(-g));
 * act 1: GELU, tanh approximation 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). */
LY_API void ly_gated_act(const float *gate, const float *up, float *out, int64_t n, int act, int nthreads) {
    const float c = 0.7978845608028654f;
    #pragma omp parallel for num_threads(nthreads) schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], a;
        if (act == 0) a = g / (1.0f + expf(-g));
        else a = (0.5f * g) * (1.0f + tanhf(c * (g + (0.044715f * g) * (g * g))));
        out[i] = a * up[i];
    }
}
