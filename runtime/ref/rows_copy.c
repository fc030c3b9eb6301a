#include "runtime/ref/rows_copy.h"

#include <string.h>

void ref_rows_copy(const void *src, int64_t src_stride, const int32_t *src_idx, void *dst, int64_t dst_stride,
                   const int32_t *dst_idx, int n, int row_bytes)
{
    for (int i = 0; i < n; i++) {
        int32_t d = dst_idx ? dst_idx[i] : i, s = src_idx ? src_idx[i] : i;
        if (d >= 0)
            memcpy((char *)dst + d * dst_stride, (const char *)src + s * src_stride, (size_t)row_bytes);
    }
}
