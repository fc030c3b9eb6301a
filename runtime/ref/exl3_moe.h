/* CPU reference of the EXL3 MoE form (model.md §3.7), composed of exl3_matmul calls; the GPU's fused
 * MoE (runtime/gpu/exl3_ops.h, op_exl3_moe) is tested against it. Rounding points, per row r and each
 * of its local experts e (slot weight w):
 *   g = bf16(x_r·W1_e), u = bf16(x_r·W3_e)          each matmul output rounded to bf16, then widened
 *   g = min(g, 10); u = clamp(u, -10, 10)
 *   h = bf16(w · (silu(g) · u))                      fp32, silu(g) = g / (1 + exp(-g)); bf16 is W2's input
 *   o_e = bf16(h·W2_e)
 *   y_r = y_r (accumulate) or 0, then + o_e for the row's experts in ascending expert id, in fp32. */
#ifndef DSK_REF_EXL3_MOE_H
#define DSK_REF_EXL3_MOE_H

#include "runtime/ref/exl3.h"

#include <stdint.h>

/* w1[e], w3[e] (k -> n) and w2[e] (n -> k) for e < nexp; x: rows × k fp32 (bf16 values); route:
 * rows × topk expert ids, ids in [e_lo, e_lo + nexp) are local (table entry id - e_lo), others skipped;
 * route NULL: every row uses expert 0 with weight 1. y: rows × k fp32. Returns -1 if scratch cannot be
 * allocated. */
int exl3_moe_ref(const exl3_linear *w1, const exl3_linear *w3, const exl3_linear *w2, int nexp, const float *x,
                 int rows, const int32_t *route, const float *weights, int topk, int e_lo, int accumulate, float *y);

#endif
