// Row matmul for 1..M rows: y[r][n] = sum_k x[r][k] * w[n][k], bf16 in, fp32 out (router 5120->384,
// indexer weights 5120->32). One warp per output column; lane l owns the 16-byte chunks l, l+32, ...
// of K, accumulates them in order and the warp sums with a fixed butterfly. Every row runs the same
// sequence, so row r's bits do not depend on how many rows share the launch (row-invariant).
#include "dskit_kernel.cuh"

#define WARPS 4

DSK_KERNEL void __launch_bounds__(WARPS * 32) DSK_SYMBOL(const u16 *__restrict__ x, const u16 *__restrict__ w,
                                                         float *__restrict__ y, int rows, int K, int N)
{
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (n >= N)
        return;
    const uint4 *wn = (const uint4 *)(w + (i64)n * K);
    int nchunk = K / 8;
    float acc[P_M];
#pragma unroll
    for (int r = 0; r < P_M; r++)
        acc[r] = 0.0f;
    for (int c = lane; c < nchunk; c += 32) {
        uint4 wv = __ldcs(wn + c);
        u32 wq[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
        for (int r = 0; r < P_M; r++) {
            if (r < rows) {
                uint4 xv = __ldg((const uint4 *)(x + (i64)r * K) + c);
                u32 xq[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    acc[r] = fmaf(__uint_as_float(xq[j] << 16), __uint_as_float(wq[j] << 16), acc[r]);
                    acc[r] = fmaf(__uint_as_float(xq[j] & 0xffff0000u), __uint_as_float(wq[j] & 0xffff0000u), acc[r]);
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < P_M; r++) {
        if (r < rows) {
            float s = warp_sum(acc[r]);
            if (lane == 0)
                y[(i64)r * N + n] = s;
        }
    }
}
