// rows_copy's body (kit/src/rows_copy.cu), also run by kernels that take a copy as extra CTAs of their
// launch (mhc_post): thread t of a copy moves 16-byte chunk t % (row_bytes / 16) of row t / (row_bytes /
// 16), dst row dst_idx[i] (or i) <- src row src_idx[i] (or i); a dst index < 0 skips the row.
#pragma once
#include "dskit_kernel.cuh"

__device__ __forceinline__ void rows_copy_chunk(const u8 *__restrict__ src, i64 src_stride,
                                                const int *__restrict__ src_idx, u8 *__restrict__ dst,
                                                i64 dst_stride, const int *__restrict__ dst_idx, int n,
                                                int row_bytes, i64 t)
{
    const int per_row = row_bytes >> 4;
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
