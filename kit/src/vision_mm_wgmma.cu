// The vision tower's bf16 GEMMs on Hopper (sm_90a): the vision_mm family's products and epilogues (its
// reference, launcher and test: runtime/ref/vision_mm.c, runtime/launch/vision_mm.c, tests/gpu/
// test_vision_mm.c; the epilogue MODEs are those of kit/src/vision_mm.cu), on wgmma (dsk_wgmma.cuh).
// A CTA owns a BM x BN tile of y: BM / 64 warpgroups, each the 64 x BN product of its 64 rows. K runs in
// 64-wide steps through a STAGES-deep ring in dynamic shared memory filled by cp.async from all threads
// (128-byte rows in wgmma's 128-byte swizzle). WMM_PF steps are loaded ahead: with 3, step kb + 3 goes into
// step kb - 1's stage once a barrier shows every warpgroup's wgmmas of kb - 1 done (kb's may still run). Chunks past K, rows past
// M or N are zeros (their products add nothing) and are not stored; K % 8 == 0, N % 8 == 0.
// Row-invariant: every output's sum runs over K in the same order whatever M is.
#include "dsk_wgmma.cuh"
#include "vision_mm_epi.cuh"

#if P_T == 0
#define BM 128
#define BN 256
#else
#define BM 64
#define BN 128
#endif
#define BK 64
#define STAGES 4
#ifndef WMM_PF
#define WMM_PF 3 // steps loaded ahead: STAGES - 2 (loads before the step's wgmmas), or STAGES - 1 (after them and a barrier)
#endif
#define NT (BM / 64 * 128)
#define REGS (BN / 2) // accumulators per thread
#define STAGE_BYTES ((BM + BN) * 128)

__device__ __forceinline__ u32 wmm_off(int r, int c) { return (u32)(r * 128 + ((c ^ (r & 7)) << 4)); }

// rows x 64 columns of src (row stride K) from column k0 into the swizzled tile at shared address dst
__device__ __forceinline__ void wmm_load(unsigned char *dst, u32 sdst, const u16 *src, int rows, int rmax, int K,
                                         int k0)
{
    for (int i = threadIdx.x; i < rows * 8; i += NT) {
        const int r = i >> 3, c = i & 7, k = k0 + c * 8;
        const u32 off = wmm_off(r, c);
        if (r < rmax && k < K)
            dsk_cp_async16(sdst + off, src + (i64)r * K + k);
        else
            *(uint4 *)(dst + off) = make_uint4(0, 0, 0, 0);
    }
}

// step s's A and B tiles into its stage of the ring
__device__ __forceinline__ void wmm_stage(unsigned char *ring, u32 s_ring, int s, const u16 *xa, const u16 *wb, int ma,
                                          int nb, int K)
{
    const int st = (s % STAGES) * STAGE_BYTES;
    wmm_load(ring + st, s_ring + st, xa, BM, ma, K, s * BK);
    wmm_load(ring + st + BM * 128, s_ring + st + BM * 128, wb, BN, nb, K, s * BK);
}

__device__ __forceinline__ void wmm_mma(float (&acc)[REGS], u64 da, u64 db)
{
#if P_T == 0
    dsk_wgmma_m64n256k16_bf16(acc, da, db);
#else
    dsk_wgmma_m64n128k16_bf16(acc, da, db);
#endif
}

DSK_KERNEL void __launch_bounds__(NT, 1) DSK_SYMBOL(const u16 *__restrict__ x, const u16 *__restrict__ w,
                                                    const u16 *__restrict__ bias, u16 *y, int M, int K, int N, int mode)
{
    DSK_DYNAMIC_SMEM(smem_raw);
    /* the ring from the first 1024-byte boundary (the swizzle's atoms; the launch has 1 KiB to spare) */
    const u32 s_raw = dsk_smem_addr(smem_raw), pad = (1024u - (s_raw & 1023u)) & 1023u;
    unsigned char *ring = smem_raw + pad;
    const u32 s_ring = s_raw + pad;
    const int wg = threadIdx.x >> 7, t = threadIdx.x & 127, warp = t >> 5, lane = t & 31, g = lane >> 2, q = lane & 3;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const u16 *xa = x + (i64)m0 * K, *wb = w + (i64)n0 * K;
    const int ma = min(BM, M - m0), nb = min(BN, N - n0), nk = (K + BK - 1) / BK;
    float acc[REGS];
#pragma unroll
    for (int i = 0; i < REGS; i++)
        acc[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < WMM_PF; s++) {
        if (s < nk)
            wmm_stage(ring, s_ring, s, xa, wb, ma, nb, K);
        dsk_cp_async_commit();
    }
    for (int kb = 0; kb < nk; kb++) {
        /* WMM_PF + kb groups committed: step kb's is done when at most WMM_PF - 1 remain */
        dsk_cp_async_wait<WMM_PF - 1>();
        dsk_fence_proxy_async();
        /* step kb has landed for every thread; every warpgroup has waited for its wgmmas of step kb - 2 */
        __syncthreads();
#if WMM_PF == STAGES - 2
        if (kb + WMM_PF < nk) /* into the stage of step kb - 2 */
            wmm_stage(ring, s_ring, kb + WMM_PF, xa, wb, ma, nb, K);
        dsk_cp_async_commit();
#endif
        const u32 sa = s_ring + (kb % STAGES) * STAGE_BYTES + wg * 64 * 128, sb = s_ring + (kb % STAGES) * STAGE_BYTES + BM * 128;
        dsk_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            wmm_mma(acc, dsk_wgmma_desc(sa + kk * 32), dsk_wgmma_desc(sb + kk * 32));
        dsk_wgmma_commit();
        dsk_wgmma_wait<1>();
#if WMM_PF == STAGES - 1
        /* every warpgroup's wgmmas of step kb - 1 are done: its stage takes step kb + 3 */
        __syncthreads();
        if (kb + WMM_PF < nk)
            wmm_stage(ring, s_ring, kb + WMM_PF, xa, wb, ma, nb, K);
        dsk_cp_async_commit();
#endif
    }
    dsk_wgmma_wait<0>();
    dsk_cp_async_wait<0>();
    /* the epilogue: register 4j + 2h + e is row 16 warp + g + 8h, column 8j + 2q + e of the warpgroup's block */
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int col = n0 + 8 * j + 2 * q;
        if (col >= N)
            continue;
        const float b0 = bias ? bf16_bits_to_f32(bias[col]) : 0.0f, b1 = bias ? bf16_bits_to_f32(bias[col + 1]) : 0.0f;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = m0 + wg * 64 + 16 * warp + g + 8 * h;
            if (row >= M)
                continue;
            vmm_store(y, row, col, N, mode, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1], b0, b1);
        }
    }
}
