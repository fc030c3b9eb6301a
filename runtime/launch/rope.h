/* Host launcher of the rope family (kit/src/rope.cu; reference runtime/ref/rope.h).
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_ROPE_H
#define DSK_LAUNCH_ROPE_H

#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* In place on x[rows, heads, head_dim] bf16: rotate the last rope_dim dims (32 or 64) of every head by the
 * table row pos[r] (float2 cos/sin per pair); inverse rotates by the conjugate. */
int op_rope(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr pos, CUdeviceptr table, int rows, int heads,
            int head_dim, int rope_dim, int inverse);

#endif
