/* CPU reference of the vec_glue family: per row of `heads` bf16 vectors of `width`, in this order,
 * optional RMSNorm (runtime/ref/rmsnorm.h), optional RoPE of the last rope_dim dims
 * (runtime/ref/rope.h), optional KV quantise-dequantise (runtime/ref/kvquant.h). The CPU forward's window
 * keys, compressed latents, index keys and index queries are this function. */
#ifndef DSK_REF_VEC_GLUE_H
#define DSK_REF_VEC_GLUE_H

#include "runtime/common/kv_quant.h"

#include <stdint.h>

typedef struct {
    const uint16_t *norm_w;   /* bf16 [width]: RMSNorm with this weight first; NULL: no norm */
    float eps;                /* the norm's epsilon */
    int rope_dim;             /* 0: no RoPE; else the last rope_dim dims of every vector are rotated */
    const float *cos_sin;     /* the (cos, sin) table of ref_rope_table */
    const int32_t *table_row; /* [rows]: the table row of each row; NULL: row r uses table row r */
    int inverse;              /* rotate by the conjugate angle */
    kvq_kind qdq;             /* the quantise-dequantise last */
} ref_vec_glue_op;

/* y[r][h] = glue(x[r][h]) for rows r, heads h: vector (r, h) at x + r·x_stride + h·width (elements; y
 * likewise). x and y may be the same buffer with the same stride. */
void ref_vec_glue(const uint16_t *x, int64_t x_stride, uint16_t *y, int64_t y_stride, int rows, int heads,
                  int width, const ref_vec_glue_op *op);

#endif
