#include "runtime/launch/rows_copy.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <limits.h>

int op_rows_copy(const kit *k, CUstream s, CUdeviceptr src, int64_t src_stride, CUdeviceptr src_idx, CUdeviceptr dst,
                 int64_t dst_stride, CUdeviceptr dst_idx, int n, int row_bytes)
{
    if (n < 0 || row_bytes <= 0 || row_bytes % 16)
        return dsk_err("rows_copy: %d rows of %d bytes (n >= 0, row_bytes a positive multiple of 16)", n, row_bytes);
    if (src_stride < row_bytes || src_stride % 16 || dst_stride < row_bytes || dst_stride % 16)
        return dsk_err("rows_copy: strides %lld (src) and %lld (dst) must be multiples of 16 and at least the row "
                       "(%d bytes)", (long long)src_stride, (long long)dst_stride, row_bytes);
    if (!src || !dst || src % 16 || dst % 16 || src_idx % 16 || dst_idx % 16)
        return dsk_err("rows_copy: src %#llx, dst %#llx, src_idx %#llx, dst_idx %#llx: src and dst are needed, "
                       "every pointer 16-byte aligned", (unsigned long long)src, (unsigned long long)dst,
                       (unsigned long long)src_idx, (unsigned long long)dst_idx);
    int64_t threads = (int64_t)n * (row_bytes / 16);
    rule_variant v;
    rule_rows_copy_pick(&v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int T = kk->meta->block;
    if ((threads + T - 1) / T > INT_MAX)
        return dsk_err("rows_copy: %d rows of %d bytes is too large for one launch", n, row_bytes);
    if (n == 0)
        return 0;
    void *args[] = {&src, &src_stride, &src_idx, &dst, &dst_stride, &dst_idx, &n, &row_bytes};
    if (kit_launch(kk, (unsigned)((threads + T - 1) / T), 1, 1, s, args, 8))
        return dsk_err_ctx("rows_copy %s", v.params);
    return 0;
}
