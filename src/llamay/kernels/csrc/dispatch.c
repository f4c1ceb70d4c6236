/* The kernel table's home: CPU detection, one table per path built once at load, ly_init picks one.
 *
 * Where ISA code lives (one rule for every kernel): the portable C of a kernel is in its generic file
 * (ops.c, act.c, attention.c, q32.c, qfloat.c, qk.c, iq.c), which includes no intrinsics and reads no CPU
 * state. Each ISA's versions are only in units named for it, <topic>_avx2.c, _avxvnni.c, _avx512.c, whose
 * whole body is under #if LY_X86 and whose kernels carry that ISA's target attribute (x86.h); headers
 * with intrinsics (x86.h, avx2.h, avx512.h and the templates q32_x8.h, qk_x8.h, qk_direct.h,
 * qk_unpack.h, x16_x8*.h) are included only there. arm64 the same: <topic>_neon.c, _dotprod.c, _i8mm.c under
 * #if LY_ARM64, attributes and intrinsics from arm.h (the templates q32_a4.h, qk_a4.h, a4_dot.h only there).
 * A unit exports its entries (kernels.h) and may call a lower
 * level's (AVX-512 falls back to AVX2 for few tokens). Only this file says which entry a path runs. */
#include "kernels.h"
#if LY_X86
#include <cpuid.h>

/* Bit `bit` of register reg (0-3: EAX, EBX, ECX, EDX) of CPUID leaf/sub; 0 when the leaf is absent. For
 * features __builtin_cpu_supports does not name in every compiler (clang 14: f16c, avxvnni). */
static int cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
    unsigned r[4];
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return 0;
    return (int)(r[reg] >> bit) & 1;
}
#endif
#if LY_ARM64 && defined(__linux__)
#include <sys/auxv.h>
#define HWCAP_ASIMDDP_BIT (1ul << 20) /* asm/hwcap.h's HWCAP_ASIMDDP, HWCAP2_I8MM (not in every libc) */
#define HWCAP2_I8MM_BIT (1ul << 13)
#elif LY_ARM64 && defined(__APPLE__)
#include <sys/sysctl.h>

static int sysctl_flag(const char *name) {
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname(name, &v, &n, NULL, 0) == 0 && v;
}
#elif LY_ARM64 && defined(_WIN32)
#include <windows.h>
#ifndef PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE /* older SDKs' headers */
#define PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE 43
#endif
#endif

#if LY_ARM64
/* arm64 features by the OS's word: Linux's hwcaps, macOS's sysctl, Windows' processor features (no i8mm
 * query there: that path is not offered). */
static int arm_has(int path) {
#if defined(__linux__)
    if (path == LY_PATH_DOTPROD) return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP_BIT) != 0;
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP_BIT) && (getauxval(AT_HWCAP2) & HWCAP2_I8MM_BIT);
#elif defined(__APPLE__)
    if (path == LY_PATH_DOTPROD) return sysctl_flag("hw.optional.arm.FEAT_DotProd");
    return sysctl_flag("hw.optional.arm.FEAT_DotProd") && sysctl_flag("hw.optional.arm.FEAT_I8MM");
#elif defined(_WIN32)
    return path == LY_PATH_DOTPROD && IsProcessorFeaturePresent(PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE);
#else
    (void)path;
    return 0;
#endif
}
#endif

/* 1 when this CPU runs kernel path `path` (LY_PATH_*), else 0. */
LY_API int ly_can_run(int path) {
    if (path == LY_PATH_PORTABLE) return 1;
#if LY_X86
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && cpuid_bit(1, 0, 2, 29); /* F16C */
    switch (path) {
    case LY_PATH_AVX2: return avx2;
    case LY_PATH_AVXVNNI: return avx2 && cpuid_bit(7, 1, 0, 4); /* AVX-VNNI */
    case LY_PATH_AVX512:
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
            && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }
#endif
#if LY_ARM64
    switch (path) {
    case LY_PATH_NEON: return 1;
    case LY_PATH_DOTPROD: return LY_ARM_DOTPROD && arm_has(path);
    case LY_PATH_I8MM: return LY_ARM_I8MM && arm_has(path);
    }
#endif
    return 0;
}

/* The best path this CPU runs: the widest (each architecture's paths are numbered narrowest first). */
LY_API int ly_best_path(void) {
    for (int path = LY_N_PATHS - 1; path > LY_PATH_PORTABLE; path--)
        if (ly_can_run(path)) return path;
    return LY_PATH_PORTABLE;
}

static ly_kernel_table tables[LY_N_PATHS]; /* by LY_PATH_* */
const ly_kernel_table *ly_kernels = &tables[LY_PATH_PORTABLE];

/* The tiles a getter has replace a table's (slots: its tile or tile_x16). */
static void put_tiles(ly_tile_fn slots[LY_N_TYPES], ly_tile_fn (*get)(int type)) {
    for (int t = 0; t < LY_N_TYPES; t++) {
        ly_tile_fn fn = get(t);
        if (fn) slots[t] = fn;
    }
}

static void fill_portable(ly_kernel_table *k) {
    *k = (ly_kernel_table){.sum = ly_sum_portable, .sumsq = ly_sumsq_portable, .gated = ly_gated_portable,
                           .softcap = ly_softcap_portable, .quant_row = ly_quant_row_portable,
                           .kv_dot = ly_kv_dot_portable, .kv_acc = ly_kv_acc_portable,
                           .conv_row = ly_conv_row_portable, .delta_pass1 = ly_delta_pass1_portable,
                           .delta_pass2 = ly_delta_pass2_portable, .ssm_row = ly_ssm_row_portable,
                           .ssm_cols = ly_ssm_cols_portable};
    put_tiles(k->tile, ly_tiles_q32_portable);
    put_tiles(k->tile, ly_tiles_float_portable);
    put_tiles(k->tile, ly_tiles_qk_portable);
    put_tiles(k->tile, ly_tiles_iq_portable);
    put_tiles(k->tile_x16, ly_tiles_x16_portable);
}

#if LY_X86
static void add_avx2(ly_kernel_table *k) {
    k->sum = ly_sum_avx2;
    k->sumsq = ly_sumsq_avx2;
    k->gated = ly_gated_avx2;
    k->softcap = ly_softcap_avx2;
    k->quant_row = ly_quant_row_avx2;
    k->kv_dot = ly_kv_dot_avx2;
    k->kv_acc = ly_kv_acc_avx2;
    k->attend_group_f16 = ly_attend_group_f16_avx2;
    k->conv_row = ly_conv_row_avx2;
    k->delta_pass1 = ly_delta_pass1_avx2;
    k->delta_pass2 = ly_delta_pass2_avx2;
    k->ssm_row = ly_ssm_row_avx2;  /* avx512 keeps them: the sum's 8 lanes are one 256-bit register */
    k->ssm_cols = ly_ssm_cols_avx2;
    put_tiles(k->tile, ly_tiles_q32_avx2);
    put_tiles(k->tile, ly_tiles_float_avx2);
    put_tiles(k->tile, ly_tiles_qk_avx2);
    put_tiles(k->tile_x16, ly_tiles_x16_avx2);
}

static void add_avxvnni(ly_kernel_table *k) {
    put_tiles(k->tile, ly_tiles_q32_avxvnni);
    put_tiles(k->tile, ly_tiles_qk_avxvnni);
    put_tiles(k->tile_x16, ly_tiles_x16_avxvnni);
}

static void add_avx512(ly_kernel_table *k) {
    k->attend_group_f16 = ly_attend_group_f16_avx512;
    k->conv_row = ly_conv_row_avx512;
    k->delta_pass1 = ly_delta_pass1_avx512;
    k->delta_pass2 = ly_delta_pass2_avx512;
    put_tiles(k->tile, ly_tiles_q32_avx512);
    put_tiles(k->tile, ly_tiles_float_avx512);
    put_tiles(k->tile, ly_tiles_qk_avx512);
    put_tiles(k->tile_x16, ly_tiles_x16_avx512);
}
#endif

#if LY_ARM64
static void add_neon(ly_kernel_table *k) {
    k->sum = ly_sum_neon;
    k->sumsq = ly_sumsq_neon;
    k->gated = ly_gated_neon;
    k->softcap = ly_softcap_neon;
    k->quant_row = ly_quant_row_neon;
    k->conv_row = ly_conv_row_neon;
    k->delta_pass1 = ly_delta_pass1_neon;
    k->delta_pass2 = ly_delta_pass2_neon;
    k->ssm_row = ly_ssm_row_neon;
    k->ssm_cols = ly_ssm_cols_neon;
    k->kv_dot = ly_kv_dot_neon;
    k->kv_acc = ly_kv_acc_neon;
    k->attend_group_f16 = ly_attend_group_f16_neon;
    put_tiles(k->tile, ly_tiles_q32_neon);
    put_tiles(k->tile, ly_tiles_float_neon);
    put_tiles(k->tile, ly_tiles_qk_neon);
}

#if LY_ARM_DOTPROD
static void add_dotprod(ly_kernel_table *k) {
    put_tiles(k->tile, ly_tiles_q32_dotprod);
    put_tiles(k->tile, ly_tiles_qk_dotprod);
}
#endif

#if LY_ARM_I8MM
static void add_i8mm(ly_kernel_table *k) {
    put_tiles(k->tile, ly_tiles_q32_i8mm);
    put_tiles(k->tile, ly_tiles_qk_i8mm);
}
#endif
#endif

/* Each path: the one below it plus its own entries. avx512 has no 256-bit lookup-format tiles: it runs
 * AVX-VNNI's where the CPU has AVX-VNNI, else AVX2's. */
__attribute__((constructor)) static void build_tables(void) {
    fill_portable(&tables[LY_PATH_PORTABLE]);
#if LY_X86
    tables[LY_PATH_AVX2] = tables[LY_PATH_PORTABLE];
    add_avx2(&tables[LY_PATH_AVX2]);
    tables[LY_PATH_AVXVNNI] = tables[LY_PATH_AVX2];
    add_avxvnni(&tables[LY_PATH_AVXVNNI]);
    tables[LY_PATH_AVX512] = tables[ly_can_run(LY_PATH_AVXVNNI) ? LY_PATH_AVXVNNI : LY_PATH_AVX2];
    add_avx512(&tables[LY_PATH_AVX512]);
#endif
#if LY_ARM64
    tables[LY_PATH_NEON] = tables[LY_PATH_PORTABLE];
    add_neon(&tables[LY_PATH_NEON]);
    tables[LY_PATH_DOTPROD] = tables[LY_PATH_NEON];
#if LY_ARM_DOTPROD
    add_dotprod(&tables[LY_PATH_DOTPROD]);
#endif
    tables[LY_PATH_I8MM] = tables[LY_PATH_DOTPROD];
#if LY_ARM_I8MM
    add_i8mm(&tables[LY_PATH_I8MM]);
#endif
#endif
}

/* Chooses the kernel path: `path` (LY_PATH_*), or the best one when path < 0. Returns the path now in
 * use, or -1 (nothing changed) when the CPU cannot run the one asked for. */
LY_API int ly_init(int path) {
    if (path < 0) path = ly_best_path();
    if (path >= LY_N_PATHS || !ly_can_run(path)) return -1;
    ly_kernels = &tables[path];
    return path;
}

/* 1 when the current path has its own x16 tile for `type` (not the portable one through GGML rows): the
 * loader repacks a weight only then. */
LY_API int ly_x16_native(int type) {
    if (type < 0 || type >= LY_N_TYPES || !ly_kernels->tile_x16[type]) return 0;
    return ly_kernels->tile_x16[type] != tables[LY_PATH_PORTABLE].tile_x16[type];
}
