// hc_pre's row (model.md §3.4; reference hc_pre in runtime/ref/mhc.c) as a device function of T threads:
// the mhc_pre kernel's body (kit/src/mhc_pre.cu), also run by mhc_mix's extra CTAs when the two share a
// launch (the same code, so the same bits). Needs HC defined (the streams) before inclusion.
#pragma once
#include "dskit_kernel.cuh"
#include "mhc_abi.cuh"

// vectors per thread loaded together: d <= 6144 (T 256), 1280 (T 128) in one batch
#define PRE_BATCH(T) ((T) == 256 ? 3 : 2)
__device__ __forceinline__ float lo_f(u32 p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float hi_f(u32 p) { return __uint_as_float(p & 0xffff0000u); }

// Row `row` by a block of T threads; ybuf: MHC_PRE_MAX_D / 8 vectors of shared memory (the caller's).
template <int T>
__device__ __forceinline__ void pre_row(const u16 *__restrict__ x, const float *__restrict__ w, int w_stride,
                                        const u16 *__restrict__ g, float eps, u16 *__restrict__ out,
                                        u16 *__restrict__ y_raw, int row, int d, uint4 *ybuf)
{
    const int nvec = d / 8;
    const uint4 *xr = (const uint4 *)(x + (i64)row * HC * d);
    float wv[HC];
#pragma unroll
    for (int i = 0; i < HC; i++)
        wv[i] = w[(i64)row * w_stride + i];
    uint4 *outr = (uint4 *)(out + (i64)row * d), *rawr = y_raw ? (uint4 *)(y_raw + (i64)row * d) : nullptr;
    float ss = 0.0f;
    /* PRE_BATCH(T) vectors per thread have their loads in flight together (at d = 5120 a row is one batch);
     * the thread still takes its vectors in ascending order, as rmsnorm.cu does */
    for (int v0 = threadIdx.x; v0 < nvec; v0 += PRE_BATCH(T) * T) {
        uint4 s[PRE_BATCH(T)][HC];
#pragma unroll
        for (int u = 0; u < PRE_BATCH(T); u++)
#pragma unroll
            for (int i = 0; i < HC; i++)
                s[u][i] = v0 + u * T < nvec ? xr[(i64)i * nvec + v0 + u * T] : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < PRE_BATCH(T); u++) {
            const int v = v0 + u * T;
            if (v >= nvec)
                break;
            u32 o[4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                u32 p[HC];
#pragma unroll
                for (int i = 0; i < HC; i++)
                    p[i] = q == 0 ? s[u][i].x : q == 1 ? s[u][i].y : q == 2 ? s[u][i].z : s[u][i].w;
                float a = __fmul_rn(wv[0], lo_f(p[0])), b = __fmul_rn(wv[0], hi_f(p[0]));
#pragma unroll
                for (int i = 1; i < HC; i++) {
                    a = __fadd_rn(a, __fmul_rn(wv[i], lo_f(p[i])));
                    b = __fadd_rn(b, __fmul_rn(wv[i], hi_f(p[i])));
                }
                const u32 ya = f32_to_bf16_bits(a), yb = f32_to_bf16_bits(b);
                o[q] = ya | yb << 16;
                if (g) { /* rmsnorm.cu's sum of squares of the bf16 values */
                    const float fa = bf16_bits_to_f32((u16)ya), fb = bf16_bits_to_f32((u16)yb);
                    ss = fmaf(fa, fa, ss);
                    ss = fmaf(fb, fb, ss);
                }
            }
            const uint4 yv = make_uint4(o[0], o[1], o[2], o[3]);
            if (!g)
                outr[v] = yv;
            else {
                ybuf[v] = yv;
                if (rawr)
                    rawr[v] = yv;
            }
        }
    }
    if (!g)
        return;
    ss = warp_sum(ss);
    __shared__ float part[T / 32];
    __shared__ float inv_s;
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int i = 0; i < T / 32; i++)
            t += part[i];
        inv_s = 1.0f / sqrtf(t / (float)d + eps);
    }
    __syncthreads();
    const float inv = inv_s;
    const uint4 *gv = (const uint4 *)g;
    for (int v0 = threadIdx.x; v0 < nvec; v0 += PRE_BATCH(T) * T) {
        uint4 gw[PRE_BATCH(T)];
#pragma unroll
        for (int u = 0; u < PRE_BATCH(T); u++)
            gw[u] = v0 + u * T < nvec ? gv[v0 + u * T] : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < PRE_BATCH(T); u++) {
            const int v = v0 + u * T;
            if (v >= nvec)
                break;
            const uint4 yv = ybuf[v];
            const u32 p[4] = {yv.x, yv.y, yv.z, yv.w}, q[4] = {gw[u].x, gw[u].y, gw[u].z, gw[u].w};
            u32 o[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const u16 na = f32_to_bf16_bits(__fmul_rn(__fmul_rn(lo_f(p[j]), inv), lo_f(q[j])));
                const u16 nb = f32_to_bf16_bits(__fmul_rn(__fmul_rn(hi_f(p[j]), inv), hi_f(q[j])));
                o[j] = (u32)na | (u32)nb << 16;
            }
            outr[v] = make_uint4(o[0], o[1], o[2], o[3]);
        }
    }
}
