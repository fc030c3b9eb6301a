/* Host launcher of the engram_rows family (kit/src/engram_rows.cu; reference runtime/ref/engram_rows.h):
 * the Engram table rows of a round dequantised to bf16, from records the host uploaded (the Engram store's
 * format, runtime/engram/engram_store.h) or from a device-resident table. The variant comes from the
 * family's rule (manifest/rules/rules.h), the kernel from the kit by family and parameters, never by file. */
#ifndef DSK_LAUNCH_ENGRAM_ROWS_H
#define DSK_LAUNCH_ENGRAM_ROWS_H

#include "runtime/driver/kit.h"

#include <stdint.h>

/* out[p][col·w ..] (position rows of out_stride elements) = the records p·cols + col of `records`
 * (n·cols records of w e4m3 values then w/32 e8m0 scales, back to back). w a positive multiple of 32,
 * out_stride >= cols·w and a multiple of 8; records and out 16-byte aligned. */
int op_engram_records(const kit *k, CUstream s, CUdeviceptr records, int n, int cols, int w, CUdeviceptr out,
                      int64_t out_stride);
/* The same from a device table: values e4m3 [rows][w], scales e8m0 [rows][w/32], at the i64 row indices
 * idx[p][col] (in range: the host computed them from the table's layout). */
int op_engram_table_rows(const kit *k, CUstream s, CUdeviceptr values, CUdeviceptr scales, CUdeviceptr idx, int n,
                         int cols, int w, CUdeviceptr out, int64_t out_stride);

#endif
