// Row matmul, 16 rows per CTA row at most, on tensor cores: y[r][n] = sum_k x[r][k] * w[n][k], bf16 in, fp32 out
// (router 5120->384, indexer weights 5120->32). A block owns 8 output columns; its KSPLIT warps split
// K into fixed ranges, each runs mma.m16n8k16 (bf16, fp32 accumulate) over its range, and warp 0 adds
// the partial tiles in warp order. Rows only decide which A registers are loaded (the rest are zero),
// never the order of any sum, so a row's bits do not depend on the other rows (row-invariant).
// Lane (g = lane/4, q = lane%4) loads 16 contiguous bytes of a 32-wide K block for A rows g, g+8 and
// B column g: the same permutation of K on both operands, so the products are the true ones.
#include "dsk_mma.cuh"

#define KSPLIT 16 // warps per block, each a fixed range of K
#define BATCH (P_M > 8 ? 6 : 10) // 32-wide K blocks whose loads are in flight together

// scale != 0: each output is bf16(bf16(sum)·scale), kept in fp32 (cast.cu's MODE 1: the indexer's head
// weights, model.md §3.5), in the same launch.
__device__ __forceinline__ float rowmm_out(float v, float scale)
{
    if (scale == 0.0f)
        return v;
    return bf16_bits_to_f32(f32_to_bf16_bits(__fmul_rn(bf16_bits_to_f32(f32_to_bf16_bits(v)), scale)));
}

DSK_KERNEL void __launch_bounds__(KSPLIT * 32) DSK_SYMBOL(const u16 *__restrict__ x, const u16 *__restrict__ w,
                                                          float *__restrict__ y, int rows, int K, int N, float scale)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    /* grid y: chunks of P_M rows (more than 16 rows run the M = 16 variant over several chunks) */
    const int r0 = blockIdx.y * P_M;
    x += (i64)r0 * K;
    y += (i64)r0 * N;
    rows -= r0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int n0 = blockIdx.x * 8;
    const int nblk = K / 32, per = (nblk + KSPLIT - 1) / KSPLIT;
    const int b0 = warp * per, b1 = min(nblk, b0 + per);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const uint4 *wp = n0 + g < N ? (const uint4 *)(w + (i64)(n0 + g) * K) + q : nullptr;
    const uint4 *xa = g < rows && g < P_M ? (const uint4 *)(x + (i64)g * K) + q : nullptr;
    const uint4 *xb = g + 8 < rows && g + 8 < P_M ? (const uint4 *)(x + (i64)(g + 8) * K) + q : nullptr;
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    /* a batch's loads are all issued before its mmas; absent operands (columns past N, rows past `rows`)
     * load from a valid address and are replaced by zeros at use */
    const uint4 *wl = wp ? wp : (const uint4 *)w + q, *al = xa ? xa : (const uint4 *)x + q,
                *bl = xb ? xb : (const uint4 *)x + q;
    for (int bb = b0; bb < b1; bb += BATCH) {
        uint4 wv[BATCH], av[BATCH], bv[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            int b = min(bb + u, b1 - 1);
            wv[u] = dsk_ld_stream16(wl + 4 * b);
            av[u] = dsk_ld_nc16(al + 4 * b);
            if (P_M > 8)
                bv[u] = dsk_ld_nc16(bl + 4 * b);
        }
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            if (bb + u < b1) {
                uint4 wu = wp ? wv[u] : zero, au = xa ? av[u] : zero, bu = P_M > 8 && xb ? bv[u] : zero;
                dsk_mma_16816_bf16(c, au.x, bu.x, au.y, bu.y, wu.x, wu.y);
                dsk_mma_16816_bf16(c, au.z, bu.z, au.w, bu.w, wu.z, wu.w);
            }
        }
    }
    __shared__ float part[KSPLIT][4][32];
#pragma unroll
    for (int i = 0; i < 4; i++)
        part[warp][i][lane] = c[i];
    __syncthreads();
    if (warp != 0)
        return;
    float sum[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        sum[i] = part[0][i][lane];
        for (int v = 1; v < KSPLIT; v++)
            sum[i] += part[v][i][lane];
    }
    const int col = n0 + 2 * q;
#pragma unroll
    for (int h = 0; h < 2; h++) { /* h = 0: row g (c0, c1); h = 1: row g + 8 (c2, c3) */
        int r = g + 8 * h;
        if (r >= rows || r >= P_M)
            continue;
        if (col < N)
            y[(i64)r * N + col] = rowmm_out(sum[2 * h], scale);
        if (col + 1 < N)
            y[(i64)r * N + col + 1] = rowmm_out(sum[2 * h + 1], scale);
    }
}
