// C prelude for ggml's CPU reference functions, extracted from the tree under
// test (src/ggml-quants.c, src/ggml-cpu/quants.c) and compiled as C. ggml
// takes these macros from ggml-impl.h / ggml-cpu-impl.h; the fp16
// conversions are IEEE binary16 (fp16 -> fp32 is exact; fp32 -> fp16 rounds
// to nearest even, as ggml's F16C and software paths do).
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GGML_COMMON_DECL_C
#include "ggml-common.h"

#define GGML_RESTRICT restrict
#define UNUSED(x) (void)(x)
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static inline float msim_fp16_to_fp32(ggml_half h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    uint32_t bits = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e - 15u + 127u) << 23) | (m << 13));
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline ggml_half msim_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (ggml_half)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return (ggml_half)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        float af;
        memcpy(&af, &ax, 4);
        return (ggml_half)(sign | (uint32_t)nearbyintf(af * 16777216.0f));
    }
    uint32_t h = (((ax >> 23) - 127u + 15u) << 10) | ((ax & 0x7fffffu) >> 13);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (ggml_half)(sign | h);
}

#define GGML_FP16_TO_FP32(x) msim_fp16_to_fp32(x)
#define GGML_FP32_TO_FP16(x) msim_fp32_to_fp16(x)
#define GGML_CPU_FP16_TO_FP32(x) msim_fp16_to_fp32(x)
#define GGML_CPU_FP32_TO_FP16(x) msim_fp32_to_fp16(x)
