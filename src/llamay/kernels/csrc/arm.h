/* arm64 intrinsics and one target attribute per ISA level. Included only by the ISA units (*_neon.c,
 * *_dotprod.c, *_i8mm.c, inside their #if LY_ARM64) and by the headers that only they include.
 * AArch64's vector float arithmetic is IEEE (round to nearest, denormals kept: FPCR as the OS starts a
 * thread), the same as its scalar arithmetic, so a lane that does the portable operations gets its bits. */
#ifndef LLAMAY_ARM_H
#define LLAMAY_ARM_H
#include "common.h"
#if !LY_ARM64
#error "arm.h is for arm64 builds only"
#endif
#include "lanes.h"
#include "mathfn.h"
#include <arm_neon.h>

#define LY_NEON /* Advanced SIMD is in every arm64 CPU: no attribute needed */
#ifdef __clang__
#define LY_DOTPROD __attribute__((target("dotprod")))
#define LY_I8MM __attribute__((target("dotprod,i8mm")))
#else /* GCC's arm_neon.h declares these intrinsics for arch=armv8.2-a+<feature>: a function must say as much */
#define LY_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))
#define LY_I8MM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif

/* ly_lanes_reduce (lanes.h) of lanes 0-3 in lo and 4-7 in hi */
static inline float ly_lanes_reduce_neon(float32x4_t lo, float32x4_t hi) {
    float l[8];
    vst1q_f32(l, lo);
    vst1q_f32(l + 4, hi);
    return ly_lanes_reduce(l);
}

/* x > hi ? hi : x < lo ? lo : x, lane by lane (compare and select: the portable ternaries, NaN included) */
static inline float32x4_t ly_clamp_neon(float32x4_t x, float lo, float hi) {
    float32x4_t vlo = vdupq_n_f32(lo), vhi = vdupq_n_f32(hi);
    return vbslq_f32(vcgtq_f32(x, vhi), vhi, vbslq_f32(vcltq_f32(x, vlo), vlo, x));
}

/* ly_exp (mathfn.h), 4 wide: the same operations; vrndnq rounds half to even as nearbyintf does */
static inline float32x4_t ly_exp_neon(float32x4_t x) {
    x = ly_clamp_neon(x, LY_EXP_LO, LY_EXP_HI);
    float32x4_t n = vrndnq_f32(vmulq_n_f32(x, LY_LOG2E));
    float32x4_t r = vsubq_f32(vsubq_f32(x, vmulq_n_f32(n, LY_LN2_A)), vmulq_n_f32(n, LY_LN2_B));
    float32x4_t y = vdupq_n_f32(ly_exp_c[0]);
    for (int i = 1; i < 6; i++) y = vaddq_f32(vmulq_f32(y, r), vdupq_n_f32(ly_exp_c[i]));
    y = vaddq_f32(vaddq_f32(vmulq_f32(y, vmulq_f32(r, r)), r), vdupq_n_f32(1.0f));
    int32x4_t bits = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(bits));
}

/* ly_log_ge1 (mathfn.h), 4 wide */
static inline float32x4_t ly_log_ge1_neon(float32x4_t w) {
    int32x4_t bits = vreinterpretq_s32_f32(w);
    int32x4_t e = vsubq_s32(vshrq_n_s32(bits, 23), vdupq_n_s32(126));
    float32x4_t f = vreinterpretq_f32_s32(vorrq_s32(vandq_s32(bits, vdupq_n_s32(0x007fffff)), vdupq_n_s32(0x3f000000)));
    uint32x4_t lt = vcltq_f32(f, vdupq_n_f32(LY_SQRTHF));
    float32x4_t one = vdupq_n_f32(1.0f);
    e = vsubq_s32(e, vandq_s32(vreinterpretq_s32_u32(lt), vdupq_n_s32(1)));
    float32x4_t x = vbslq_f32(lt, vsubq_f32(vaddq_f32(f, f), one), vsubq_f32(f, one));
    float32x4_t z = vmulq_f32(x, x), y = vdupq_n_f32(ly_log_c[0]);
    for (int i = 1; i < 9; i++) y = vaddq_f32(vmulq_f32(y, x), vdupq_n_f32(ly_log_c[i]));
    y = vmulq_f32(vmulq_f32(y, x), z);
    float32x4_t fe = vcvtq_f32_s32(e);
    y = vsubq_f32(vaddq_f32(y, vmulq_n_f32(fe, LY_LN2_B)), vmulq_n_f32(z, 0.5f));
    return vaddq_f32(vaddq_f32(x, y), vmulq_n_f32(fe, LY_LN2_A));
}

/* ly_softplus_poly (mathfn.h), 4 wide */
static inline float32x4_t ly_softplus_poly_neon(float32x4_t v) {
    float32x4_t u = ly_exp_neon(v), one = vdupq_n_f32(1.0f), w = vaddq_f32(one, u);
    float32x4_t r = vaddq_f32(ly_log_ge1_neon(w), vdivq_f32(vsubq_f32(u, vsubq_f32(w, one)), w));
    return vbslq_f32(vcgtq_f32(v, vdupq_n_f32(20.0f)), v, r);
}
#endif
