// Shared by the top-k kernels: the total order they rank by.
#pragma once
#include "dskit_kernel.cuh"

// A key whose unsigned order is the float order, NaN lowest and -0 equal to +0.
__device__ __forceinline__ u32 topk_order_key(float f)
{
    if (f != f)
        return 0u;
    if (f == 0.0f)
        f = 0.0f;
    u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The warp's largest 64-bit key (a composite key << 32 | ~index: the winner of a round), on every lane.
__device__ __forceinline__ u64 warp_max_u64(u64 v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        u64 t = __shfl_xor_sync(0xffffffffu, v, o);
        v = t > v ? t : v;
    }
    return v;
}

// score[i] (+ bias[i]), the value ranked.
__device__ __forceinline__ float topk_source(const float *s, const float *bias, i64 i)
{
    return bias ? s[i] + bias[i] : s[i];
}
