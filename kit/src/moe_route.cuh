// moe_route's row (kit/src/moe_route.cu): one warp routes one row; also run by exl3_moe_plan's routing
// variants (routing and plan in one launch). See moe_route.cu for the rule and the sum orders.
#pragma once
#include "topk_common.cuh"

__device__ __forceinline__ float sqrtsoftplus(float x)
{
    return sqrtf(x > 20.0f ? x : log1pf(expf(x)));
}

// Route `row` (the whole warp, lane = its lane) from its scores: score(e) gives s_e (the same bits
// whenever asked: route_row computes it from the logit, exl3_moe_plan reads it from shared memory where
// its threads computed it); ids ascending and weights into row `row` of ids and weights; scores_out (or
// null) takes every expert's s_e.
template <int NPL, class Score>
__device__ __forceinline__ void route_row_scored(Score score, const float *__restrict__ bias, int E, int k,
                                                 float route_scale, int row, int *ids, float *weights,
                                                 float *__restrict__ scores_out, int lane)
{
    u64 key[NPL];
#pragma unroll
    for (int j = 0; j < NPL; j++) {
        int e = j * 32 + lane;
        key[j] = 0ull; /* padding ranks below every real expert, NaN included (whose composite is > 0) */
        if (e < E) {
            float s = score(e);
            if (scores_out)
                scores_out[(i64)row * E + e] = s;
            key[j] = ((u64)topk_order_key(__fadd_rn(s, bias[e])) << 32) | (u64)(0xffffffffu - (u32)e);
        }
    }
    int mine = 0x7fffffff; /* lane t < k keeps the t-th winner */
    float mine_s = 0.0f, sum = 0.0f;
    for (int t = 0; t < k; t++) {
        u64 best = key[0];
#pragma unroll
        for (int j = 1; j < NPL; j++)
            best = key[j] > best ? key[j] : best;
        best = warp_max_u64(best);
#pragma unroll
        for (int j = 0; j < NPL; j++)
            key[j] = key[j] == best ? 0ull : key[j];
        int id = (int)(0xffffffffu - (u32)best);
        /* the winner's unbiased score, asked again: the same bits */
        float s = score(id);
        sum = __fadd_rn(sum, s);
        if (lane == t) {
            mine = id;
            mine_s = s;
        }
    }
    const float den = __fadd_rn(sum, 1e-20f);
    int rank = 0; /* the winner's slot in ascending id order */
    for (int t = 0; t < k; t++)
        rank += __shfl_sync(0xffffffffu, mine, t) < mine;
    if (lane < k) {
        ids[(i64)row * k + rank] = mine;
        weights[(i64)row * k + rank] = __fmul_rn(__fdiv_rn(mine_s, den), route_scale);
    }
}

// Route `row` from its gate logits (the whole warp).
template <int NPL>
__device__ __forceinline__ void route_row(const float *__restrict__ logits, i64 ld, const float *__restrict__ bias,
                                          int E, int k, float route_scale, int row, int *ids, float *weights,
                                          float *__restrict__ scores_out, int lane)
{
    const float *l = logits + (i64)row * ld;
    route_row_scored<NPL>([&](int e) { return sqrtsoftplus(l[e]); }, bias, E, k, route_scale, row, ids, weights,
                          scores_out, lane);
}
