// Top-k of rows of 32K to 64K entries in one launch (grid: blocks x rows), the same result as topk: the
// k largest keys (score + optional bias), ties to the lower index, written in ascending index order with
// the unbiased scores. Two levels, no block waiting for another:
//   every block: the top min(k, its length) of its slice [b·L, (b+1)·L) (L = ceil(N / blocks) >= k, so
//                every slice but the last holds k or more), the one-block radix passes of topk, written
//                as candidates (index, unbiased score) at b·k of the row's workspace;
//   the block that arrives last (the row's counter, which the host zeroes first): the top k of the
//                candidates, the same passes over them. Concatenated in slice order the candidates are
//                in ascending index order, and the k largest keys of the row are among them (each is
//                among the k largest of its slice), so ties go to the lower index as in one pass.
// Launched with programmatic dependent launch: it waits (griddepcontrol.wait) before it reads anything.
#include "topk_abi.cuh"
#include "topk_radix.cuh"

// The candidates of a row as a radix source: ranked by score (+ the bias at their index).
struct topk_cand_src {
    const int *idx;
    const float *val, *bias;
    // written by other blocks of this launch: read from L2
    __device__ __forceinline__ float rank(i64 j) const
    {
        return bias ? __ldcg(&val[j]) + bias[__ldcg(&idx[j])] : __ldcg(&val[j]);
    }
    __device__ __forceinline__ int index(i64 j) const { return __ldcg(&idx[j]); }
    __device__ __forceinline__ float value(i64 j) const { return __ldcg(&val[j]); }
};

// The k largest of src's entries [begin, end) (need = k of them), written from out_idx/out_val on in
// ascending order: four 8-bit digits, then the ordered pass. hist, sh, s_prefix, s_need: shared.
template <class Src>
__device__ void topk_block(const Src &src, i64 begin, i64 end, int need, int *out_idx, float *out_val, int *hist,
                           int *sh, u32 *s_prefix, int *s_need)
{
    u32 prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += P_T)
            hist[i] = 0;
        __syncthreads();
        topk_digit_hist_src(src, begin, end, prefix, mask, shift, hist);
        __syncthreads();
        if (threadIdx.x < 32)
            topk_pick_digit(hist, prefix, need, shift, s_prefix, s_need);
        __syncthreads();
        prefix = *s_prefix;
        need = *s_need;
        mask |= 255u << shift;
    }
    topk_ordered_pass_src(src, begin, end, prefix, need, 0, 0, out_idx, out_val, sh);
}

DSK_KERNEL void __launch_bounds__(P_T)
    DSK_SYMBOL(const float *__restrict__ scores, const float *__restrict__ bias, int N, int k, i64 ld,
               int *__restrict__ out_idx, float *__restrict__ out_val, int *ws, i64 ws_stride)
{
    dsk_pdl_wait();
    dsk_pdl_launch_next();
    const int row = blockIdx.y, b = blockIdx.x, nb = gridDim.x;
    const i64 L = ((i64)N + nb - 1) / nb;
    const i64 begin = min((i64)N, b * L), end = min((i64)N, begin + L);
    unsigned *arrive = (unsigned *)ws + row;
    int *cidx = ws + TOPK_TL_HEAD(gridDim.y) + (i64)row * ws_stride;
    float *cval = (float *)(cidx + (i64)nb * k);
    __shared__ int hist[256];
    __shared__ int sh[33];
    __shared__ u32 s_prefix;
    __shared__ int s_need, s_last;

    if (begin < end) {
        const int kb = (int)min((i64)k, end - begin);
        topk_row_src src = {scores + (i64)row * ld, bias};
        topk_block(src, begin, end, kb, cidx + (i64)b * k, cval + (i64)b * k, hist, sh, &s_prefix, &s_need);
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        s_last = atomicAdd(arrive, 1u) == (unsigned)nb - 1u;
    __syncthreads();
    if (!s_last)
        return;
    __threadfence();
    // the candidates: k from every slice but the last non-empty one, which gives min(k, its length)
    const i64 full = ((i64)N + L - 1) / L - 1;
    const i64 total = full * k + min((i64)k, (i64)N - full * L);
    topk_cand_src cs = {cidx, cval, bias};
    topk_block(cs, 0, total, k, out_idx + (i64)row * k, out_val + (i64)row * k, hist, sh, &s_prefix, &s_need);
}
