#include "runtime/launch/engram_rows.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <limits.h>

static int launch(const kit *k, CUstream s, int from_table, CUdeviceptr rec, CUdeviceptr values, CUdeviceptr scales,
                  CUdeviceptr idx, int n, int cols, int w, CUdeviceptr out, int64_t out_stride)
{
    const char *what = from_table ? "engram_rows (table)" : "engram_rows (records)";
    if (n < 0 || cols < 1 || w <= 0 || w % 32)
        return dsk_err("%s: %d positions of %d rows of width %d (width a positive multiple of 32)", what, n, cols, w);
    if (out_stride < (int64_t)cols * w || out_stride % 8)
        return dsk_err("%s: out stride %lld must be a multiple of 8 and at least cols·w = %lld", what,
                       (long long)out_stride, (long long)cols * w);
    if (!out || out % 16 || (!from_table && (!rec || rec % 16)) ||
        (from_table && (!values || values % 16 || !scales || scales % 16 || !idx || idx % 16)))
        return dsk_err("%s: a pointer is missing or not 16-byte aligned (records %#llx, values %#llx, scales %#llx, "
                       "idx %#llx, out %#llx)", what, (unsigned long long)rec, (unsigned long long)values,
                       (unsigned long long)scales, (unsigned long long)idx, (unsigned long long)out);
    int64_t threads = (int64_t)n * cols * (w / 8);
    if (threads / 256 >= INT_MAX)
        return dsk_err("%s: %d positions of %d rows of %d is too large for one launch", what, n, cols, w);
    if (n == 0)
        return 0;
    rule_variant v;
    rule_engram_rows_pick(from_table, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int T = kk->meta->block;
    void *args[] = {&rec, &values, &scales, &idx, &out, &out_stride, &n, &cols, &w};
    if (kit_launch(kk, (unsigned)((threads + T - 1) / T), 1, 1, s, args, 9))
        return dsk_err_ctx("engram_rows %s", v.params);
    return 0;
}

int op_engram_records(const kit *k, CUstream s, CUdeviceptr records, int n, int cols, int w, CUdeviceptr out,
                      int64_t out_stride)
{
    return launch(k, s, 0, records, 0, 0, 0, n, cols, w, out, out_stride);
}

int op_engram_table_rows(const kit *k, CUstream s, CUdeviceptr values, CUdeviceptr scales, CUdeviceptr idx, int n,
                         int cols, int w, CUdeviceptr out, int64_t out_stride)
{
    return launch(k, s, 1, 0, values, scales, idx, n, cols, w, out, out_stride);
}
