#include "runtime/launch/mhc.h"
#include "kit/src/mhc_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <stdint.h>

static int overlaps(CUdeviceptr a, size_t na, CUdeviceptr b, size_t nb)
{
    return a < b + nb && b < a + na;
}

/* Every device pointer the kernels read or write: present and 16-byte aligned. */
static int check_ptr(const char *family, const char *name, CUdeviceptr p)
{
    if (!p)
        return dsk_err("%s: %s is missing (a null device pointer)", family, name);
    if (p % 16)
        return dsk_err("%s: %s (0x%llx) is not 16-byte aligned", family, name, (unsigned long long)p);
    return 0;
}

static int check_width(const char *family, int hc, int d, int rows)
{
    if (hc < 1 || hc > 16)
        return dsk_err("%s: hc %d streams, expected 1..16", family, hc);
    if (d < 8 || d % 8)
        return dsk_err("%s: width d %d must be a positive multiple of 8", family, d);
    if (rows < 0)
        return dsk_err("%s: %d rows", family, rows);
    if ((int64_t)rows * (d / 8) > (int64_t)INT32_MAX * 256)
        return dsk_err("%s: %d rows of %d are more than one launch covers", family, rows, d);
    return 0;
}

size_t op_mhc_mix_ws_bytes(int rows, int hc, int d)
{
    int slab = rows < MHC_MIX_SLAB ? rows : MHC_MIX_SLAB;
    return slab > 0 ? MHC_MIX_WS_BYTES(slab, hc * d) : 0;
}

static int check_pre(const mhc_pre_call *p, int rows, int hc, int d);

/* The mix, with pre (not NULL, already checked) in its launch as extra CTAs. */
static int mix(const kit *k, CUstream s, const mhc_dims *m, CUdeviceptr x, CUdeviceptr fn, CUdeviceptr base,
               CUdeviceptr scale, CUdeviceptr coef, int rows, CUdeviceptr ws, size_t ws_bytes, CUdeviceptr counters,
               const mhc_pre_call *pre)
{
    if (!m)
        return dsk_err("mhc_mix: no dimensions given");
    if (check_width("mhc_mix", m->hc, m->d, rows))
        return -1;
    if (m->hc > MHC_MIX_MAX_HC)
        return dsk_err("mhc_mix: hc %d streams give %d sums per row; the kernel holds at most %d streams", m->hc,
                       (2 + m->hc) * m->hc + 1, MHC_MIX_MAX_HC);
    if (m->sinkhorn_iters < 1)
        return dsk_err("mhc_mix: %d Sinkhorn iterations, at least 1 expected", m->sinkhorn_iters);
    if (!(m->norm_eps >= 0.0f) || !(m->hc_eps >= 0.0f))
        return dsk_err("mhc_mix: epsilons must be >= 0 (norm_eps %g, hc_eps %g)", m->norm_eps, m->hc_eps);
    if (check_ptr("mhc_mix", "x", x) || check_ptr("mhc_mix", "hc_fn", fn) || check_ptr("mhc_mix", "hc_base", base) ||
        check_ptr("mhc_mix", "hc_scale", scale) || check_ptr("mhc_mix", "coef", coef) ||
        (rows > 0 && (check_ptr("mhc_mix", "workspace", ws) || check_ptr("mhc_mix", "the arrival counter array", counters))))
        return -1;
    size_t need = op_mhc_mix_ws_bytes(rows, m->hc, m->d);
    if (ws_bytes < need)
        return dsk_err("mhc_mix: %d rows of %d x %d need a workspace of %zu bytes (op_mhc_mix_ws_bytes), got %zu", rows,
                       m->hc, m->d, need, ws_bytes);
    int M = (2 + m->hc) * m->hc, K = m->hc * m->d;
    if (overlaps(coef, (size_t)rows * M * 4, ws, need) || overlaps(coef, (size_t)rows * M * 4, x, (size_t)rows * K * 2))
        return dsk_err("mhc_mix: coef overlaps the workspace or x");
    if (rows > 0 && (overlaps(counters, MHC_MIX_COUNTERS * 4, ws, need) ||
                     overlaps(counters, MHC_MIX_COUNTERS * 4, coef, (size_t)rows * M * 4)))
        return dsk_err("mhc_mix: the arrival counters overlap the workspace or coef");
    if (rows == 0)
        return 0;
    rule_variant v;
    rule_mhc_mix_pick(m->hc, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int d = m->d, iters = m->sinkhorn_iters;
    float norm_eps = m->norm_eps, hc_eps = m->hc_eps;
    unsigned nchunk = (unsigned)MHC_MIX_NCHUNK(K);
    for (int r0 = 0; r0 < rows; r0 += MHC_MIX_SLAB) {
        int n = rows - r0 < MHC_MIX_SLAB ? rows - r0 : MHC_MIX_SLAB;
        int rpc = rule_mhc_mix_rows_per_cta(n);
        CUdeviceptr xs = x + (CUdeviceptr)r0 * (CUdeviceptr)K * 2, cs = coef + (CUdeviceptr)r0 * (CUdeviceptr)M * 4;
        /* the fused hc_pre's slab of rows (px 0: none) */
        mhc_pre_call p = {0};
        if (pre) {
            p = *pre;
            p.x += (CUdeviceptr)r0 * (CUdeviceptr)K * 2;
            p.w += (CUdeviceptr)r0 * (CUdeviceptr)p.w_stride * 4;
            p.out += (CUdeviceptr)r0 * (CUdeviceptr)d * 2;
            p.y_raw = p.y_raw ? p.y_raw + (CUdeviceptr)r0 * (CUdeviceptr)d * 2 : 0;
        }
        void *args[] = {&xs,      &fn,  &base, &scale, &ws,  &cs,      &counters, &n,       &d,   &rpc,
                        &norm_eps, &hc_eps, &iters, &p.x, &p.w, &p.w_stride, &p.norm_w, &p.eps, &p.out, &p.y_raw};
        if (kit_launch(kk, nchunk + (pre ? (unsigned)rpc : 0), (unsigned)((n + rpc - 1) / rpc), 1, s, args, 20))
            return dsk_err_ctx("mhc_mix %s: rows %d..%d", v.params, r0, r0 + n - 1);
    }
    return 0;
}

int op_mhc_mix(const kit *k, CUstream s, const mhc_dims *m, CUdeviceptr x, CUdeviceptr fn, CUdeviceptr base,
               CUdeviceptr scale, CUdeviceptr coef, int rows, CUdeviceptr ws, size_t ws_bytes, CUdeviceptr counters)
{
    return mix(k, s, m, x, fn, base, scale, coef, rows, ws, ws_bytes, counters, NULL);
}

int op_mhc_mix_pre(const kit *k, CUstream s, const mhc_dims *m, CUdeviceptr x, CUdeviceptr fn, CUdeviceptr base,
                   CUdeviceptr scale, CUdeviceptr coef, int rows, CUdeviceptr ws, size_t ws_bytes, CUdeviceptr counters,
                   const mhc_pre_call *pre)
{
    if (!m || !pre)
        return dsk_err("mhc_mix: no dimensions or no hc_pre given");
    if (check_pre(pre, rows, m->hc, m->d))
        return -1;
    int M = (2 + m->hc) * m->hc;
    if (overlaps(pre->w, (size_t)rows * (size_t)pre->w_stride * 4, coef, (size_t)rows * M * 4) ||
        overlaps(pre->out, (size_t)rows * m->d * 2, coef, (size_t)rows * M * 4) ||
        overlaps(pre->out, (size_t)rows * m->d * 2, x, (size_t)rows * m->hc * m->d * 2))
        return dsk_err("mhc_mix: the hc_pre of its launch reads the coefficients it writes, or writes what it reads");
    /* one launch when the pre's rows take the mix's 256 threads (its rmsnorm rule's for d), else two */
    if (rule_mhc_pre_threads(m->d) != MHC_MIX_THREADS)
        return op_mhc_mix(k, s, m, x, fn, base, scale, coef, rows, ws, ws_bytes, counters) ||
                       op_mhc_pre(k, s, pre->x, pre->w, pre->w_stride, pre->norm_w, pre->eps, pre->out, pre->y_raw,
                                  rows, m->hc, m->d)
                   ? -1
                   : 0;
    return mix(k, s, m, x, fn, base, scale, coef, rows, ws, ws_bytes, counters, pre);
}

/* op_mhc_pre's checks. */
static int check_pre(const mhc_pre_call *p, int rows, int hc, int d)
{
    if (check_width("mhc_pre", hc, d, rows))
        return -1;
    if (p->w_stride < hc)
        return dsk_err("mhc_pre: weight row stride %d is shorter than the %d streams", p->w_stride, hc);
    if (check_ptr("mhc_pre", "x", p->x) || check_ptr("mhc_pre", "w", p->w) || check_ptr("mhc_pre", "out", p->out))
        return -1;
    if (p->norm_w) {
        if (check_ptr("mhc_pre", "the norm weight", p->norm_w) || (p->y_raw && check_ptr("mhc_pre", "y_raw", p->y_raw)))
            return -1;
        if (d > MHC_PRE_MAX_D)
            return dsk_err("mhc_pre: the fused RMSNorm holds rows of at most %d, got %d", MHC_PRE_MAX_D, d);
        if (!(p->eps >= 0.0f))
            return dsk_err("mhc_pre: RMSNorm epsilon %g must be >= 0", p->eps);
    } else if (p->y_raw)
        return dsk_err("mhc_pre: y_raw is written only with a norm weight (without one, out is y)");
    size_t xb = (size_t)rows * hc * d * 2, yb = (size_t)rows * d * 2;
    if (overlaps(p->out, yb, p->x, xb) ||
        (p->y_raw && (overlaps(p->y_raw, yb, p->x, xb) || overlaps(p->y_raw, yb, p->out, yb))))
        return dsk_err("mhc_pre: the outputs overlap x or each other");
    return 0;
}

int op_mhc_pre(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, int w_stride, CUdeviceptr norm_w, float eps,
               CUdeviceptr out, CUdeviceptr y_raw, int rows, int hc, int d)
{
    mhc_pre_call p = {x, w, w_stride, norm_w, eps, out, y_raw};
    if (check_pre(&p, rows, hc, d))
        return -1;
    if (rows == 0)
        return 0;
    rule_variant v;
    rule_mhc_pre_pick(hc, d, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    void *args[] = {&x, &w, &w_stride, &norm_w, &eps, &out, &y_raw, &rows, &d};
    if (kit_launch(kk, (unsigned)rows, 1, 1, s, args, 9))
        return dsk_err_ctx("mhc_pre %s: %d rows of %d", v.params, rows, d);
    return 0;
}

int op_mhc_post_copy(const kit *k, CUstream s, CUdeviceptr y, int y_f32, CUdeviceptr x, CUdeviceptr coef,
                     CUdeviceptr xout, int rows, int hc, int d, const rows_copy_job *copy)
{
    if (check_width("mhc_post", hc, d, rows))
        return -1;
    if (check_ptr("mhc_post", "y", y) || check_ptr("mhc_post", "x", x) || check_ptr("mhc_post", "coef", coef) ||
        check_ptr("mhc_post", "xout", xout))
        return -1;
    size_t xb = (size_t)rows * hc * d * 2;
    if (overlaps(xout, xb, x, xb) || overlaps(xout, xb, y, (size_t)rows * d * (y_f32 ? 4 : 2)) ||
        overlaps(xout, xb, coef, (size_t)rows * (2 + hc) * hc * 4))
        return dsk_err("mhc_post: xout overlaps x, y or coef (it is never computed in place)");
    rows_copy_job none = {0};
    int cn = copy ? copy->n : 0;
    if (cn != 0) { /* rows_copy's checks refuse a negative count, as op_rows_copy does */
        if (rows_copy_job_check(copy, 0))
            return dsk_err_ctx("mhc_post: its rows copy");
        if (!copy->src_idx && overlaps(copy->src, (size_t)(cn - 1) * copy->src_stride + copy->row_bytes, xout, xb))
            return dsk_err("mhc_post: the rows copy reads xout, which the post writes in the same launch");
    } else
        copy = &none;
    if (rows == 0 && cn == 0)
        return 0;
    rule_variant v;
    rule_mhc_post_pick(hc, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int64_t post_blocks = ((int64_t)rows * (d / 8) + 255) / 256;
    int64_t copy_blocks = ((int64_t)cn * (copy->row_bytes / 16) + 255) / 256;
    if (post_blocks + copy_blocks > INT32_MAX)
        return dsk_err("mhc_post: %d rows and a copy of %d rows are too large for one launch", rows, cn);
    rows_copy_job j = *copy;
    void *args[] = {&y,     &x,         &coef,  &xout,         &rows,     &d,   &y_f32,      &j.src,
                    &j.src_stride, &j.src_idx, &j.dst, &j.dst_stride, &j.dst_idx, &j.n, &j.row_bytes};
    if (kit_launch(kk, (unsigned)(post_blocks + copy_blocks), 1, 1, s, args, 15))
        return dsk_err_ctx("mhc_post %s: %d rows of %d%s", v.params, rows, d, cn ? " and a rows copy" : "");
    return 0;
}

int op_mhc_post(const kit *k, CUstream s, CUdeviceptr y, CUdeviceptr x, CUdeviceptr coef, CUdeviceptr xout, int rows,
                int hc, int d)
{
    return op_mhc_post_copy(k, s, y, 0, x, coef, xout, rows, hc, d, NULL);
}

int op_mhc_post_f32(const kit *k, CUstream s, CUdeviceptr y, CUdeviceptr x, CUdeviceptr coef, CUdeviceptr xout,
                    int rows, int hc, int d)
{
    return op_mhc_post_copy(k, s, y, 1, x, coef, xout, rows, hc, d, NULL);
}
