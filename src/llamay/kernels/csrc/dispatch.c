#include "common.h"

int ly_avx2 = 0, ly_avx512 = 0;

/* The best path this CPU runs. */
LY_API int ly_best_path(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) return LY_PATH_PORTABLE;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return LY_PATH_AVX512;
    return LY_PATH_AVX2;
}

/* Chooses the kernel path: `path` (LY_PATH_*), or the best one when path < 0. Returns the path now in
 * use, or -1 (nothing changed) when the CPU cannot run the one asked for. */
LY_API int ly_init(int path) {
    int best = ly_best_path();
    if (path < 0) path = best;
    if (path > best) return -1;
    ly_avx2 = path >= LY_PATH_AVX2;
    ly_avx512 = path == LY_PATH_AVX512;
    return path;
}
