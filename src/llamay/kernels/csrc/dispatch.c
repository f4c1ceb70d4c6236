#include "common.h"

int ly_avx2 = 0, ly_avxvnni = 0, ly_avx512 = 0, ly_vnni256 = 0;

/* 1 when this CPU runs kernel path `path` (LY_PATH_*), else 0. */
LY_API int ly_can_run(int path) {
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    switch (path) {
    case LY_PATH_PORTABLE: return 1;
    case LY_PATH_AVX2: return avx2;
    case LY_PATH_AVXVNNI: return avx2 && __builtin_cpu_supports("avxvnni");
    case LY_PATH_AVX512:
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    default: return 0;
    }
}

/* The best path this CPU runs: the widest. */
LY_API int ly_best_path(void) {
    for (int path = LY_PATH_AVX512; path > LY_PATH_PORTABLE; path--)
        if (ly_can_run(path)) return path;
    return LY_PATH_PORTABLE;
}

/* Chooses the kernel path: `path` (LY_PATH_*), or the best one when path < 0. Returns the path now in
 * use, or -1 (nothing changed) when the CPU cannot run the one asked for. */
LY_API int ly_init(int path) {
    if (path < 0) path = ly_best_path();
    if (!ly_can_run(path)) return -1;
    ly_avx2 = path >= LY_PATH_AVX2;
    ly_avxvnni = path == LY_PATH_AVXVNNI;
    ly_avx512 = path == LY_PATH_AVX512;
    ly_vnni256 = path >= LY_PATH_AVXVNNI && ly_can_run(LY_PATH_AVXVNNI);
    return path;
}
