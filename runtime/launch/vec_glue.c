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

/* One call's checks: what op_vec_glue refuses. */
static int check_call(const vec_glue_call *c, int rows, int i)
{
    const vec_glue_op *op = c->op;
    int heads = c->heads, width = c->width;
    if (!op)
        return dsk_err("vec_glue: op %d has no operation", i);
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
    if (c->x_stride < heads * width || c->x_stride % 8 || c->y_stride < heads * width || c->y_stride % 8)
        return dsk_err("vec_glue: row strides %d (x) and %d (y) must be multiples of 8 and at least heads·width = %d",
                       c->x_stride, c->y_stride, heads * width);
    if (c->y_idx && (c->x == c->y || c->y_idx % 4))
        return dsk_err("vec_glue: a y row index (%#llx) needs y apart from x and 4-byte alignment",
                       (unsigned long long)c->y_idx);
    if (c->x == c->y && c->x_stride != c->y_stride)
        return dsk_err("vec_glue: in place (x == y) with different row strides %d and %d", c->x_stride, c->y_stride);
    if (check_ptr(c->x, "x") || check_ptr(c->y, "y") || (op->norm_w && check_ptr(op->norm_w, "the norm weight")) ||
        (op->rope_dim && (check_ptr(op->freqs, "freqs") || check_ptr(op->pos, "pos"))))
        return -1;
    return 0;
}

int op_vec_glue_multi(const kit *k, CUstream s, const vec_glue_call *calls, int n, int rows)
{
    if (n < 1 || n > VG_MAX_OPS)
        return dsk_err("vec_glue: %d ops in one launch (1..%d)", n, VG_MAX_OPS);
    int widest = 0, mixed = 0;
    int64_t blocks = 0;
    for (int i = 0; i < n; i++) {
        if (check_call(&calls[i], rows, i))
            return n > 1 ? dsk_err_ctx("vec_glue: op %d of %d", i, n) : -1;
        widest = calls[i].width > widest ? calls[i].width : widest;
        mixed |= calls[i].op->qdq != calls[0].op->qdq;
        int64_t bi = ((int64_t)rows * calls[i].heads + VG_WARPS - 1) / VG_WARPS;
        blocks = bi > blocks ? bi : blocks;
    }
    if (rows == 0)
        return 0;
    rule_variant v;
    rule_vec_glue_pick(widest, mixed ? RULE_VEC_GLUE_MIXED : (int)calls[0].op->qdq, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    /* the kernel's three op slots; unused ones copy op 0 (never run: grid y is n) */
    struct {
        CUdeviceptr x, y, yi, w, freqs, pos;
        int heads, width, x_stride, y_stride, rope_dim, flags;
        float eps;
    } a[VG_MAX_OPS];
    for (int i = 0; i < VG_MAX_OPS; i++) {
        const vec_glue_call *c = &calls[i < n ? i : 0];
        const vec_glue_op *op = c->op;
        a[i].x = c->x, a[i].y = c->y, a[i].yi = c->y_idx, a[i].w = op->norm_w, a[i].freqs = op->freqs, a[i].pos = op->pos;
        a[i].heads = c->heads, a[i].width = c->width, a[i].x_stride = c->x_stride, a[i].y_stride = c->y_stride;
        a[i].rope_dim = op->rope_dim, a[i].eps = op->eps;
        a[i].flags = (op->norm_w ? VG_NORM : 0) | (op->rope_dim ? VG_ROPE : 0) | (op->inverse ? VG_INVERSE : 0) |
                     (int)op->qdq << VG_Q_SHIFT;
    }
    enum { PER_OP = 13 };
    void *args[1 + PER_OP * VG_MAX_OPS];
    args[0] = &rows;
    for (int i = 0; i < VG_MAX_OPS; i++) {
        void **p = args + 1 + PER_OP * i;
        p[0] = &a[i].x, p[1] = &a[i].y, p[2] = &a[i].yi, p[3] = &a[i].w, p[4] = &a[i].freqs, p[5] = &a[i].pos;
        p[6] = &a[i].heads, p[7] = &a[i].width, p[8] = &a[i].x_stride, p[9] = &a[i].y_stride, p[10] = &a[i].rope_dim;
        p[11] = &a[i].flags, p[12] = &a[i].eps;
    }
    if (kit_launch(kk, (unsigned)blocks, (unsigned)n, 1, s, args, 1 + PER_OP * VG_MAX_OPS))
        return dsk_err_ctx("vec_glue %s", v.params);
    return 0;
}

int op_vec_glue(const kit *k, CUstream s, const vec_glue_op *op, CUdeviceptr x, int x_stride, CUdeviceptr y,
                int y_stride, int rows, int heads, int width)
{
    vec_glue_call c = {op, x, x_stride, y, y_stride, heads, width, 0};
    return op_vec_glue_multi(k, s, &c, 1, rows);
}
