/* Host launcher of the rows_copy family (kit/src/rows_copy.cu; reference runtime/ref/rows_copy.h): whole
 * rows gathered and scattered by index lists (ring writes, compressed-row stores, the ratio-2 state).
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_ROWS_COPY_H
#define DSK_LAUNCH_ROWS_COPY_H

#include "runtime/driver/kit.h"

#include <stdint.h>

/* For i < n: dst row (dst_idx ? dst_idx[i] : i) = src row (src_idx ? src_idx[i] : i), row_bytes each (a
 * positive multiple of 16); row j of a side starts j·stride bytes from its base (strides multiples of 16,
 * at least row_bytes); a dst index < 0 skips the row. src_idx and dst_idx are i32 [n] on the device (0:
 * identity). The rows written must not overlap the rows read, and no two rows may share a destination
 * (the plan gives -1 to all but one). Every pointer 16-byte aligned. */
int op_rows_copy(const kit *k, CUstream s, CUdeviceptr src, int64_t src_stride, CUdeviceptr src_idx, CUdeviceptr dst,
                 int64_t dst_stride, CUdeviceptr dst_idx, int n, int row_bytes);

/* One copy of op_rows_copy's arguments. */
typedef struct {
    CUdeviceptr src;
    int64_t src_stride;
    CUdeviceptr src_idx, dst;
    int64_t dst_stride;
    CUdeviceptr dst_idx;
    int n, row_bytes;
} rows_copy_job;

/* One copy's checks (i names it in the message): what op_rows_copy_jobs refuses. */
int rows_copy_job_check(const rows_copy_job *j, int i);

/* 1 or 2 independent copies in one launch (what op_rows_copy does for each, in either order): neither may
 * write what the other reads or writes. */
int op_rows_copy_jobs(const kit *k, CUstream s, const rows_copy_job *jobs, int njobs);

#endif
