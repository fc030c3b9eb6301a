/* CPU reference of the rope family (model.md §2, §3.5): YaRN frequencies, the (cos, sin) table
 * and the rotation of the last rope_dim dims. */
#ifndef DSK_REF_ROPE_H
#define DSK_REF_ROPE_H

#include "runtime/model/rope.h"

#include <stdint.h>

/* YaRN correction range: low = max(floor(d(beta_fast)), 0), high = min(ceil(d(beta_slow)), R-1). */
void ref_rope_yarn_range(const rope_params *p, int *low, int *high);
/* Per-pair frequencies theta'_j (j < R/2) computed in fp32 in REF's order (model.md §3.5). */
void ref_rope_freqs(const rope_params *p, float *freqs);
/* Table of (cos, sin) for positions pos0 .. pos0+n_pos-1: entry [(p-pos0)*(R/2) + j] holds the pair for
 * the fp32 angle fp32(p) * theta'_j; cos and sin are taken in double of that fp32 angle and rounded. */
void ref_rope_table(const rope_params *p, int64_t pos0, int64_t n_pos, float *cos_sin);
/* Rotate the last R dims of every head vector in place: x [rows, heads, head_dim] bf16, interleaved
 * pairs (2j, 2j+1); row r uses table row pos[r] (relative to the table's pos0). inverse != 0 rotates by
 * the conjugate angle. Products and sums in fp32, result rounded to bf16. */
void ref_rope_apply_bf16(uint16_t *x, int rows, int heads, int head_dim, int rope_dim, const int32_t *pos,
                         const float *cos_sin, int inverse);

#endif
