/* CPU reference of the rows_copy family: whole rows gathered and scattered by index lists. */
#ifndef DSK_REF_ROWS_COPY_H
#define DSK_REF_ROWS_COPY_H

#include <stdint.h>

/* For i < n: dst row (dst_idx ? dst_idx[i] : i) = src row (src_idx ? src_idx[i] : i), row_bytes each; row j
 * of a side starts j·stride bytes from its base. A dst index < 0 skips the row. */
void ref_rows_copy(const void *src, int64_t src_stride, const int32_t *src_idx, void *dst, int64_t dst_stride,
                   const int32_t *dst_idx, int n, int row_bytes);

#endif
