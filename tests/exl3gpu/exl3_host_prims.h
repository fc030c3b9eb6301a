/* Host versions of the CUDA primitives kit/src/exl3_dq.cuh uses (C and C++), so the lane decode runs on
 * the CPU: in test_exl3_dq.c and in the kernel emulator (tests/emu, docs/emulator.md). */
#ifndef DSK_EXL3_HOST_PRIMS_H
#define DSK_EXL3_HOST_PRIMS_H

#include "runtime/common/numerics.h"

#include <stdint.h>

#define EXL3_HOST_PRIMITIVES
#define EXL3_FN static inline
typedef uint32_t exl3_u32;

static inline exl3_u32 exl3_fshl(exl3_u32 lo, exl3_u32 hi, exl3_u32 s)
{
    return (exl3_u32)(((((uint64_t)hi << 32) | lo) << (s & 31)) >> 32);
}

static inline exl3_u32 exl3_prmt(exl3_u32 a, exl3_u32 b, exl3_u32 sel)
{
    uint64_t v = ((uint64_t)b << 32) | a;
    exl3_u32 r = 0;
    for (int n = 0; n < 4; n++)
        r |= (exl3_u32)((v >> (8 * ((sel >> (4 * n)) & 7))) & 0xFF) << (8 * n);
    return r;
}

static inline exl3_u32 exl3_dp4a(exl3_u32 a, exl3_u32 b, exl3_u32 c)
{
    for (int n = 0; n < 4; n++)
        c += ((a >> (8 * n)) & 0xFF) * ((b >> (8 * n)) & 0xFF);
    return c;
}

static inline exl3_u32 exl3_andxor(exl3_u32 a, exl3_u32 b, exl3_u32 c)
{
    return (a & b) ^ c;
}

/* fp16x2 fma and the sum of an fp16 pair's halves through fp32: exact for the decoder's operands (exl3.md §2.5), then one RNE. */
static inline exl3_u32 exl3_hfma2(exl3_u32 a, exl3_u32 b, exl3_u32 c)
{
    exl3_u32 r = 0;
    for (int h = 0; h < 2; h++) {
        float v = f16_to_f32((uint16_t)(a >> (16 * h))) * f16_to_f32((uint16_t)(b >> (16 * h))) +
                  f16_to_f32((uint16_t)(c >> (16 * h)));
        r |= (exl3_u32)f32_to_f16(v) << (16 * h);
    }
    return r;
}

static inline uint16_t half_sum(exl3_u32 x)
{
    return f32_to_f16(f16_to_f32((uint16_t)(x & 0xFFFF)) + f16_to_f32((uint16_t)(x >> 16)));
}

static inline exl3_u32 exl3_hsum2(exl3_u32 a, exl3_u32 b)
{
    return (exl3_u32)half_sum(a) | (exl3_u32)half_sum(b) << 16;
}

#endif
