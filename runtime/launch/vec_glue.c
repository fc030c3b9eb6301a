#include "runtime/launch/vec_glue.h"
#include "kit/src/vec_glue_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <limits.h>

static const char *const qdq_names[] = {"none", "FP8 e4m3", "FP4 e4m3", "FP4 e8m0"};

/* A pointer the kernel reads or writes: present and 16-byte aligned. */
static int check_ptr(CUdeviceptr p, const char *what)
{
    if (!p || p % 16)
        return dsk_err("vec_glue: %s %s (%#llx): every device pointer must be 16-byte aligned", what,
                       p ? "is misaligned" : "is missing", (unsigned long long)p);
    return 0;
}

int op_vec_glue(const kit *k, CUstream s, const vec_glue_op *op, CUdeviceptr x, int x_stride, CUdeviceptr y,
                int y_stride, int rows, int heads, int width)
{
    if (rows < 0 || heads < 1)
        return dsk_err("vec_glue: %d rows of %d heads (rows >= 0, heads >= 1)", rows, heads);
    if (width < 8 || width > 2048 || width % 8)
        return dsk_err("vec_glue: width %d must be a multiple of 8 in [8, 2048]", width);
    if ((int)op->qdq < 0 || op->qdq >= KVQ_KINDS)
        return dsk_err("vec_glue: unknown QDQ kind %d", (int)op->qdq);
    if (op->qdq != KVQ_NONE && width % kvq_block(op->qdq))
        return dsk_err("vec_glue: width %d is not a multiple of the %s block (%d)", width, qdq_names[op->qdq],
                       kvq_block(op->qdq));
    if (op->rope_dim < 0 || op->rope_dim > 64 || op->rope_dim % 8 || op->rope_dim > width)
        return dsk_err("vec_glue: rope_dim %d must be 0 or a multiple of 8 up to min(64, width %d)", op->rope_dim,
                       width);
    if (op->inverse && !op->rope_dim)
        return dsk_err("vec_glue: inverse RoPE asked with rope_dim 0");
    if ((int64_t)heads * width > INT_MAX || (int64_t)rows * heads > (int64_t)INT_MAX * VG_WARPS)
        return dsk_err("vec_glue: %d rows of %d heads of %d is too large for one launch", rows, heads, width);
    if (x_stride < heads * width || x_stride % 8 || y_stride < heads * width || y_stride % 8)
        return dsk_err("vec_glue: row strides %d (x) and %d (y) must be multiples of 8 and at least heads·width = %d",
                       x_stride, y_stride, heads * width);
    if (x == y && x_stride != y_stride)
        return dsk_err("vec_glue: in place (x == y) with different row strides %d and %d", x_stride, y_stride);
    if (check_ptr(x, "x") || check_ptr(y, "y") || (op->norm_w && check_ptr(op->norm_w, "the norm weight")) ||
        (op->rope_dim && (check_ptr(op->freqs, "freqs") || check_ptr(op->pos, "pos"))))
        return -1;
    if (rows == 0)
        return 0;
    rule_variant v;
    rule_vec_glue_pick(width, op->qdq, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int flags = (op->norm_w ? VG_NORM : 0) | (op->rope_dim ? VG_ROPE : 0) | (op->inverse ? VG_INVERSE : 0);
    CUdeviceptr w = op->norm_w, freqs = op->freqs, pos = op->pos;
    int rope_dim = op->rope_dim;
    float eps = op->eps;
    void *args[] = {&x, &y, &w, &freqs, &pos, &rows, &heads, &width, &x_stride, &y_stride, &rope_dim, &flags, &eps};
    int64_t blocks = ((int64_t)rows * heads + VG_WARPS - 1) / VG_WARPS;
    if (kit_launch(kk, (unsigned)blocks, 1, 1, s, args, 13))
        return dsk_err_ctx("vec_glue %s", v.params);
    return 0;
}
