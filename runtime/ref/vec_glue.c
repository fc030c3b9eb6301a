#include "runtime/ref/vec_glue.h"
#include "runtime/ref/kvquant.h"
#include "runtime/ref/rmsnorm.h"
#include "runtime/ref/rope.h"

#include <string.h>

void ref_vec_glue(const uint16_t *x, int64_t x_stride, uint16_t *y, int64_t y_stride, int rows, int heads,
                  int width, const ref_vec_glue_op *op)
{
    for (int r = 0; r < rows; r++) {
        int32_t trow = op->table_row ? op->table_row[r] : r;
        for (int h = 0; h < heads; h++) {
            const uint16_t *xv = x + r * x_stride + (int64_t)h * width;
            uint16_t *yv = y + r * y_stride + (int64_t)h * width;
            if (yv != xv)
                memmove(yv, xv, sizeof(uint16_t) * (size_t)width);
            if (op->norm_w)
                ref_rmsnorm_bf16(yv, op->norm_w, yv, 1, width, op->eps);
            if (op->rope_dim)
                ref_rope_apply_bf16(yv, 1, 1, width, op->rope_dim, &trow, op->cos_sin, op->inverse);
            switch (op->qdq) {
            case KVQ_FP8_E4M3:
                kvq_fp8_e4m3(yv, width);
                break;
            case KVQ_FP4_E4M3:
                kvq_fp4_e4m3(yv, width);
                break;
            case KVQ_FP4_E8M0:
                kvq_fp4_e8m0(yv, width);
                break;
            default:
                break;
            }
        }
    }
}
