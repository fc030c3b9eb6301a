// The vision_mm family's epilogue, shared by its two kernels (vision_mm.cu on mma.sync, vision_mm_wgmma.cu
// on Hopper's wgmma): columns col, col + 1 (col even) of row `row` from their fp32 sums a0, a1 and the bias
// b0, b1, per MODE (vision_mm.cu's header): 0 bias, 1 residual add in place, 2 erf-GELU, 3 SwiGLU of the
// interleaved gate/up pair into y [M][N/2].
#pragma once
#include "dskit_kernel.cuh"

__device__ __forceinline__ float vmm_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }

__device__ __forceinline__ void vmm_store(u16 *y, int row, int col, int N, int mode, float a0, float a1, float b0,
                                          float b1)
{
    float v0 = bf16_bits_to_f32(f32_to_bf16_bits(a0 + b0));
    float v1 = bf16_bits_to_f32(f32_to_bf16_bits(a1 + b1));
    if (mode == 3) {
        float sg = bf16_bits_to_f32(f32_to_bf16_bits(v0 / (1.0f + expf(-v0))));
        y[(i64)row * (N / 2) + col / 2] = f32_to_bf16_bits(sg * v1);
        return;
    }
    u32 *out = (u32 *)(y + (i64)row * N + col);
    if (mode == 1) {
        u32 old = *out;
        v0 = bf16_bits_to_f32((u16)(old & 0xffffu)) + v0;
        v1 = bf16_bits_to_f32((u16)(old >> 16)) + v1;
    } else if (mode == 2) {
        v0 = vmm_gelu(v0);
        v1 = vmm_gelu(v1);
    }
    *out = (u32)f32_to_bf16_bits(v0) | (u32)f32_to_bf16_bits(v1) << 16;
}
