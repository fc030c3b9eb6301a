// Shared by every kernel source of the kit. The builder compiles each variant with its parameters as
// -D definitions (axis NAME as the macro P_NAME), DSK_SYMBOL = the variant's exported name and DSK_SM = the target's SM number.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// Every variant exports one extern "C" entry point named after its parameters.
#define DSK_KERNEL extern "C" __global__

__device__ __forceinline__ float bf16_bits_to_f32(u16 h) { return __uint_as_float((u32)h << 16); }

// fp32 -> bf16 bits, round to nearest even (NaN kept quiet), the same as the CPU's f32_to_bf16.
__device__ __forceinline__ u16 f32_to_bf16_bits(float f)
{
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (u16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

// Warp-wide sum with a fixed butterfly order: every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
