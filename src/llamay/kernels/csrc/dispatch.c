#include "common.h"
#include <omp.h>

int ly_avx2 = 0;

/* Chooses the kernel path once: AVX2 when the CPU has it, unless force_portable. Returns the choice. */
LY_API int ly_init(int force_portable) {
    __builtin_cpu_init();
    ly_avx2 = !force_portable && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    return ly_avx2;
}

LY_API int ly_max_threads(void) { return omp_get_num_procs(); }
