// RoPE on interleaved pairs of the last R dims of every head vector (model.md §2, §3.5), in place on
// bf16, with a host-made (cos, sin) table. One thread per pair; products and sums rounded separately
// (no fused multiply-add), so the result equals the CPU reference bit for bit.
#include "dskit_kernel.cuh"

DSK_KERNEL void __launch_bounds__(256) DSK_SYMBOL(u16 *__restrict__ x, const int *__restrict__ pos,
                                                  const float2 *__restrict__ table, int rows, int heads,
                                                  int head_dim, int inverse)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int half = P_R / 2;
    i64 t = (i64)blockIdx.x * 256 + threadIdx.x;
    i64 total = (i64)rows * heads * half;
    if (t >= total)
        return;
    int j = (int)(t % half);
    i64 vec = t / half; // row * heads + head
    int row = (int)(vec / heads);
    u32 *pair = (u32 *)(x + vec * head_dim + (head_dim - P_R)) + j;
    float2 cs = table[(i64)pos[row] * half + j];
    float s = inverse ? -cs.y : cs.y;
    u32 v = *pair;
    float a = __uint_as_float(v << 16), b = __uint_as_float(v & 0xffff0000u);
    float re = __fsub_rn(__fmul_rn(a, cs.x), __fmul_rn(b, s));
    float im = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, cs.x));
    *pair = (u32)f32_to_bf16_bits(re) | (u32)f32_to_bf16_bits(im) << 16;
}
