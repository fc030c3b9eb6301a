// EXL3 reconstruct, one 128x128 block per CTA (grid n/128 x k/128): mode 0 writes W_hat (k x n fp16,
// row-major (in, out); bit-exact, the decoder's own test), mode 1 writes W in the original basis,
// k x n fp32: diag(suh)·H_k·W_hat·H_n·diag(svh) in the CPU reference's order (every row's Hadamard,
// then every column's, then × suh[row], then × svh[col], each rounded in fp32). Warp w decodes the
// block's 16-row chunk w through the same lane decode as exl3_mm, then the block is staged in shared
// memory (row stride 129 floats: row and column passes are both conflict-free).
#include "exl3_dq.cuh"
#include "exl3_util.cuh"

#define KB P_K
#define CBK P_CB
#define FSTRIDE 129
#define HSTRIDE 136

DSK_KERNEL void __launch_bounds__(256) DSK_SYMBOL(const exl3_desc *d, void *out, int mode)
{
    EXL3_DYNAMIC_SMEM(smem);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int cb = blockIdx.x, kb = blockIdx.y, n = d->n, n16 = n / 16;
    float *f = (float *)smem;
    u16 *h = (u16 *)smem;
    exl3_lane L = exl3_lane_setup(KB, lane);
    const u32 *tr = (const u32 *)d->trellis;
    for (int t = 0; t < 8; t++) {
        const u32 *tw = tr + ((i64)(kb * 8 + warp) * n16 + cb * 8 + t) * (8 * KB);
        u32 w[3], a[4];
#pragma unroll
        for (int j = 0; j < EXL3_NW(KB); j++)
            w[j] = tw[L.word[j]];
        exl3_decode_frag(KB, CBK, w, (u32)L.shift, a);
        // A fragment register j, half hh: A[i][k] = W_hat[k][i], i = l/4 + 8(j&1), k = 2(l%4) + 8(j>>1) + hh
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int i = (lane >> 2) + 8 * (j & 1), k = 2 * (lane & 3) + 8 * (j >> 1) + hh;
                u16 bits = (u16)(a[j] >> (16 * hh));
                int row = warp * 16 + k, col = t * 16 + i;
                if (mode == 0)
                    h[row * HSTRIDE + col] = bits;
                else
                    f[row * FSTRIDE + col] = exl3_h2f(bits);
            }
    }
    __syncthreads();
    if (mode == 0) {
        for (int q = threadIdx.x; q < 128 * 16; q += 256) {
            int row = q >> 4, part = q & 15;
            uint4 v = *(const uint4 *)(h + row * HSTRIDE + part * 8);
            *(uint4 *)((u16 *)out + (i64)(kb * 128 + row) * n + cb * 128 + part * 8) = v;
        }
        return;
    }
    // row transforms (each row's 128 columns), then column transforms, as exl3_reconstruct
    for (int row = warp * 16; row < warp * 16 + 16; row++) {
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] = f[row * FSTRIDE + lane + 32 * i];
        exl3_had128_strided(v, lane);
#pragma unroll
        for (int i = 0; i < 4; i++)
            f[row * FSTRIDE + lane + 32 * i] = v[i];
    }
    __syncthreads();
    const u16 *suh = (const u16 *)d->suh + kb * 128, *svh = (const u16 *)d->svh + cb * 128;
    for (int col = warp * 16; col < warp * 16 + 16; col++) {
        float v[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            v[i] = f[(lane + 32 * i) * FSTRIDE + col];
        exl3_had128_strided(v, lane);
        float sv = exl3_h2f(svh[col]);
#pragma unroll
        for (int i = 0; i < 4; i++)
            f[(lane + 32 * i) * FSTRIDE + col] = __fmul_rn(__fmul_rn(v[i], exl3_h2f(suh[lane + 32 * i])), sv);
    }
    __syncthreads();
    for (int q = threadIdx.x; q < 128 * 128; q += 256) {
        int row = q >> 7, col = q & 127;
        ((float *)out)[(i64)(kb * 128 + row) * n + cb * 128 + col] = f[row * FSTRIDE + col];
    }
}
