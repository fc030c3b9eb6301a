/* Host launcher of the cand_blocks family (kernels cand_blocks and cand_mask, kit/src/cand_*.cu; the top-k
 * between them is the topk family's; reference runtime/ref/cand_blocks.h): per row, the candidate source's
 * block scores, its top-min(cap, blocks) and the kept blocks (finite scores) as the bitmap index_score
 * reads on the Reindex layers (docs/engine.md). A row set whose blocks all fit the cap (no top-k) is one
 * launch: the block scores' kernel writes the bitmap too. */
#ifndef DSK_LAUNCH_CAND_BLOCKS_H
#define DSK_LAUNCH_CAND_BLOCKS_H

#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* Every device pointer 16-byte aligned. */
typedef struct {
    CUdeviceptr scores; /* fp32 [rows][lds]: the candidate source's index scores (index_score's output) */
    int64_t lds;
    int N;              /* scores per row in this launch (>= every row's reach) */
    CUdeviceptr reach;  /* i32 [rows]: the row's reachable keys (clamped to [0, N]) */
    int rows;
    int block, cap;     /* candidate_block_size, candidate_topk_blocks */
    CUdeviceptr bitmap; /* u32 [rows][ldw] out: bit b of word b / 32 set for every kept block b */
    int ldw;            /* >= ceil(ceil(N / block) / 32) */
    CUdeviceptr ws;     /* op_cand_blocks_ws_bytes: the block scores (first), the top-k's output and workspace */
    size_t ws_bytes;
} cand_blocks_args;

size_t op_cand_blocks_ws_bytes(int rows, int N, int block, int cap);
/* The block scores stay at offset 0 of ws, fp32 [rows][op_cand_blocks_ldb(N, block)] (tests read them). */
int64_t op_cand_blocks_ldb(int N, int block);
int op_cand_blocks(const kit *k, CUstream s, const cand_blocks_args *a);

#endif
