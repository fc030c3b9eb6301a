/* Host launcher of the rowmm_bf16 family (kit/src/rowmm.cu; reference runtime/ref/rowmm.h).
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_ROWMM_H
#define DSK_LAUNCH_ROWMM_H

#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* y[rows, N] fp32 = x[rows, K] . w[N, K]^T, bf16 inputs; K % 32 == 0; any rows, one launch (chunks of 16 rows
 * over grid y). */
int op_rowmm_bf16(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int K, int N);
/* The same, each output then bf16(bf16(y)·scale) in fp32 (the indexer's head weights): the bits of
 * op_rowmm_bf16 followed by op_cast_scale, in one launch. scale finite, not 0. */
int op_rowmm_bf16_scaled(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int K,
                         int N, float scale);

#endif
