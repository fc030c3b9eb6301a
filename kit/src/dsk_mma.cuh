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

// ldmatrix.x4: four 8 x 8 bf16 matrices from shared memory into fragments. Lane L gives the address of
// row L % 8 of matrix L / 8 (16 contiguous, 16-byte aligned bytes). Plain: r[i] = matrix i's row g,
// elements 2t, 2t + 1 (an A fragment, or the B fragment of an n x k tile stored n-major). Transposed
// (_trans): r[i] = matrix i's elements [2t][g] and [2t + 1][g] (the B fragment of a k x n tile stored
// k-major). Low half first. Under DSK_EMU (no ldmatrix there) both are built from shuffles of the lanes'
// addresses.
#ifndef DSK_EMU
__device__ __forceinline__ void dsk_ldsm_x4(u32 r[4], const void *row)
{
    const u32 a = (u32)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void dsk_ldsm_x4_trans(u32 r[4], const void *row)
{
    const u32 a = (u32)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
#else
__device__ __forceinline__ void dsk_ldsm_x4(u32 r[4], const void *row)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const unsigned long long mine = (unsigned long long)row;
    for (int i = 0; i < 4; i++) {
        const u16 *p = (const u16 *)__shfl_sync(0xffffffffu, mine, 8 * i + g);
        r[i] = (u32)p[2 * t] | (u32)p[2 * t + 1] << 16;
    }
}
__device__ __forceinline__ void dsk_ldsm_x4_trans(u32 r[4], const void *row)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const unsigned long long mine = (unsigned long long)row;
    for (int i = 0; i < 4; i++) {
        const u16 *r0 = (const u16 *)__shfl_sync(0xffffffffu, mine, 8 * i + 2 * t);
        const u16 *r1 = (const u16 *)__shfl_sync(0xffffffffu, mine, 8 * i + 2 * t + 1);
        r[i] = (u32)r0[g] | (u32)r1[g] << 16;
    }
}
#endif
