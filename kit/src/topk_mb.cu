// Top-k of long rows with several blocks per row (grid: blocks x rows), the same result as topk: the
// k largest keys (score + optional bias), ties to the lower index, written in ascending index order
// with the unbiased scores. Block b owns the slice [b·L, (b+1)·L) of its row, L = ceil(N / blocks).
// One launch per step, in stream order, on a workspace the host zeroes first (layout: topk_abi.cuh):
//   steps 0-3: the 8-bit digit at shift 24 - 8·step of the k-th largest key: every block adds the
//              histogram of its slice (keys matching the prefix so far) into the row's, and the block
//              that arrives last picks the digit and stores the prefix and the count still needed;
//   step 4:    every block counts its keys above the threshold and equal to it;
//   step 5:    every block sums the counts of the blocks before it and writes its chosen entries.
// The steps are launched with programmatic dependent launch: a step's blocks may start while the
// previous step finishes and wait (griddepcontrol.wait) before they read anything it wrote.
#include "topk_abi.cuh"
#include "topk_radix.cuh"

#define HIST TOPK_MB_HIST
#define ARRIVE TOPK_MB_ARRIVE
#define STATE TOPK_MB_STATE
#define COUNTS TOPK_MB_COUNTS

DSK_KERNEL void __launch_bounds__(P_T)
    DSK_SYMBOL(const float *__restrict__ scores, const float *__restrict__ bias, int N, int k, i64 ld,
               int *__restrict__ out_idx, float *__restrict__ out_val, int *ws, int ws_stride, int step)
{
    dsk_pdl_wait();
    dsk_pdl_launch_next();
    const int row = blockIdx.y, b = blockIdx.x, nb = gridDim.x;
    const float *s = scores + (i64)row * ld;
    int *w = ws + (i64)row * ws_stride;
    const i64 L = ((i64)N + nb - 1) / nb;
    const i64 begin = min((i64)N, b * L), end = min((i64)N, begin + L);
    __shared__ int hist[256];
    __shared__ int sh[33];
    __shared__ u32 s_prefix;
    __shared__ int s_need, s_last;

    if (step < 4) {
        const int shift = 24 - 8 * step;
        u32 prefix = 0, mask = 0;
        int need = k;
        if (step > 0) {
            prefix = (u32)w[STATE + 2 * (step - 1)];
            need = w[STATE + 2 * (step - 1) + 1];
            mask = 0xffffffffu << (32 - 8 * step);
        }
        for (int i = threadIdx.x; i < 256; i += P_T)
            hist[i] = 0;
        __syncthreads();
        topk_digit_hist(s, bias, begin, end, prefix, mask, shift, hist);
        __syncthreads();
        for (int i = threadIdx.x; i < 256; i += P_T)
            if (hist[i])
                atomicAdd(&w[HIST + 256 * step + i], hist[i]);
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0)
            s_last = atomicAdd(&w[ARRIVE + step], 1) == nb - 1;
        __syncthreads();
        if (!s_last)
            return;
        __threadfence();
        for (int i = threadIdx.x; i < 256; i += P_T)
            hist[i] = __ldcg(&w[HIST + 256 * step + i]);
        __syncthreads();
        if (threadIdx.x < 32)
            topk_pick_digit(hist, prefix, need, shift, &s_prefix, &s_need);
        __syncthreads();
        if (threadIdx.x == 0) {
            w[STATE + 2 * step] = (int)s_prefix;
            w[STATE + 2 * step + 1] = s_need;
        }
        return;
    }

    const u32 thr = (u32)w[STATE + 6];
    const int need = w[STATE + 7];
    if (step == 4) {
        int gt, eq;
        topk_count(s, bias, begin, end, thr, &gt, &eq);
        int tot_gt, tot_eq;
        block_excl_scan(gt, &tot_gt, sh);
        block_excl_scan(eq, &tot_eq, sh);
        if (threadIdx.x == 0) {
            w[COUNTS + 2 * b] = tot_gt;
            w[COUNTS + 2 * b + 1] = tot_eq;
        }
        return;
    }

    // step 5: the blocks before this one hold sum(above) + min(need, sum(equal)) of the chosen entries
    int gt = 0, eq = 0;
    for (int j = threadIdx.x; j < b; j += P_T) {
        gt += w[COUNTS + 2 * j];
        eq += w[COUNTS + 2 * j + 1];
    }
    int base_gt, base_eq;
    block_excl_scan(gt, &base_gt, sh);
    block_excl_scan(eq, &base_eq, sh);
    int base_sel = base_gt + min(need, base_eq);
    topk_ordered_pass(s, bias, begin, end, thr, need, base_eq, base_sel, out_idx + (i64)row * k, out_val + (i64)row * k,
                      sh);
}
