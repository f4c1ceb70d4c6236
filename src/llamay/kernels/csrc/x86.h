/* x86 intrinsics and one target attribute per ISA level. Included only by the ISA units (*_avx2.c,
 * *_avxvnni.c, *_avx512.c, inside their #if LY_X86) and by the headers that only they include. */
#ifndef LLAMAY_X86_H
#define LLAMAY_X86_H
#include "common.h"
#if !LY_X86
#error "x86.h is for x86-64 builds only"
#endif
#include <immintrin.h>

#define LY_AVX2 __attribute__((target("avx2,f16c")))
/* AVX2 with AVX-VNNI (VEX vpdpbusd): CPUs with VNNI but not AVX-512 (Alder Lake and later, Zen 5 laptops). */
#define LY_AVXVNNI __attribute__((target("avx2,f16c,avxvnni")))
/* AVX-512 F/BW/VL with VNNI (512- and 256-bit dpbusd); AVX2 and F16C are implied on every such CPU. */
#define LY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,f16c")))
#endif
