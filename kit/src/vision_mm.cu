// The vision tower's bf16 GEMMs (vision.md §3.7): y = epilogue(x[M,K] · W[N,K]ᵀ + b), fp32 accumulation on
// mma.m16n8k16, the bias added in fp32 and one rounding to bf16, then per MODE:
//   0  y = bf16(acc + b)
//   1  y = bf16(y + bf16(acc + b))             the residual add, in place (y is read, then written)
//   2  y = bf16(gelu_erf(bf16(acc + b)))       the aligner's first linear
//   3  y[., j] = bf16(bf16(silu(bf16(g))) · bf16(u)), g, u = columns 2j, 2j+1 of the product (W's rows
//      interleaved gate, up: runtime/launch/vision_mm.h), y [M][N/2]
// A CTA owns a BM x BN tile of y; its warps (WM x WN) each a (BM/WM) x (BN/WN) block of m16n8 tiles. K runs
// in 32-wide steps through a STAGES-deep cp.async ring in dynamic shared memory; rows of 64 bytes with
// their four 16-byte chunks XOR-swizzled by (row / 2) % 4, so ldmatrix's eight rows hit distinct banks.
// Every output's sum runs over K in the same order whatever M is (row-invariant): an image's rows do not
// depend on what else is in the launch. Rows past M load zeros and are not stored; K % 32 == 0, N % 8 == 0.
#include "dsk_mma.cuh"
#include "vision_mm_epi.cuh"

#if P_T == 0
#define BM 128
#define BN 128
#define WM 2
#define WN 4
#else
#define BM 64
#define BN 64
#define WM 2
#define WN 2
#endif
#define BK 32
#define STAGES 4
#define NT (WM * WN * 32)
#define TM (BM / WM / 16) // m16 tiles per warp
#define TN (BN / WN / 8)  // n8 tiles per warp (even: ldmatrix.x4 loads two)

// 16-byte chunk c of row r of a tile, swizzled
__device__ __forceinline__ int vmm_chunk(int r, int c) { return r * 4 + (c ^ ((r >> 1) & 3)); }

__device__ __forceinline__ void vmm_load(uint4 *dst, const u16 *src, int rows, int rmax, int K, int kb)
{
    for (int i = threadIdx.x; i < rows * 4; i += NT) {
        int r = i >> 2, c = i & 3;
        uint4 *d = dst + vmm_chunk(r, c);
        if (r < rmax)
            dsk_cp_async16(dsk_smem_addr(d), src + (i64)r * K + kb * BK + c * 8);
        else
            *d = make_uint4(0, 0, 0, 0);
    }
}

DSK_KERNEL void __launch_bounds__(NT) DSK_SYMBOL(const u16 *__restrict__ x, const u16 *__restrict__ w,
                                                 const u16 *__restrict__ bias, u16 *y, int M, int K, int N, int mode)
{
    DSK_DYNAMIC_SMEM(smem_raw);
    uint4 *sa = (uint4 *)smem_raw, *sb = sa + STAGES * BM * 4;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp / WN, wn = warp % WN, g = lane >> 2, q = lane & 3;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const u16 *xa = x + (i64)m0 * K, *wb = w + (i64)n0 * K;
    const int ma = min(BM, M - m0), nb = min(BN, N - n0), nk = K / BK;
    float acc[TM][TN][4];
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < TN; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nk) {
            vmm_load(sa + s * BM * 4, xa, BM, ma, K, s);
            vmm_load(sb + s * BN * 4, wb, BN, nb, K, s);
        }
        dsk_cp_async_commit();
    }
    for (int kb = 0; kb < nk; kb++) {
        dsk_cp_async_wait<STAGES - 2>();
        __syncthreads(); /* step kb has landed for every thread; the stage step kb - 1 read is free again */
        int nx = kb + STAGES - 1;
        if (nx < nk) {
            vmm_load(sa + (nx % STAGES) * BM * 4, xa, BM, ma, K, nx);
            vmm_load(sb + (nx % STAGES) * BN * 4, wb, BN, nb, K, nx);
        }
        dsk_cp_async_commit();
        const uint4 *ta = sa + (kb % STAGES) * BM * 4, *tb = sb + (kb % STAGES) * BN * 4;
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            u32 af[TM][4], bf[TN][2];
#pragma unroll
            for (int i = 0; i < TM; i++) {
                int r = wm * (BM / WM) + i * 16 + (lane & 15);
                dsk_ldsm_x4(af[i], ta + vmm_chunk(r, kk * 2 + (lane >> 4)));
            }
#pragma unroll
            for (int j = 0; j < TN; j += 2) {
                int r = wn * (BN / WN) + j * 8 + (lane & 7) + ((lane >> 4) << 3);
                u32 t[4];
                dsk_ldsm_x4(t, tb + vmm_chunk(r, kk * 2 + ((lane >> 3) & 1)));
                bf[j][0] = t[0];
                bf[j][1] = t[1];
                bf[j + 1][0] = t[2];
                bf[j + 1][1] = t[3];
            }
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < TN; j++)
                    dsk_mma_16816_bf16(acc[i][j], af[i][0], af[i][1], af[i][2], af[i][3], bf[j][0], bf[j][1]);
        }
    }
    dsk_cp_async_wait<0>();
    /* the epilogue: element e of tile (i, j) is row g + 8(e >> 1), columns 2q, 2q + 1 (e = 0, 1 and 2, 3) */
#pragma unroll
    for (int j = 0; j < TN; j++) {
        const int col = n0 + wn * (BN / WN) + j * 8 + 2 * q;
        if (col >= N)
            continue;
        const float b0 = bias ? bf16_bits_to_f32(bias[col]) : 0.0f, b1 = bias ? bf16_bits_to_f32(bias[col + 1]) : 0.0f;
#pragma unroll
        for (int i = 0; i < TM; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = m0 + wm * (BM / WM) + i * 16 + g + 8 * h;
                if (row >= M)
                    continue;
                vmm_store(y, row, col, N, mode, acc[i][j][2 * h], acc[i][j][2 * h + 1], b0, b1);
            }
    }
}
