// rows_copy: dst row dst_idx[i] (or i) <- src row src_idx[i] (or i) for i < n, row_bytes each (a multiple
// of 16), each side with its own row stride in bytes; a dst index < 0 skips the row. Ring writes,
// compressed-row stores, the ratio-2 state. Tuned for 1-4096 rows of 256 B-4 KiB: one thread per
// 16-byte chunk, consecutive threads along a row (coalesced). Exact (a copy, no arithmetic).
#include "dskit_kernel.cuh"

DSK_KERNEL void __launch_bounds__(P_T) DSK_SYMBOL(const u8 *__restrict__ src, i64 src_stride,
                                                  const int *__restrict__ src_idx, u8 *__restrict__ dst,
                                                  i64 dst_stride, const int *__restrict__ dst_idx, int n,
                                                  int row_bytes)
{
    const int per_row = row_bytes >> 4;
    const i64 t = (i64)blockIdx.x * P_T + threadIdx.x;
    if (t >= (i64)n * per_row)
        return;
    const int i = (int)(t / per_row), c = (int)(t % per_row);
    const int d = dst_idx ? dst_idx[i] : i;
    if (d < 0)
        return;
    const int s = src_idx ? src_idx[i] : i;
    const uint4 v = ((const uint4 *)(src + (i64)s * src_stride))[c];
    ((uint4 *)(dst + (i64)d * dst_stride))[c] = v;
}
