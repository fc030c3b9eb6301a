/* Host launchers of the kit's basic families: each picks its variant from the problem's shape, looks
 * it up in the kit (by family and parameters, never by file) and launches it on a stream. */
#ifndef DSK_GPU_OPS_H
#define DSK_GPU_OPS_H

#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* y[rows, width] = RMSNorm(x) * w, bf16; width % 8 == 0, 8 <= width <= 65536. */
int op_rmsnorm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int width, float eps);
/* In place on x[rows, heads, head_dim] bf16: rotate the last rope_dim dims (32 or 64) of every head by the
 * table row pos[r] (float2 cos/sin per pair); inverse rotates by the conjugate. */
int op_rope(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr pos, CUdeviceptr table, int rows, int heads,
            int head_dim, int rope_dim, int inverse);
/* y[rows, N] fp32 = x[rows, K] . w[N, K]^T, bf16 inputs; K % 32 == 0; any rows (chunks of 16). */
int op_rowmm_bf16(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int K, int N);
/* Per row: top-kk of scores[row * ld + i] (+ bias[i] when bias != 0), ties to the lower index; writes
 * idx[rows, kk] (ascending) and val[rows, kk] (unbiased scores). 1 <= kk <= N. Long rows run on several
 * blocks per row and need a workspace of op_topk_ws_bytes(rows, N) bytes (0 for short rows: ws may be 0). */
int op_topk(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk, int64_t ld,
            CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes);
size_t op_topk_ws_bytes(int rows, int N);
/* op_topk with the blocks per row forced (1: the one-block kernels; 0: the rule's choice), for tests and
 * benchmarks; the workspace needs op_topk_ws_bytes_blocks(rows, blocks) bytes. */
int op_topk_blocks(const kit *k, CUstream s, CUdeviceptr scores, CUdeviceptr bias, int rows, int N, int kk, int64_t ld,
                   CUdeviceptr idx, CUdeviceptr val, CUdeviceptr ws, size_t ws_bytes, int blocks);
size_t op_topk_ws_bytes_blocks(int rows, int blocks);
/* Read `bytes` (a multiple of 16) from src with `blocks` blocks; one u32 per block to out. */
int op_stream_read(const kit *k, CUstream s, CUdeviceptr src, uint64_t bytes, CUdeviceptr out, int blocks);

/* The variant each launcher picks is decided by runtime/gpu/variant_rules.h (shared with `needs`). */

#endif
