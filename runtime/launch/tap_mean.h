/* Host launcher of the tap_mean family (kit/src/tap_mean.cu; reference runtime/ref/tap_mean.h). The
 * variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters. */
#ifndef DSK_LAUNCH_TAP_MEAN_H
#define DSK_LAUNCH_TAP_MEAN_H

#include "runtime/driver/kit.h"

/* taps[r][target] (bf16 [rows][n_targets][d]) = bf16(Σ_c x[r][c] / hc) for x bf16 [rows][hc][d]; the other
 * targets' slots are not written. Pointers 16-byte aligned, d a multiple of 8, 0 <= target < n_targets. */
int op_tap_mean(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr taps, int rows, int hc, int d, int n_targets,
                int target);

#endif
