// Shared by the radix top-k kernels (topk: one block per row; topk_mb: several blocks per row, a launch
// a step; topk_tl: several blocks per row, two levels in one launch). P_T is
// the block size. The steps: a 256-bin histogram of one 8-bit digit of the keys that match the prefix
// found so far; the digit holding the need-th largest key; the ordered pass that writes the chosen
// indices in ascending order (keys above the threshold all go, of those equal to it the lowest indices).
#pragma once
#include "topk_common.cuh"

#define TOPK_V 4 // consecutive elements per thread in the ordered pass

// Exclusive prefix sum over the block; *total gets the block's sum. sh holds 33 ints.
__device__ int block_excl_scan(int v, int *total, int *sh)
{
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o)
            inc += t;
    }
    if (lane == 31)
        sh[wid] = inc;
    __syncthreads();
    if (wid == 0) {
        int w = lane < P_T / 32 ? sh[lane] : 0;
        int wi = w;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int t = __shfl_up_sync(0xffffffffu, wi, o);
            if (lane >= o)
                wi += t;
        }
        if (lane < P_T / 32)
            sh[lane] = wi - w;
        if (lane == 31)
            sh[32] = wi;
    }
    __syncthreads();
    int r = sh[wid] + inc - v;
    *total = sh[32];
    __syncthreads();
    return r;
}

// What the passes below read: entry i's ranked value, and the index and score an ordered pass writes
// for it. A row of scores (+ bias): entry i is the row's element i.
struct topk_row_src {
    const float *s, *bias;
    __device__ __forceinline__ float rank(i64 i) const { return topk_source(s, bias, i); }
    __device__ __forceinline__ int index(i64 i) const { return (int)i; }
    __device__ __forceinline__ float value(i64 i) const { return s[i]; }
};

// Count into hist (256 bins, zeroed by the caller) digit (key >> shift) & 255 of the keys of
// [begin, end) that match prefix on the bits of mask.
template <class Src>
__device__ __forceinline__ void topk_digit_hist_src(const Src &src, i64 begin, i64 end, u32 prefix, u32 mask,
                                                    int shift, int *hist)
{
    for (i64 i = begin + threadIdx.x; i < end; i += P_T) {
        u32 key = topk_order_key(src.rank(i));
        if ((key & mask) == prefix)
            atomicAdd(&hist[(key >> shift) & 255], 1);
    }
}

__device__ __forceinline__ void topk_digit_hist(const float *s, const float *bias, i64 begin, i64 end, u32 prefix,
                                                u32 mask, int shift, int *hist)
{
    topk_row_src src = {s, bias};
    topk_digit_hist_src(src, begin, end, prefix, mask, shift, hist);
}

// How many keys of [begin, end) are above thr and equal to it (this thread's share).
__device__ __forceinline__ void topk_count(const float *s, const float *bias, i64 begin, i64 end, u32 thr, int *gt,
                                           int *eq)
{
    int a = 0, e = 0;
    for (i64 i = begin + threadIdx.x; i < end; i += P_T) {
        u32 key = topk_order_key(topk_source(s, bias, i));
        a += key > thr;
        e += key == thr;
    }
    *gt = a, *eq = e;
}

// Warp 0 only: the digit of hist (read from the top digit down) holding the need-th largest key;
// *new_prefix = prefix with that digit at shift, *new_need = need minus the keys of higher digits.
__device__ __forceinline__ void topk_pick_digit(const int *hist, u32 prefix, int need, int shift, u32 *new_prefix,
                                                int *new_need)
{
    const int lane = threadIdx.x & 31;
    int cnt[8], lane_sum = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        cnt[j] = hist[255 - 8 * lane - j];
        lane_sum += cnt[j];
    }
    int incl = lane_sum; // inclusive scan from the top digit down
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
            incl += t;
    }
    int before = incl - lane_sum;
    u32 hit = __ballot_sync(0xffffffffu, before < need && incl >= need);
    if (lane == __ffs(hit) - 1) {
        int above = before, j = 0;
        for (; j < 7; j++) {
            if (above + cnt[j] >= need)
                break;
            above += cnt[j];
        }
        *new_prefix = prefix | ((u32)(255 - 8 * lane - j) << shift);
        *new_need = need - above;
    }
}

// The ordered pass over [begin, end): keys above thr all go; of the keys equal to thr, those whose
// rank among all equal keys of the row (base_eq of them lie before begin) is below need. Chosen
// entries go to out_idx/out_val from position base_sel on, in ascending index order.
template <class Src>
__device__ void topk_ordered_pass_src(const Src &src, i64 begin, i64 end, u32 thr, int need, int base_eq,
                                      int base_sel, int *out_idx, float *out_val, int *sh)
{
    for (i64 t0 = begin; t0 < end; t0 += (i64)P_T * TOPK_V) {
        u32 key[TOPK_V];
        int gt = 0, eq = 0;
#pragma unroll
        for (int j = 0; j < TOPK_V; j++) {
            i64 i = t0 + (i64)threadIdx.x * TOPK_V + j;
            key[j] = i < end ? topk_order_key(src.rank(i)) : 0u;
            if (i < end) {
                gt += key[j] > thr;
                eq += key[j] == thr;
            }
        }
        int tot_eq, tot_sel;
        int ex_eq = block_excl_scan(eq, &tot_eq, sh);
        int take = need - (base_eq + ex_eq);
        take = take < 0 ? 0 : take > eq ? eq : take;
        int pos = base_sel + block_excl_scan(gt + take, &tot_sel, sh);
#pragma unroll
        for (int j = 0; j < TOPK_V; j++) {
            i64 i = t0 + (i64)threadIdx.x * TOPK_V + j;
            if (i >= end)
                break;
            int chosen = key[j] > thr;
            if (key[j] == thr) {
                chosen = take > 0;
                take -= chosen;
            }
            if (chosen) {
                out_idx[pos] = src.index(i);
                out_val[pos] = src.value(i);
                pos++;
            }
        }
        base_eq += tot_eq;
        base_sel += tot_sel;
    }
}

__device__ void topk_ordered_pass(const float *s, const float *bias, i64 begin, i64 end, u32 thr, int need,
                                  int base_eq, int base_sel, int *out_idx, float *out_val, int *sh)
{
    topk_row_src src = {s, bias};
    topk_ordered_pass_src(src, begin, end, thr, need, base_eq, base_sel, out_idx, out_val, sh);
}
