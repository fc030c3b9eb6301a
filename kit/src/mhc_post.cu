// hc_post of model.md §3.4 (reference hc_post in runtime/ref/mhc.c): Xout[r][j] = bf16(post_j·y[r] +
// Σ_i comb[i][j]·X[r][i]), the comb sum first in stream order, then post·y added, each product and sum
// rounded once as on the CPU (no FMA): bit-equal to the reference. One thread per 8 elements of a row
// (all its streams); post and comb from the row's coefficient row [pre | post | comb] (fp32). Xout never
// aliases X. Memory-bound: reads (hc+1)·d and writes hc·d bf16 per row, 16-byte accesses. With y_f32, y is
// fp32 (a summed partial) and each value is rounded to bf16 first (f32_to_bf16_bits, cast.cu's MODE 0): the
// bits of the cast followed by this kernel, in one launch.
//
// A rows copy (rows_copy.cuh: cn rows of c_bytes, c_src row c_src_idx[i] to c_dst row c_dst_idx[i]) may
// ride in the same launch as CTAs past the post's (the window keys into their ring after the attention):
// it must neither read what the post writes nor write what the post reads (the launcher's rule); cn 0:
// none.
#include "rows_copy.cuh"

#define HC P_HC
#define M ((2 + HC) * HC)
#define THREADS 256

__device__ __forceinline__ float lane_f(uint4 v, int e)
{
    const u32 p = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
    return __uint_as_float(e & 1 ? p & 0xffff0000u : p << 16);
}

DSK_KERNEL void __launch_bounds__(THREADS)
    DSK_SYMBOL(const void *__restrict__ y, const u16 *__restrict__ x, const float *__restrict__ coef,
               u16 *__restrict__ xout, int rows, int d, int y_f32, const u8 *__restrict__ c_src, i64 c_src_stride,
               const int *__restrict__ c_src_idx, u8 *__restrict__ c_dst, i64 c_dst_stride,
               const int *__restrict__ c_dst_idx, int cn, int c_bytes)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int nvec = d / 8;
    const i64 post_blocks = ((i64)rows * nvec + THREADS - 1) / THREADS;
    if (blockIdx.x >= post_blocks) {
        const i64 ct = (blockIdx.x - post_blocks) * THREADS + threadIdx.x;
        rows_copy_chunk(c_src, c_src_stride, c_src_idx, c_dst, c_dst_stride, c_dst_idx, cn, c_bytes, ct);
        return;
    }
    const i64 t = (i64)blockIdx.x * THREADS + threadIdx.x;
    if (t >= (i64)rows * nvec)
        return;
    const i64 row = t / nvec;
    const int v = (int)(t - row * nvec);
    const float *k = coef + row * M;
    uint4 yv;
    if (y_f32) {
        const float4 *yr = (const float4 *)((const float *)y + row * d) + 2 * v;
        const float4 a = yr[0], b = yr[1];
        yv = make_uint4((u32)f32_to_bf16_bits(a.x) | (u32)f32_to_bf16_bits(a.y) << 16,
                        (u32)f32_to_bf16_bits(a.z) | (u32)f32_to_bf16_bits(a.w) << 16,
                        (u32)f32_to_bf16_bits(b.x) | (u32)f32_to_bf16_bits(b.y) << 16,
                        (u32)f32_to_bf16_bits(b.z) | (u32)f32_to_bf16_bits(b.w) << 16);
    } else
        yv = ((const uint4 *)((const u16 *)y + row * d))[v];
    const uint4 *xr = (const uint4 *)(x + row * HC * d);
    uint4 xs[HC];
#pragma unroll
    for (int i = 0; i < HC; i++)
        xs[i] = xr[(i64)i * nvec + v];
    uint4 *outr = (uint4 *)(xout + row * HC * d);
#pragma unroll
    for (int j = 0; j < HC; j++) {
        const float post = k[HC + j];
        float c[HC];
#pragma unroll
        for (int i = 0; i < HC; i++)
            c[i] = k[2 * HC + i * HC + j];
        u32 o[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            u32 h[2];
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int e = 2 * q + u;
                float acc = __fmul_rn(c[0], lane_f(xs[0], e));
#pragma unroll
                for (int i = 1; i < HC; i++)
                    acc = __fadd_rn(acc, __fmul_rn(c[i], lane_f(xs[i], e)));
                h[u] = f32_to_bf16_bits(__fadd_rn(__fmul_rn(post, lane_f(yv, e)), acc));
            }
            o[q] = h[0] | h[1] << 16;
        }
        outr[(i64)j * nvec + v] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}
