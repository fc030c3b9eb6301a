/* Host launcher of the cast family (kit/src/cast.cu; reference runtime/ref/cast.h). The variant comes from
 * the family's rule (manifest/rules/rules.h), the kernel from the kit by family and parameters. */
#ifndef DSK_LAUNCH_CAST_H
#define DSK_LAUNCH_CAST_H

#include "runtime/driver/kit.h"

#include <stdint.h>

/* y bf16 [n] = x fp32 [n] rounded. */
int op_cast_bf16(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr y, int64_t n);
/* y fp32 [n] = bf16(bf16(x) · scale) (in place allowed). */
int op_cast_scale(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr y, int64_t n, float scale);

#endif
