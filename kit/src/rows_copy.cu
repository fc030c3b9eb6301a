// rows_copy: dst row dst_idx[i] (or i) <- src row src_idx[i] (or i) for i < n, row_bytes each (a multiple
// of 16), each side with its own row stride in bytes; a dst index < 0 skips the row. Ring writes,
// compressed-row stores, the ratio-2 state. Tuned for 1-4096 rows of 256 B-4 KiB: one thread per
// 16-byte chunk, consecutive threads along a row (coalesced). Exact (a copy, no arithmetic).
#include "rows_copy.cuh"

// Two independent copies may share a launch (grid y = the copy): the stores of one stage (a latent and its
// index key, the ratio-2 state's two halves).
DSK_KERNEL void __launch_bounds__(P_T) DSK_SYMBOL(const u8 *__restrict__ src0, i64 src_stride0,
                                                  const int *__restrict__ src_idx0, u8 *__restrict__ dst0,
                                                  i64 dst_stride0, const int *__restrict__ dst_idx0, int n0,
                                                  int row_bytes0, const u8 *__restrict__ src1, i64 src_stride1,
                                                  const int *__restrict__ src_idx1, u8 *__restrict__ dst1,
                                                  i64 dst_stride1, const int *__restrict__ dst_idx1, int n1,
                                                  int row_bytes1)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const bool second = blockIdx.y == 1;
    const u8 *src = second ? src1 : src0;
    u8 *dst = second ? dst1 : dst0;
    const int *src_idx = second ? src_idx1 : src_idx0, *dst_idx = second ? dst_idx1 : dst_idx0;
    const i64 src_stride = second ? src_stride1 : src_stride0, dst_stride = second ? dst_stride1 : dst_stride0;
    const int n = second ? n1 : n0, row_bytes = second ? row_bytes1 : row_bytes0;
    const i64 t = (i64)blockIdx.x * P_T + threadIdx.x;
    rows_copy_chunk(src, src_stride, src_idx, dst, dst_stride, dst_idx, n, row_bytes, t);
}
