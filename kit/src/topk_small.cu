// Top-k of short rows (the router: k <= 16 of N <= 32 * NPL), one warp per row, same order as topk:
// key = score (+ bias), ties to the lower index, NaN lowest, -0 = +0; output ascending by index with the
// unbiased scores. Each lane keeps NPL composite keys (key << 32 | ~index) in registers; k rounds of a
// warp-wide maximum pick the winners, so there is no shared memory and no block barrier.
#include "topk_common.cuh"

#define ROWS_PER_BLOCK 4

DSK_KERNEL void __launch_bounds__(ROWS_PER_BLOCK * 32)
    DSK_SYMBOL(const float *__restrict__ scores, const float *__restrict__ bias, int N, int k, i64 ld,
               int rows, int *__restrict__ out_idx, float *__restrict__ out_val)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    const float *s = scores + (i64)row * ld;
    u64 key[P_NPL];
#pragma unroll
    for (int j = 0; j < P_NPL; j++) {
        int i = j * 32 + lane;
        /* padding ranks below every real element, NaN included (whose composite is > 0) */
        key[j] = i < N ? ((u64)topk_order_key(topk_source(s, bias, i)) << 32) | (u64)(0xffffffffu - (u32)i) : 0ull;
    }
    int mine = 0x7fffffff; /* lane t < k keeps the t-th winner */
    for (int t = 0; t < k; t++) {
        u64 best = key[0];
#pragma unroll
        for (int j = 1; j < P_NPL; j++)
            best = key[j] > best ? key[j] : best;
        best = warp_max_u64(best);
#pragma unroll
        for (int j = 0; j < P_NPL; j++)
            key[j] = key[j] == best ? 0ull : key[j];
        if (lane == t)
            mine = (int)(0xffffffffu - (u32)best);
    }
    /* rank of each winner among the k winners: its output slot in ascending index order */
    int rank = 0;
    for (int t = 0; t < k; t++) {
        int other = __shfl_sync(0xffffffffu, mine, t);
        rank += other < mine;
    }
    if (lane < k) {
        out_idx[(i64)row * k + rank] = mine;
        out_val[(i64)row * k + rank] = s[mine];
    }
}
