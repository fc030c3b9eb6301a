/* CPU reference of the rmsnorm family (model.md §2). */
#ifndef DSK_REF_RMSNORM_H
#define DSK_REF_RMSNORM_H

#include <stdint.h>

/* RMSNorm (model.md §2): y = bf16(w * (x * (mean(x^2) + eps)^-1/2)) per row; x, w, y bf16, fp32 math.
 * The sum of squares runs in index order. x and y may alias. */
void ref_rmsnorm_bf16(const uint16_t *x, const uint16_t *w, uint16_t *y, int rows, int width, float eps);

#endif
