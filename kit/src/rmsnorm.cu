// RMSNorm of bf16 rows (model.md §2): y = bf16(w * (x * (mean(x^2) + eps)^-1/2)), fp32 math. One block
// per row; T threads; width a multiple of 8 (16-byte loads). The reduction order depends only on T and
// the width, so a row's bits never depend on the other rows.
#include "dskit_kernel.cuh"

DSK_KERNEL void __launch_bounds__(P_T) DSK_SYMBOL(const u16 *__restrict__ x, const u16 *__restrict__ w,
                                                u16 *__restrict__ y, int rows, int width, float eps)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    int row = blockIdx.x;
    if (row >= rows)
        return;
    const uint4 *xr = (const uint4 *)(x + (i64)row * width);
    uint4 *yr = (uint4 *)(y + (i64)row * width);
    const uint4 *wv = (const uint4 *)w;
    int nvec = width / 8;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < nvec; i += P_T) {
        uint4 v = xr[i];
        u32 p[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float a = __uint_as_float(p[j] << 16), b = __uint_as_float(p[j] & 0xffff0000u);
            ss += a * a;
            ss += b * b;
        }
    }
    ss = warp_sum(ss);
    __shared__ float part[P_T / 32];
    __shared__ float inv_s;
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int i = 0; i < P_T / 32; i++)
            s += part[i];
        inv_s = 1.0f / sqrtf(s / (float)width + eps);
    }
    __syncthreads();
    float inv = inv_s;
    for (int i = threadIdx.x; i < nvec; i += P_T) {
        uint4 v = xr[i], g = wv[i];
        u32 p[4] = {v.x, v.y, v.z, v.w}, q[4] = {g.x, g.y, g.z, g.w}, o[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float a = __uint_as_float(p[j] << 16), b = __uint_as_float(p[j] & 0xffff0000u);
            float wa = __uint_as_float(q[j] << 16), wb = __uint_as_float(q[j] & 0xffff0000u);
            u16 ya = f32_to_bf16_bits(__fmul_rn(__fmul_rn(a, inv), wa));
            u16 yb = f32_to_bf16_bits(__fmul_rn(__fmul_rn(b, inv), wb));
            o[j] = (u32)ya | (u32)yb << 16;
        }
        yr[i] = make_uint4(o[0], o[1], o[2], o[3]);
    }
}
