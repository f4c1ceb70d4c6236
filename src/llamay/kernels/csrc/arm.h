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
#endif
