/* Host launcher of the top-k families topk, topk_small, topk_tl, topk_mb (kit/src/topk*.cu; reference
 * runtime/ref/topk.h).
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_TOPK_H
#define DSK_LAUNCH_TOPK_H

#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* Per row: top-kk of scores[row * ld + i] (+ bias[i] when bias != 0), ties to the lower index; writes
 * idx[rows, kk] (ascending) and val[rows, kk] (unbiased scores). 1 <= kk <= N. Long rows run on several
 * blocks per row and need a workspace of op_topk_ws_bytes(rows, N, kk) bytes (0 for short rows: ws may be 0). */
int op_topk(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk, int64_t ld,
            CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes);
size_t op_topk_ws_bytes(int rows, int N, int kk);
/* op_topk with the blocks per row forced (1: the one-block kernels; > 1: topk_mb; 0: the rule's choice), for
 * tests and benchmarks; the workspace needs op_topk_ws_bytes_blocks(rows, blocks) bytes. */
int op_topk_blocks(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk, int64_t ld,
                   CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes, int blocks);
size_t op_topk_ws_bytes_blocks(int rows, int blocks);
/* op_topk as topk_tl with the blocks per row forced (N / blocks >= kk), for tests and benchmarks; the
 * workspace needs op_topk_tl_ws_bytes(rows, blocks, kk) bytes. */
int op_topk_tl(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk, int64_t ld,
               CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes, int blocks);
size_t op_topk_tl_ws_bytes(int rows, int blocks, int kk);

#endif
