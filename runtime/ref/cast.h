/* CPU reference of the cast family: fp32 -> bf16 (round to nearest even), and bf16(bf16(x) · scale) kept in
 * fp32 (the indexer's head weights, model.md §3.5: the weights_proj GEMM's bf16 output times the exact
 * factor, rounded again). */
#ifndef DSK_REF_CAST_H
#define DSK_REF_CAST_H

#include <stddef.h>
#include <stdint.h>

void ref_cast_bf16(const float *x, uint16_t *y, size_t n);
void ref_cast_scale(const float *x, float *y, size_t n, float scale);

#endif
