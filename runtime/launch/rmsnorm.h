/* Host launcher of the rmsnorm family (kit/src/rmsnorm.cu; reference runtime/ref/rmsnorm.h).
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_RMSNORM_H
#define DSK_LAUNCH_RMSNORM_H

#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* y[rows, width] = RMSNorm(x) * w, bf16; width % 8 == 0, 8 <= width <= 65536. */
int op_rmsnorm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int width, float eps);

#endif
