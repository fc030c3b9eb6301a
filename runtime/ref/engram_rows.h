/* CPU reference of the engram_rows family (model.md §3.3): Engram table rows (FP8 e4m3 values with one
 * e8m0 scale per 32) dequantised to bf16, value times its block's scale. */
#ifndef DSK_REF_ENGRAM_ROWS_H
#define DSK_REF_ENGRAM_ROWS_H

#include <stdint.h>

/* Bytes of one record of a table of width w (w e4m3 values, then w/32 e8m0 scales). */
static inline int ref_engram_record_bytes(int w)
{
    return w + w / 32;
}

/* One row: out[w] = bf16(e4m3(values[i]) · e8m0(scales[i/32])). */
void ref_engram_row(const uint8_t *values, const uint8_t *scales, int w, uint16_t *out);
/* n positions × cols records (record p·cols + col at (p·cols + col)·record_bytes) -> out[p][col·w ..] with
 * rows of out_stride elements. */
void ref_engram_records(const uint8_t *records, int n, int cols, int w, uint16_t *out, int64_t out_stride);
/* The same from a table: values [rows][w], scales [rows][w/32], row idx[p·cols + col]. */
void ref_engram_table_rows(const uint8_t *values, const uint8_t *scales, const int64_t *idx, int n, int cols, int w,
                           uint16_t *out, int64_t out_stride);

#endif
