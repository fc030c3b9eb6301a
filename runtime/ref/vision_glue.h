/* CPU reference of the vision_glue family (vision.md §3.2, §3.3, §3.6): the vision RMSNorm, the 2-D RoPE and
 * its table, the space-to-depth of the aligner. The CPU tower (runtime/cpu/vision_tower.c) runs on these.
 * fp32 buffers; with bf16 set the results are rounded to bf16 (REF's bf16 path), without it not. */
#ifndef DSK_REF_VISION_GLUE_H
#define DSK_REF_VISION_GLUE_H

#include <stddef.h>

/* y = w ⊙ (x·(mean(x²) + 1e-6)^(-1/2)) per row of D: eps 1e-6 (REF never passes the config's), the fp32
 * weight multiplied last, the sum of squares in index order. */
void ref_vision_rmsnorm(int bf16, const float *x, int n, int D, const float *w, float *y);

/* cos/sin [nh·nw][R] (R = head_dim / 2) of §3.3: the first R/2 angles by the patch's row, the rest by its
 * column, f_i = 1 / θ^(2i/R) in fp32 (exponent, power and reciprocal, as REF forms them). Allocated here
 * (free both); -1 with a message on failure. */
int ref_vision_rope_table(int head_dim, float theta, int nh, int nw, float **cs, float **sn);

/* Rotate-half RoPE over whole heads (dim k pairs with k + hd/2) of N rows of `heads` vectors at stride
 * `stride` floats, in place; each product and each sum rounded by itself (no FMA). */
void ref_vision_rope(int bf16, float *x, size_t stride, int N, int heads, int hd, const float *cs, const float *sn);

/* Space-to-depth (§3.6): cells [⌈nh/r⌉·⌈nw/r⌉][r²·D], element ch·r² + ki·r + kj of cell (bi, bj) =
 * grid[r·bi + ki][r·bj + kj][ch], zero past the grid's bottom and right edges. */
void ref_vision_s2d(const float *grid, int nh, int nw, int D, int r, float *cells);

#endif
