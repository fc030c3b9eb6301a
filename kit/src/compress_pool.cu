// compress_pool: ratio-2 compressor pooling (model.md §3.5; runtime/ref/compress_pool.h) of every group
// closing in the round: per channel, with the group's two tokens t = 0, 1 (a_t, s_t fp32),
// latent = bf16(a0·(e0/Σ) + a1·(e1/Σ)), e_t = exp(s_t − max(s0, s1)), Σ = e0 + e1, in fp32 in the CPU's
// order (_rn intrinsics, no contraction). The first token comes from the round's rows or, when it ran in
// an earlier round, from the sequence's state ring; the second is always a round row (entries[g] =
// {first: round row >= 0, or -1 - state row; second: round row}). exp is the double exp rounded to
// float, for the CPU's glibc expf: both are within about half an ulp of the true value (glibc's bound is
// 0.502 ulp), so they round alike but for near-ties; CUDA's expf is only within 2 ulp. No reduction: each
// channel is its own. Tuned for 1-2048 groups of 512 channels: one thread per 8 channels (16-byte loads
// and a 16-byte store).
#include "dskit_kernel.cuh"

__device__ __forceinline__ float exp_f32(float x) { return (float)exp((double)x); }

__device__ __forceinline__ float pool_channel(float a0, float s0, float a1, float s1)
{
    float mx = s0 > s1 ? s0 : s1;
    float e0 = exp_f32(__fsub_rn(s0, mx)), e1 = exp_f32(__fsub_rn(s1, mx)), sum = __fadd_rn(e0, e1);
    return __fadd_rn(__fmul_rn(a0, __fdiv_rn(e0, sum)), __fmul_rn(a1, __fdiv_rn(e1, sum)));
}

DSK_KERNEL void __launch_bounds__(P_T) DSK_SYMBOL(const float *__restrict__ a, const float *__restrict__ s,
                                                  i64 stride, const float *__restrict__ st_a,
                                                  const float *__restrict__ st_s, i64 st_stride,
                                                  const int *__restrict__ entries, u16 *__restrict__ out,
                                                  i64 out_stride, int groups, int hd)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int per_group = hd >> 3;
    const i64 t = (i64)blockIdx.x * P_T + threadIdx.x;
    if (t >= (i64)groups * per_group)
        return;
    const int g = (int)(t / per_group), c = (int)(t % per_group);
    const int first = entries[2 * g], second = entries[2 * g + 1];
    const float4 *a0p, *s0p;
    if (first >= 0) {
        a0p = (const float4 *)(a + (i64)first * stride) + 2 * c;
        s0p = (const float4 *)(s + (i64)first * stride) + 2 * c;
    } else {
        a0p = (const float4 *)(st_a + (i64)(-1 - first) * st_stride) + 2 * c;
        s0p = (const float4 *)(st_s + (i64)(-1 - first) * st_stride) + 2 * c;
    }
    const float4 *a1p = (const float4 *)(a + (i64)second * stride) + 2 * c;
    const float4 *s1p = (const float4 *)(s + (i64)second * stride) + 2 * c;
    float4 va0[2] = {a0p[0], a0p[1]}, vs0[2] = {s0p[0], s0p[1]}, va1[2] = {a1p[0], a1p[1]}, vs1[2] = {s1p[0], s1p[1]};
    u32 o[4];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float l0 = pool_channel(va0[h].x, vs0[h].x, va1[h].x, vs1[h].x);
        float l1 = pool_channel(va0[h].y, vs0[h].y, va1[h].y, vs1[h].y);
        float l2 = pool_channel(va0[h].z, vs0[h].z, va1[h].z, vs1[h].z);
        float l3 = pool_channel(va0[h].w, vs0[h].w, va1[h].w, vs1[h].w);
        o[2 * h] = (u32)f32_to_bf16_bits(l0) | (u32)f32_to_bf16_bits(l1) << 16;
        o[2 * h + 1] = (u32)f32_to_bf16_bits(l2) | (u32)f32_to_bf16_bits(l3) << 16;
    }
    ((uint4 *)(out + (i64)g * out_stride))[c] = make_uint4(o[0], o[1], o[2], o[3]);
}
