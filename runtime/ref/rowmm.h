/* CPU reference of the rowmm_bf16 family: the bf16 row matmul (router gate, indexer weights). */
#ifndef DSK_REF_ROWMM_H
#define DSK_REF_ROWMM_H

#include <stdint.h>

/* Row matmul: y[r][n] = sum_k x[r][k] * w[n][k] in fp32, k ascending; x [rows, K], w [N, K] bf16. */
void ref_rowmm_bf16(const uint16_t *x, const uint16_t *w, float *y, int rows, int K, int N);

#endif
