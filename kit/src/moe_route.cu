// MoE routing (model.md §3.7) of each row from its fp32 gate logits: s_e = sqrt(softplus(l_e)) (CUDA's
// expf, log1pf, sqrtf; softplus linear above 20), the top-k of s_e + bias_e (ties to the lower id, NaN
// lowest, −0 = +0: topk_order_key), ids ascending, weights route_scale · s / (Σ_selected s + 1e-20) with
// the sum in selection rank order (biased score descending), every product and quotient rounded alone.
// One warp per row, as topk_small: each lane keeps P_NPL composite keys (key << 32 | ~id) in registers
// and k rounds of a warp-wide maximum pick the winners in rank order. Latency-bound (a few µs per launch).
#include "moe_route.cuh"

#define ROWS_PER_BLOCK 4

DSK_KERNEL void __launch_bounds__(ROWS_PER_BLOCK * 32)
    DSK_SYMBOL(const float *__restrict__ logits, i64 ld, const float *__restrict__ bias, int E, int k,
               float route_scale, int rows, int *__restrict__ ids, float *__restrict__ weights,
               float *__restrict__ scores_out)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    route_row<P_NPL>(logits, ld, bias, E, k, route_scale, row, ids, weights, scores_out, lane);
}
