// Device helpers shared by the EXL3 kernels: the 128-point Hadamard butterfly with the CPU
// reference's exact operation order and the input transform of exl3.md §3. The numerics here are the
// rounding points every EXL3 form shares. The mma is dsk_mma.cuh's, cp.async dskit_kernel.cuh's.
#pragma once
#include "dsk_mma.cuh"
#include "dskit_kernel.cuh"
#include "exl3_abi.cuh"

// The kernel's dynamic shared memory.
#define EXL3_DYNAMIC_SMEM(name) DSK_DYNAMIC_SMEM(name)

#define EXL3_HAD_SCALE 0.088388347648f

// v[i] = element 4·lane + i of a 128-vector: Hadamard128 in place, then × 1/sqrt(128). Stages over
// bit 1, 2, 4, ..., 64 as exl3_hadamard128: the element with the bit clear becomes x + y, the one with
// it set x − y; fmaf(±1, self, partner) is that one fp32 add, rounded once.
__device__ __forceinline__ void exl3_had128(float v[4], int lane)
{
    float a = v[0] + v[1], b = v[0] - v[1], c = v[2] + v[3], d = v[2] - v[3];
    v[0] = a + c;
    v[2] = a - c;
    v[1] = b + d;
    v[3] = b - d;
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
        float sgn = (lane & m) ? -1.0f : 1.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float p = __shfl_xor_sync(0xffffffffu, v[i], m);
            v[i] = fmaf(sgn, v[i], p);
        }
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
        v[i] = __fmul_rn(v[i], EXL3_HAD_SCALE);
}

__device__ __forceinline__ float exl3_h2f(u16 h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ u16 exl3_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

// Input transform of one 128-block of one row (exl3.md §3 steps 1-2), lane by lane: x4 = the row's
// bf16 elements 4·lane..4·lane+3 of the block, s4 = suh at the same positions. Returns the two fp16x2
// words of x' (elements 4l,4l+1 and 4l+2,4l+3): xs = fp16(x·suh) (the fp32 product is exact), then
// fp16(Hadamard128(xs)).
__device__ __forceinline__ uint2 exl3_transform4(uint2 x4, uint2 s4, int lane)
{
    u16 xb[4] = {(u16)(x4.x & 0xffff), (u16)(x4.x >> 16), (u16)(x4.y & 0xffff), (u16)(x4.y >> 16)};
    u16 sb[4] = {(u16)(s4.x & 0xffff), (u16)(s4.x >> 16), (u16)(s4.y & 0xffff), (u16)(s4.y >> 16)};
    float v[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        v[i] = exl3_h2f(exl3_f2h(__fmul_rn(bf16_bits_to_f32(xb[i]), exl3_h2f(sb[i]))));
    exl3_had128(v, lane);
    uint2 r;
    r.x = (u32)exl3_f2h(v[0]) | (u32)exl3_f2h(v[1]) << 16;
    r.y = (u32)exl3_f2h(v[2]) | (u32)exl3_f2h(v[3]) << 16;
    return r;
}

// Where the transform's two words go in the fragment-ordered x' of one 128-block: u32 index into
// [row group][chunk 0..7][lane 0..31][2] for row j (0..M-1) and the transforming lane. The mma B
// fragment of chunk c for row group rg is word pair [rg][c][L][0..1]: {x'[8rg + L/4][16c + 2(L%4) + 0,1]}
// and {... + 8, 9}. Element 4·lane + i of the block is chunk lane/4, position q = 4(lane%4) + i.
__device__ __forceinline__ int exl3_xf_index(int j, int lane)
{
    int c = lane >> 2, q0 = 4 * (lane & 3);
    int L = 4 * (j & 7) + ((q0 & 7) >> 1);
    return (((j >> 3) * 8 + c) * 32 + L) * 2 + (q0 >> 3);
}


// Column-to-lane butterfly for a 128-vector held as v[i] = element lane + 32·i (the layout of
// column passes over shared memory): the same stages and the same operations per element as
// exl3_had128, so the same bits.
__device__ __forceinline__ void exl3_had128_strided(float v[4], int lane)
{
#pragma unroll
    for (int m = 1; m < 32; m <<= 1) {
        float sgn = (lane & m) ? -1.0f : 1.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float p = __shfl_xor_sync(0xffffffffu, v[i], m);
            v[i] = fmaf(sgn, v[i], p);
        }
    }
    float a = v[0] + v[1], b = v[0] - v[1], c = v[2] + v[3], d = v[2] - v[3];
    // bit 32 pairs (v0, v1) and (v2, v3); bit 64 pairs (v0, v2) and (v1, v3)
    v[0] = a + c;
    v[2] = a - c;
    v[1] = b + d;
    v[3] = b - d;
#pragma unroll
    for (int i = 0; i < 4; i++)
        v[i] = __fmul_rn(v[i], EXL3_HAD_SCALE);
}
