/* Shared definitions for the llamay kernels.
 *
 * Contract for every kernel: one canonical float operation sequence per output element, the same in the
 * portable and every ISA path and for any thread count (threads split output rows, never a reduction).
 * Compiled with -ffp-contract=off: write multiply and add separately; never rely on FMA. */
#ifndef LLAMAY_COMMON_H
#define LLAMAY_COMMON_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

/* The functions Python calls (the kernels package declares them by name): a Windows DLL exports only these. */
#ifdef _WIN32
#define LY_API __declspec(dllexport)
#else
#define LY_API __attribute__((visibility("default")))
#endif

/* 1 where the x86 ISA units (x86.h) are compiled; LY_ARM64: where the arm64 ones (arm.h) are. Elsewhere
 * only the portable path exists. */
#if defined(__x86_64__) || defined(_M_X64)
#define LY_X86 1
#else
#define LY_X86 0
#endif
#if defined(__aarch64__) || defined(_M_ARM64)
#define LY_ARM64 1
#else
#define LY_ARM64 0
#endif

/* Whether the compiler builds dotprod and i8mm functions by target attribute alone: GCC does; clang's
 * arm_neon.h declares those intrinsics for a target attribute from clang 16 on, before that only when the
 * whole unit is compiled for them (-march). Without it dispatch.c offers no such path. */
#if LY_ARM64 && (!defined(__clang__) || __clang_major__ >= 16 || defined(__ARM_FEATURE_DOTPROD))
#define LY_ARM_DOTPROD 1
#else
#define LY_ARM_DOTPROD 0
#endif
#if LY_ARM64 && (!defined(__clang__) || __clang_major__ >= 16 || defined(__ARM_FEATURE_MATMUL_INT8))
#define LY_ARM_I8MM 1
#else
#define LY_ARM_I8MM 0
#endif

/* Kernel paths (dispatch.c builds one kernel table for each). All paths give bit-identical results.
 * A CPU may run AVX-512 without AVX-VNNI (Ice Lake, Zen 4): ly_can_run says which it has. NEON is every
 * arm64 CPU's; dotprod (sdot, Armv8.2+) and i8mm (smmla, Armv8.6+) each add to the one below. */
enum { LY_PATH_PORTABLE = 0, LY_PATH_AVX2 = 1, LY_PATH_AVXVNNI = 2, LY_PATH_AVX512 = 3, LY_PATH_NEON = 4,
       LY_PATH_DOTPROD = 5, LY_PATH_I8MM = 6, LY_N_PATHS = 7 };

/* Memory aligned to align (a power of two), freed only by ly_aligned_free: C11's aligned_alloc is not in
 * Windows' C runtime (thread_posix.c and thread_win32.c define these). */
void *ly_aligned_alloc(size_t align, size_t size);
void ly_aligned_free(void *p);

static inline float ly_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) { bits = sign; }
        else { /* subnormal: normalise */
            int e = -1;
            do { e++; man <<= 1; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f; memcpy(&f, &bits, 4); return f;
}

/* round to nearest even, as F16C's _mm256_cvtps_ph(x, 0) and numpy's astype(float16) do */
static inline uint16_t ly_f32_to_f16(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow to inf (rounds >= 65520) */
    if (ax < 0x38800000u) { /* subnormal or zero in f16 */
        float a; memcpy(&a, &ax, 4);
        float r = a * 16777216.0f; /* 2^24: f16 subnormal units */
        uint32_t m = (uint32_t)nearbyintf(r);
        return (uint16_t)(sign | m);
    }
    uint32_t e = (ax >> 23) - 112, m = ax & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13), rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static inline float ly_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16; float f; memcpy(&f, &bits, 4); return f;
}
#endif
