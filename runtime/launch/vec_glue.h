/* Host launcher of the vec_glue family (kit/src/vec_glue.cu; reference runtime/ref/vec_glue.h): per row of
 * `heads` bf16 vectors of `width`, optional RMSNorm, RoPE and KV quantise-dequantise, in that order.
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_VEC_GLUE_H
#define DSK_LAUNCH_VEC_GLUE_H

#include "kit/src/vec_glue_abi.cuh"
#include "runtime/driver/kit.h"
#include "runtime/common/kv_quant.h"

#include <stdint.h>

typedef struct {
    CUdeviceptr norm_w; /* bf16 [width]: RMSNorm with this weight first; 0: no norm */
    float eps;          /* the norm's epsilon */
    int rope_dim;       /* 0: no RoPE; else 8..64, a multiple of 8: the last rope_dim dims are rotated */
    CUdeviceptr freqs;  /* fp32 [rope_dim/2]: the frequencies θ′_j of ref_rope_freqs */
    CUdeviceptr pos;    /* i32 [rows]: each row's position (angle = fp32(pos)·θ′_j) */
    int inverse;        /* rotate by the conjugate angle (the attention output) */
    kvq_kind qdq;       /* the quantise-dequantise last */
} vec_glue_op;

/* y[r][h] = glue(x[r][h]): vector (r, h) at x + r·x_stride + h·width elements (y likewise); y == x (with the
 * same stride) works in place, and an in-place RoPE alone reads and writes only the rotated dims. width
 * 8..2048, a multiple of 8 and of the QDQ block (16 or 32); strides multiples of 8, at least heads·width;
 * every pointer 16-byte aligned. */
int op_vec_glue(const kit *k, CUstream s, const vec_glue_op *op, CUdeviceptr x, int x_stride, CUdeviceptr y,
                int y_stride, int rows, int heads, int width);

/* One op of a launch: op_vec_glue's arguments but the rows, and where the rows go. */
typedef struct {
    const vec_glue_op *op;
    CUdeviceptr x;
    int x_stride;
    CUdeviceptr y;
    int y_stride;
    int heads, width;
    /* i32 [rows] on the device, or 0: row r's vectors go to y row y_idx[r] (none when < 0: a store into
     * cache rows, no copy after). Out of place only (y != x), no two rows to one y row. */
    CUdeviceptr y_idx;
} vec_glue_call;

/* 1..VG_MAX_OPS (3) independent ops on the same rows in one launch, each what op_vec_glue does with it: no
 * op may write what another reads or writes (each may work in place). QDQ kinds may differ (the mixed
 * variant then); the widest op picks the variant's chunks. */
int op_vec_glue_multi(const kit *k, CUstream s, const vec_glue_call *calls, int n, int rows);

#endif
