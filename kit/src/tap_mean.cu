// DSpark taps (model.md §3.2; reference ref_tap_mean in runtime/ref/tap_mean.c): t[r][k] =
// bf16((Σ_c X[r][c][k]) / hc), the streams added in order from 0 and divided once, as on the CPU (no
// FMA): bit-equal to the reference. Written at taps[r][target] of a [rows][n_targets][d] buffer. One
// thread per 8 elements of a row; memory-bound: reads hc·d, writes d bf16 per row.
#include "dskit_kernel.cuh"

#define HC P_HC
#define THREADS 256

DSK_KERNEL void __launch_bounds__(THREADS)
    DSK_SYMBOL(const u16 *__restrict__ x, u16 *__restrict__ taps, int rows, int d, int n_targets, int target)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int nvec = d / 8;
    const i64 t = (i64)blockIdx.x * THREADS + threadIdx.x;
    if (t >= (i64)rows * nvec)
        return;
    const i64 row = t / nvec;
    const int v = (int)(t - row * nvec);
    const uint4 *xr = (const uint4 *)(x + row * HC * d);
    uint4 xs[HC];
#pragma unroll
    for (int i = 0; i < HC; i++)
        xs[i] = xr[(i64)i * nvec + v];
    u32 o[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        float a = 0.0f, b = 0.0f;
#pragma unroll
        for (int i = 0; i < HC; i++) {
            const u32 p = q == 0 ? xs[i].x : q == 1 ? xs[i].y : q == 2 ? xs[i].z : xs[i].w;
            a = __fadd_rn(a, __uint_as_float(p << 16));
            b = __fadd_rn(b, __uint_as_float(p & 0xffff0000u));
        }
        o[q] = (u32)f32_to_bf16_bits(__fdiv_rn(a, (float)HC)) | (u32)f32_to_bf16_bits(__fdiv_rn(b, (float)HC)) << 16;
    }
    ((uint4 *)(taps + (row * n_targets + target) * d))[v] = make_uint4(o[0], o[1], o[2], o[3]);
}
