/* CPU reference of the cand_blocks family (model.md §3.5, candidate source): a row's block scores, the
 * blocks it keeps, and the per-row candidate set (a bitmap over blocks) the Reindex layers read. The CPU
 * backend (runtime/cpu/compressor.c) computes with these; the GPU kernels (kit/src/cand_blocks.cu,
 * cand_mask.cu) are tested against them. */
#ifndef DSK_REF_CAND_BLOCKS_H
#define DSK_REF_CAND_BLOCKS_H

#include <stdint.h>

/* Block scores of one row over its `reach` reachable scores: bs[k] = max of score[kB .. min((k+1)B,
 * reach)) (NaN never taken, the first of equal values kept), for k < nb = ceil(reach / B); the newest
 * block (reach − 1) / B pinned to +∞ (none for reach 0). Returns nb. */
int64_t ref_cand_block_scores(const float *score, int64_t reach, int block, float *bs);

/* The kept blocks of one row: top min(cap, nb) of the block scores (ties to the lower block), those
 * above −∞, ascending, into kept[]; returns how many. bs and val are scratch of nb floats. */
int ref_cand_blocks(const float *score, int64_t reach, int block, int cap, int32_t *kept, float *bs, float *val);

/* The candidate set as a bitmap over blocks: words[0 .. words) cleared, then bit kept[i] set. */
void ref_cand_bitmap(const int32_t *kept, int n, uint32_t *bitmap, int64_t words);

#endif
