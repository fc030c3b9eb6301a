// The DSpark drafter's extras (model.md §3.9) per draft row. Block 0 of a row: the confidence logit
// Σ_j w[j]·u[j] (j < d) + Σ_r w[d + r]·e[r] (r < R), bf16 operands widened (exact products), fp32 sums:
// thread t takes the 8-term chunks t, t + T, ... of the d + R terms in order, then a butterfly in each
// warp and the warps in order (fixed by d, R and T). Blocks 1.. (with bias): the Markov bias, a
// rowmm_bf16 of the E_m rows by markov_head, added to the row's fp32 logits, l[v] += bias[v] (the CPU's
// one add). Tiny work per row: latency-bound.
#include "dskit_kernel.cuh"

#define NW (P_T / 32)

DSK_KERNEL void __launch_bounds__(P_T)
    DSK_SYMBOL(const u16 *__restrict__ u, i64 ldu, int d, const u16 *__restrict__ e, i64 lde, int R,
               const u16 *__restrict__ w, float *__restrict__ conf, const float *__restrict__ bias, i64 ldb,
               float *__restrict__ logits, i64 ldl, int V)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int row = blockIdx.y, tid = threadIdx.x;
    if (blockIdx.x > 0) {
        const float *b = bias + row * ldb;
        float *l = logits + row * ldl;
        for (i64 v = (i64)(blockIdx.x - 1) * P_T + tid; v < V; v += (i64)(gridDim.x - 1) * P_T)
            l[v] = __fadd_rn(l[v], b[v]);
        return;
    }
    const u16 *ur = u + row * ldu, *er = e + row * lde;
    const int chunks = (d + R) / 8;
    float acc = 0.0f;
    for (int c = tid; c < chunks; c += P_T) {
        int j = 8 * c;
        uint4 xv = j < d ? *(const uint4 *)(ur + j) : *(const uint4 *)(er + (j - d));
        uint4 wv = *(const uint4 *)(w + j);
        u32 xs[4] = {xv.x, xv.y, xv.z, xv.w}, ws[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            acc = __fadd_rn(acc, __fmul_rn(__uint_as_float(ws[i] << 16), __uint_as_float(xs[i] << 16)));
            acc = __fadd_rn(acc, __fmul_rn(__uint_as_float(ws[i] & 0xffff0000u), __uint_as_float(xs[i] & 0xffff0000u)));
        }
    }
    acc = warp_sum(acc);
    __shared__ float part[NW];
    if ((tid & 31) == 0)
        part[tid >> 5] = acc;
    __syncthreads();
    if (tid == 0) {
        float s = 0.0f;
        for (int i = 0; i < NW; i++)
            s = __fadd_rn(s, part[i]);
        conf[row] = s;
    }
}
