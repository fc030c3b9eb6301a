// mHC mixes of one sublayer (model.md §3.4; reference hc_mixes in runtime/ref/mhc.c): per row, the
// coefficient row [pre[hc], post[hc], comb[hc][hc]] (fp32, M = (2+hc)·hc values) from the row's streams
// x̂ = X[r] flattened (K = hc·d bf16) and the sublayer's hc_fn W [M][K], hc_base [M], hc_scale [3].
// Tuned for decode (1-64 rows): the 24 x 20480 fp32 weight is read once per launch. One launch, grid
// (K/256 chunks, row blocks of rpc rows):
//   partials: the CTA stages its rows' 256 inputs in shared memory; warp w owns the sums s = 4w..4w+3
//     (s < M: W[s]·x̂, s == M: x̂·x̂) with its slice of W in registers; per row, lane l adds its inputs
//     4l..4l+3, then 128+4l..128+4l+3 (fma, in that order), then the lanes are added by a fixed
//     butterfly (xor 16, 8, 4, 2, 1); one workspace slot per (row, chunk, sum) (layout: mhc_abi.cuh).
//   fold, by the last CTA of the row block to arrive (an arrival counter per row block, zero at rest:
//     that CTA resets it): warp w folds rows w, w + 8, ...; lane s adds slot s over the chunks in chunk
//     order, r = (Σx̂²/K + eps)^-1/2, m = r·dot, then pre, post, comb and the Sinkhorn with hc_mixes'
//     operations in its order (no FMA; lane 2hc + i·hc + j holds comb[i][j]; row and column sums fetched
//     by shuffles and added in index order).
// Every order is fixed by K alone, never by the row count, the grid, the arrival order or timing:
// row-invariant. The transcendentals (expf) are CUDA's, which may differ from glibc's by an ulp.
#include "dskit_kernel.cuh"
#include "mhc_abi.cuh"

#define HC P_HC
#include "mhc_pre.cuh"
#define M ((2 + HC) * HC)
#define WARPS 8
#define FOLD_BATCH 40
#define FULL 0xffffffffu
static_assert(HC >= 1 && HC <= MHC_MIX_MAX_HC, "mhc_mix: the M + 1 sums of a row must fit one warp");

// Shared memory: the partials' staged inputs.
#define SMEM_VEC (MHC_MIX_MAX_ROWS_CTA * MHC_MIX_CHUNK / 8)

// Programmatic dependent launch (the family is "pdl"): wait until the grid before this one has finished
// and its writes are visible; let the grid after this one start its prologue. Without the launch
// attribute both return at once. DSK_EMU (the CPU emulator) runs grids one at a time: no-ops there.
#ifndef DSK_EMU
__device__ __forceinline__ void mix_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void mix_pdl_launch_next() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
#else
__device__ __forceinline__ void mix_pdl_wait() {}
__device__ __forceinline__ void mix_pdl_launch_next() {}
#endif

__device__ __forceinline__ float sigmoid_ref(float v) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-v))); }

__device__ __forceinline__ void mix_partials(uint4 *smem, const u16 *__restrict__ x, const float *__restrict__ fn,
                                             float *ws, int rows, int K, int rpc)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int chunk = blockIdx.x, nchunk = MHC_MIX_NCHUNK(K), c0 = chunk * MHC_MIX_CHUNK;
    const int ca = c0 + 4 * lane, cb = ca + 128; /* this lane's two groups of 4 inputs (K % 8 == 0) */
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    /* this warp's rows of W, loaded before the wait: no kernel writes the weights */
    float4 wa[4], wb[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int s = 4 * warp + q;
        wa[q] = s < M && ca < K ? *(const float4 *)(fn + (i64)s * K + ca) : zero;
        wb[q] = s < M && cb < K ? *(const float4 *)(fn + (i64)s * K + cb) : zero;
    }
    mix_pdl_wait();
    mix_pdl_launch_next();
    const int r0 = blockIdx.y * rpc, nr = min(rpc, rows - r0);
    u16 *xs = (u16 *)smem; /* [rpc][256] */
    /* at most 64 rows x 32 vectors: up to 8 per thread, all loads in flight before the stores */
    {
        uint4 v[MHC_MIX_MAX_ROWS_CTA * MHC_MIX_CHUNK / 8 / (WARPS * 32)];
#pragma unroll
        for (int u = 0; u < (int)(sizeof v / sizeof v[0]); u++) {
            const int i = threadIdx.x + u * WARPS * 32, rr = i / (MHC_MIX_CHUNK / 8);
            const int col = c0 + 8 * (i % (MHC_MIX_CHUNK / 8));
            v[u] = rr < nr && col < K ? *(const uint4 *)(x + (i64)(r0 + rr) * K + col) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < (int)(sizeof v / sizeof v[0]); u++)
            if (threadIdx.x + u * WARPS * 32 < nr * (MHC_MIX_CHUNK / 8))
                smem[threadIdx.x + u * WARPS * 32] = v[u];
    }
    __syncthreads();
    const bool h16 = lane & 16, h8 = lane & 8;
#pragma unroll 2
    for (int rr = 0; rr < nr; rr++) {
        const uint2 pa = *(const uint2 *)(xs + rr * MHC_MIX_CHUNK + 4 * lane);
        const uint2 pb = *(const uint2 *)(xs + rr * MHC_MIX_CHUNK + 128 + 4 * lane);
        const float xv[8] = {__uint_as_float(pa.x << 16), __uint_as_float(pa.x & 0xffff0000u),
                             __uint_as_float(pa.y << 16), __uint_as_float(pa.y & 0xffff0000u),
                             __uint_as_float(pb.x << 16), __uint_as_float(pb.x & 0xffff0000u),
                             __uint_as_float(pb.y << 16), __uint_as_float(pb.y & 0xffff0000u)};
        float acc[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float a = 0.0f;
            if (4 * warp + q == M) {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    a = fmaf(xv[e], xv[e], a);
            } else {
                const float w8[8] = {wa[q].x, wa[q].y, wa[q].z, wa[q].w, wb[q].x, wb[q].y, wb[q].z, wb[q].w};
#pragma unroll
                for (int e = 0; e < 8; e++)
                    a = fmaf(w8[e], xv[e], a);
            }
            acc[q] = a;
        }
        /* butterfly: xor 16 splits the four sums into two pairs, xor 8 into one each, then xor 4, 2, 1;
         * lane l ends with sum q = l / 8 of the warp's four (each lane adds its own value and its
         * partner's, so the lanes holding one sum hold the same bits) */
        float k0 = h16 ? acc[2] : acc[0], k1 = h16 ? acc[3] : acc[1];
        k0 += __shfl_xor_sync(FULL, h16 ? acc[0] : acc[2], 16);
        k1 += __shfl_xor_sync(FULL, h16 ? acc[1] : acc[3], 16);
        float k = h8 ? k1 : k0;
        k += __shfl_xor_sync(FULL, h8 ? k0 : k1, 8);
        k += __shfl_xor_sync(FULL, k, 4);
        k += __shfl_xor_sync(FULL, k, 2);
        k += __shfl_xor_sync(FULL, k, 1);
        if ((lane & 7) == 0)
            ws[((i64)(r0 + rr) * nchunk + chunk) * MHC_MIX_SLOTS + 4 * warp + (lane >> 3)] = k;
    }
}

// One row's coefficients from its chunk slots p[chunk][MHC_MIX_SLOTS] (written by this launch: read
// through L2), by the calling warp.
__device__ __forceinline__ void fold_row(const float *p, float *__restrict__ coef, int K, float a0, float a1, float a2,
                                         float b, float norm_eps, float hc_eps, int iters)
{
    const int lane = threadIdx.x & 31, nchunk = MHC_MIX_NCHUNK(K);
    /* the chunks in order, FOLD_BATCH loads in flight at a time (the release's 80 chunks: two round trips
     * to L2, where batches of 8 took ten) */
    float acc = __ldcg(p + lane);
    for (int c0 = 1; c0 < nchunk; c0 += FOLD_BATCH) {
        float v[FOLD_BATCH];
#pragma unroll
        for (int u = 0; u < FOLD_BATCH; u++)
            v[u] = c0 + u < nchunk ? __ldcg(p + (i64)(c0 + u) * MHC_MIX_SLOTS + lane) : 0.0f;
#pragma unroll
        for (int u = 0; u < FOLD_BATCH; u++)
            if (c0 + u < nchunk)
                acc = acc + v[u];
    }
    const float ss = __shfl_sync(FULL, acc, M);
    const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)K), norm_eps)));
    const float m = __fmul_rn(acc, r);
    float v = 0.0f;
    if (lane < HC)
        v = __fadd_rn(sigmoid_ref(__fadd_rn(__fmul_rn(m, a0), b)), hc_eps);
    else if (lane < 2 * HC)
        v = __fmul_rn(2.0f, sigmoid_ref(__fadd_rn(__fmul_rn(m, a1), b)));
    else if (lane < M)
        v = __fadd_rn(__fmul_rn(m, a2), b);
    /* Sinkhorn (hc_sinkhorn): row softmax + eps, then a column pass, then iters - 1 x {row, column};
     * lanes outside comb follow along on comb[0][0]'s row and column and keep v */
    const int e = lane - 2 * HC;
    const bool in = e >= 0 && e < HC * HC;
    const int rl = 2 * HC + (in ? e / HC : 0) * HC, cl = 2 * HC + (in ? e % HC : 0);
    float mx = __shfl_sync(FULL, v, rl);
#pragma unroll
    for (int j = 1; j < HC; j++) {
        const float t = __shfl_sync(FULL, v, rl + j);
        mx = t > mx ? t : mx;
    }
    const float ex = expf(__fadd_rn(v, -mx)); /* v - mx, exactly */
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < HC; j++)
        sum = __fadd_rn(sum, __shfl_sync(FULL, ex, rl + j));
    float cv = __fadd_rn(__fdiv_rn(ex, sum), hc_eps);
    for (int it = 0; it < iters; it++) {
        if (it > 0) {
            sum = 0.0f;
#pragma unroll
            for (int j = 0; j < HC; j++)
                sum = __fadd_rn(sum, __shfl_sync(FULL, cv, rl + j));
            cv = __fdiv_rn(cv, __fadd_rn(sum, hc_eps));
        }
        sum = 0.0f;
#pragma unroll
        for (int i = 0; i < HC; i++)
            sum = __fadd_rn(sum, __shfl_sync(FULL, cv, cl + i * HC));
        cv = __fdiv_rn(cv, __fadd_rn(sum, hc_eps));
    }
    if (lane < M)
        coef[lane] = in ? cv : v;
}

// px != 0: an hc_pre shares the launch (mhc_pre.cuh's rows, by WARPS * 32 = 256 threads: what the
// mhc_pre kernel runs for rows whose rmsnorm rule gives 256), CTAs x = nchunk + i of row block y doing row
// y·rpc + i; it reads px, pw (never what this launch writes), so the two are independent.
static_assert(MHC_PRE_MAX_D / 8 <= SMEM_VEC, "mhc_mix: the fused hc_pre's row buffer is the partials' staging");
static_assert(WARPS * 32 == MHC_MIX_THREADS, "mhc_mix: the launcher's thread count");

DSK_KERNEL void __launch_bounds__(WARPS * 32)
    DSK_SYMBOL(const u16 *__restrict__ x, const float *__restrict__ fn, const float *__restrict__ base,
               const float *__restrict__ scale, float *ws, float *__restrict__ coef, u32 *cnt, int rows, int d,
               int rpc, float norm_eps, float hc_eps, int iters, const u16 *__restrict__ px,
               const float *__restrict__ pw, int pw_stride, const u16 *__restrict__ pg, float peps,
               u16 *__restrict__ pout, u16 *__restrict__ praw)
{
    __shared__ uint4 smem[SMEM_VEC];
    __shared__ int s_last;
    const int K = HC * d, nchunk = MHC_MIX_NCHUNK(K);
    if ((int)blockIdx.x >= nchunk) { /* the fused hc_pre */
        const int row = (int)blockIdx.y * rpc + ((int)blockIdx.x - nchunk);
        mix_pdl_wait();
        mix_pdl_launch_next();
        if (row < rows)
            pre_row<WARPS * 32>(px, pw, pw_stride, pg, peps, pout, praw, row, d, smem);
        return;
    }
    mix_partials(smem, x, fn, ws, rows, K, rpc);
    /* the last CTA of the row block to arrive folds its rows */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        s_last = atomicAdd(cnt + blockIdx.y, 1u) == (u32)nchunk - 1;
    __syncthreads();
    if (!s_last)
        return;
    __threadfence();
    if (threadIdx.x == 0)
        cnt[blockIdx.y] = 0; /* every chunk is in: reset for the next launch */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float a0 = scale[0], a1 = scale[1], a2 = scale[2], b = lane < M ? base[lane] : 0.0f;
    const int r0 = blockIdx.y * rpc, nr = min(rpc, rows - r0);
    for (int rr = warp; rr < nr; rr += WARPS)
        fold_row(ws + (i64)(r0 + rr) * nchunk * MHC_MIX_SLOTS, coef + (i64)(r0 + rr) * M, K, a0, a1, a2, b, norm_eps,
                 hc_eps, iters);
}
