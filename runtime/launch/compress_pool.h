/* Host launcher of the compress_pool family (kit/src/compress_pool.cu; reference
 * runtime/ref/compress_pool.h): ratio-2 compressor pooling of the groups closing in a round -> bf16
 * latents. The state writes of the round's (a_t, s_t) into the ring are rows_copy launches after this one
 * (runtime/launch/rows_copy.h), so a group's first token is read before its slot can be overwritten.
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_COMPRESS_POOL_H
#define DSK_LAUNCH_COMPRESS_POOL_H

#include "runtime/driver/kit.h"

#include <stdint.h>

typedef struct {
    CUdeviceptr a, s;          /* fp32: the round's a_t and s_t, row r at r·stride floats */
    int64_t stride;
    CUdeviceptr st_a, st_s;    /* fp32: the state ring's a and s, state row q at q·st_stride floats (0 when no
                                * entry reads the state) */
    int64_t st_stride;
} compress_pool_src;

/* out[g][hd] (row g at g·out_stride elements) = pool of entries[g] = {first, second} (i32 [groups][2] on the
 * device): first >= 0 a round row, first < 0 the state row −1 − first; second a round row. hd a positive
 * multiple of 8, strides multiples of 4 (floats) and 8 (out), every pointer 16-byte aligned. */
int op_compress_pool(const kit *k, CUstream s, const compress_pool_src *src, CUdeviceptr entries, CUdeviceptr out,
                     int64_t out_stride, int groups, int hd);

#endif
