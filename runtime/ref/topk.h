/* CPU reference of the top-k families (topk, topk_small, topk_mb): dskit's order (docs/kernels.md). */
#ifndef DSK_REF_TOPK_H
#define DSK_REF_TOPK_H

#include <stdint.h>

/* Top-k of one row: the k entries with the largest key = score[i] (+ bias[i] when bias is not NULL),
 * ties going to the lower index, NaN keys below everything. Output: the chosen indices in ascending
 * index order and their unbiased scores. k <= N. */
void ref_topk(const float *score, const float *bias, int N, int k, int32_t *idx, float *val);

#endif
