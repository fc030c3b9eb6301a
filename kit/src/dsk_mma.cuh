// Tensor-core mma.sync m16n8k16 with fp32 accumulate, D += A·B, in the PTX ISA fragment layouts
// (g = lane / 4, t = lane % 4; element pairs low half first):
//   A (16 x 16, row): register a_j holds A[g + 8(j & 1)][2t + 8(j >> 1) + {0, 1}]
//   B (16 x 8, col):  register b_j holds B[2t + 8j + {0, 1}][g]
//   C, D (16 x 8):    element i is D[g + 8(i >> 1)][2t + (i & 1)]
// Under DSK_EMU the emulator computes the same product from the same registers (docs/emulator.md).
// The A registers are separate arguments: passing them as an array changed rowmm's SASS schedule.
#pragma once
#include "dskit_kernel.cuh"

#ifndef DSK_EMU
// fp16 A and B.
__device__ __forceinline__ void dsk_mma_16816_f16(float d[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// bf16 A and B. Volatile: the mmas keep their place among volatile loads (rowmm's batches).
__device__ __forceinline__ void dsk_mma_16816_bf16(float d[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
#else
__device__ __forceinline__ void dsk_mma_16816_f16(float d[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1)
{
    const u32 a[4] = {a0, a1, a2, a3};
    emu_mma_16816(EMU_MMA_F16, d, a, b0, b1);
}
__device__ __forceinline__ void dsk_mma_16816_bf16(float d[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1)
{
    const u32 a[4] = {a0, a1, a2, a3};
    emu_mma_16816(EMU_MMA_BF16, d, a, b0, b1);
}
#endif
