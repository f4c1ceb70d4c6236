/* The IQ2 / IQ3 / IQ1 formats (256-element superblocks over codebooks: iq_grids.h): a portable tile only.
 * A row is decoded to float weights (each an exact product: scale * codebook value * sign, so equal to
 * gguf-py's dequantization bit for bit), then per 32-block b in order: acc = acc + s_b * dx_b, s_b the
 * float sum over the block's elements in order of w_j * (float)q_j. */
#include "iq_grids.h"
#include "kernels.h"
#include <stdlib.h>
#include <string.h>

enum { IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ3_S = 21, IQ2_S = 22, IQ1_M = 29 };

static uint8_t g_iq2xxs[256 * 8], g_iq2xs[512 * 8], g_iq2s[1024 * 8], g_iq3xxs[256 * 4], g_iq3s[512 * 4];
static int8_t g_iq1s[2048 * 8];
static uint8_t g_ksigns[128];

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

static void unpack(const char *hex, const int *map, int n_map, int n, void *out, int is_signed) {
    int bits = n_map > 4 ? 4 : 2, per = 8 / bits;
    for (int i = 0; i < n; i++) {
        int byte = hexval(hex[2 * (i / per)]) << 4 | hexval(hex[2 * (i / per) + 1]);
        int v = map[(byte >> (bits * (i % per))) & ((1 << bits) - 1)];
        if (is_signed) ((int8_t *)out)[i] = (int8_t)v; else ((uint8_t *)out)[i] = (uint8_t)v;
    }
}

__attribute__((constructor)) static void iq_unpack_grids(void) {
    unpack(LY_IQ2_XXS_HEX, LY_IQ2_XXS_MAP, 3, 256 * 8, g_iq2xxs, 0);
    unpack(LY_IQ2_XS_HEX, LY_IQ2_XS_MAP, 3, 512 * 8, g_iq2xs, 0);
    unpack(LY_IQ2_S_HEX, LY_IQ2_S_MAP, 3, 1024 * 8, g_iq2s, 0);
    unpack(LY_IQ3_XXS_HEX, LY_IQ3_XXS_MAP, 8, 256 * 4, g_iq3xxs, 0);
    unpack(LY_IQ3_S_HEX, LY_IQ3_S_MAP, 8, 512 * 4, g_iq3s, 0);
    unpack(LY_IQ1_S_HEX, LY_IQ1_S_MAP, 3, 2048 * 8, g_iq1s, 1);
    for (int i = 0; i < 128; i++) g_ksigns[i] = (uint8_t)(hexval(LY_KSIGNS_HEX[2 * i]) << 4 | hexval(LY_KSIGNS_HEX[2 * i + 1]));
}

static float f16(const uint8_t *p) { return ly_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }
static uint32_t u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* 8 values of a grid row times db, signs from the bits of s (bit j set: value j negative) */
static void put8(float *y, const uint8_t *row, float db, unsigned s) {
    for (int j = 0; j < 8; j++) y[j] = db * (float)row[j] * ((s >> j) & 1 ? -1.0f : 1.0f);
}

static float iq2_scale(float d, int nibble) { return d * (0.5f + (float)nibble) * 0.25f; }

/* One superblock -> 256 floats. Layouts and scales as gguf-py's dequantize_blocks of each type. */
static int decode_block(int type, const uint8_t *b, float *y) {
    switch (type) {
    case IQ2_XXS: { /* d | 8 x (u32 grid bytes, u32 4 x 7 sign bits | scale << 28) */
        float d = f16(b);
        for (int ib = 0; ib < 8; ib++) {
            uint32_t a0 = u32(b + 2 + 8 * ib), a1 = u32(b + 6 + 8 * ib);
            float db = iq2_scale(d, (int)(a1 >> 28));
            for (int l = 0; l < 4; l++)
                put8(y + 32 * ib + 8 * l, g_iq2xxs + 8 * ((a0 >> 8 * l) & 255), db, g_ksigns[(a1 >> 7 * l) & 127]);
        }
        return 0;
    }
    case IQ2_XS: { /* d | 32 x u16 (9-bit grid index | 7-bit sign index) | 8 bytes of two 4-bit scales */
        float d = f16(b);
        for (int i = 0; i < 32; i++) {
            uint16_t q = u16(b + 2 + 2 * i);
            float db = iq2_scale(d, (b[66 + i / 4] >> (4 * (i / 2 % 2))) & 15);
            put8(y + 8 * i, g_iq2xs + 8 * (q & 511), db, g_ksigns[q >> 9]);
        }
        return 0;
    }
    case IQ2_S: { /* d | 32 low index bytes | 32 sign bytes | 8 bytes of 2-bit high indices | 8 scale bytes */
        float d = f16(b);
        for (int i = 0; i < 32; i++) {
            int idx = b[2 + i] | ((b[66 + i / 4] >> (2 * (i % 4))) & 3) << 8;
            float db = iq2_scale(d, (b[74 + i / 4] >> (4 * (i / 2 % 2))) & 15);
            put8(y + 8 * i, g_iq2s + 8 * idx, db, b[34 + i]);
        }
        return 0;
    }
    case IQ3_XXS: { /* d | 64 grid bytes (4 values each) | 8 x u32 (4 x 7 sign bits | scale << 28) */
        float d = f16(b);
        for (int ib = 0; ib < 8; ib++) {
            uint32_t a = u32(b + 66 + 4 * ib);
            float db = d * (0.5f + (float)(a >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                uint8_t row[8];
                memcpy(row, g_iq3xxs + 4 * b[2 + 8 * ib + 2 * l], 4);
                memcpy(row + 4, g_iq3xxs + 4 * b[2 + 8 * ib + 2 * l + 1], 4);
                put8(y + 32 * ib + 8 * l, row, db, g_ksigns[(a >> 7 * l) & 127]);
            }
        }
        return 0;
    }
    case IQ3_S: { /* d | 64 low index bytes | 8 bytes of high index bits | 32 sign bytes | 4 bytes of scales */
        float d = f16(b);
        for (int g = 0; g < 32; g++) { /* 8 values: grid entries 2g, 2g + 1 */
            float db = d * (float)(1 + 2 * ((b[106 + g / 8] >> (4 * (g / 4 % 2))) & 15));
            uint8_t row[8];
            for (int h = 0; h < 2; h++) {
                int i = 2 * g + h, idx = b[2 + i] | ((b[66 + i / 8] >> (i % 8)) & 1) << 8;
                memcpy(row + 4 * h, g_iq3s + 4 * idx, 4);
            }
            put8(y + 8 * g, row, db, b[74 + g]);
        }
        return 0;
    }
    case IQ1_S: { /* d | 32 low index bytes | 8 x u16 (4 x 3 high index bits | scale << 12 | delta sign << 15) */
        float d = f16(b);
        for (int ib = 0; ib < 8; ib++) {
            uint16_t h = u16(b + 34 + 2 * ib);
            float dl = d * (float)(2 * ((h >> 12) & 7) + 1), delta = h & 0x8000 ? -0.125f : 0.125f;
            for (int l = 0; l < 4; l++) {
                const int8_t *row = g_iq1s + 8 * (b[2 + 4 * ib + l] | ((h >> 3 * l) & 7) << 8);
                for (int j = 0; j < 8; j++) y[32 * ib + 8 * l + j] = dl * ((float)row[j] + delta);
            }
        }
        return 0;
    }
    case IQ1_M: { /* 32 low index bytes | 16 bytes (per entry a nibble: 3 high index bits | delta sign) |
                   * 4 x u16 (4 x 3-bit scales; their top nibbles together: the f16 d) */
        uint16_t sc[4];
        for (int i = 0; i < 4; i++) sc[i] = u16(b + 48 + 2 * i);
        uint16_t dbits = (uint16_t)((sc[0] & 0xF000) >> 12 | (sc[1] & 0xF000) >> 8 | (sc[2] & 0xF000) >> 4 | (sc[3] & 0xF000));
        float d = ly_f16_to_f32(dbits);
        for (int i = 0; i < 32; i++) {
            int nib = (b[32 + i / 2] >> (4 * (i % 2))) & 15, s = i / 2;
            float dl = d * (float)(2 * ((sc[s / 4] >> (3 * (s % 4))) & 7) + 1);
            float delta = nib & 8 ? -0.125f : 0.125f;
            const int8_t *row = g_iq1s + 8 * (b[i] | (nib & 7) << 8);
            for (int j = 0; j < 8; j++) y[8 * i + j] = dl * ((float)row[j] + delta);
        }
        return 0;
    }
    default: return -1;
    }
}

static int block_bytes(int type) {
    switch (type) {
    case IQ2_XXS: return 66; case IQ2_XS: return 74; case IQ2_S: return 82; case IQ3_XXS: return 98;
    case IQ3_S: return 110; case IQ1_S: return 50; case IQ1_M: return 56; default: return 0;
    }
}

/* n_blocks superblocks -> 256 * n_blocks floats; -1 for a type that is not an IQ2/IQ3/IQ1 format. */
LY_API int ly_iq_dequantize(int type, const uint8_t *raw, int64_t n_blocks, float *out) {
    int bb = block_bytes(type);
    if (!bb) return -1;
    for (int64_t i = 0; i < n_blocks; i++) decode_block(type, raw + i * bb, out + 256 * i);
    return 0;
}

#define IQ_TILE(NAME, TYPE)                                                                                 \
    static void NAME(const uint8_t *w, size_t rb, int64_t r0, int64_t r1, const ly_act *a, int64_t t0,     \
                     int64_t t1, float *y, int64_t ldy) {                                                   \
        iq_tile(TYPE, w, rb, r0, r1, a, t0, t1, y, ldy);                                                    \
    }

static void iq_tile(int type, const uint8_t *w, size_t row_bytes, int64_t r0, int64_t r1, const ly_act *a,
                    int64_t t0, int64_t t1, float *y, int64_t ldy) {
    int64_t k = a->k, nb = k / 32;
    float *wf = malloc((size_t)k * sizeof *wf);
    if (!wf) return;
    for (int64_t r = r0; r < r1; r++) {
        ly_iq_dequantize(type, w + r * row_bytes, k / 256, wf);
        for (int64_t t = t0; t < t1; t++) {
            const int8_t *q = a->q + t * k;
            const float *dx = a->d + t * nb;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                float s = 0.0f;
                for (int j = 0; j < 32; j++) s = s + wf[32 * b + j] * (float)q[32 * b + j];
                acc = acc + s * dx[b];
            }
            y[t * ldy + r] = acc;
        }
    }
    free(wf);
}

IQ_TILE(tile_iq2_xxs, IQ2_XXS)
IQ_TILE(tile_iq2_xs, IQ2_XS)
IQ_TILE(tile_iq2_s, IQ2_S)
IQ_TILE(tile_iq3_xxs, IQ3_XXS)
IQ_TILE(tile_iq3_s, IQ3_S)
IQ_TILE(tile_iq1_s, IQ1_S)
IQ_TILE(tile_iq1_m, IQ1_M)

ly_tile_fn ly_tiles_iq_portable(int type) {
    switch (type) {
    case IQ2_XXS: return tile_iq2_xxs; case IQ2_XS: return tile_iq2_xs; case IQ2_S: return tile_iq2_s;
    case IQ3_XXS: return tile_iq3_xxs; case IQ3_S: return tile_iq3_s; case IQ1_S: return tile_iq1_s;
    case IQ1_M: return tile_iq1_m;
    default: return NULL;
    }
}
