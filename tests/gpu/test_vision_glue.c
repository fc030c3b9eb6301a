/* GPU checks of vision_glue against runtime/ref/vision_glue.h: the vision RMSNorm (relative L2 <= 1e-3: the
 * sum of squares in another order), the 2-D RoPE and the space-to-depth (bit for bit: the same operations in
 * the same order), at the tiny tower's shapes and the release tower's. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/vision_glue.h"
#include "runtime/ref/vision_glue.h"
#include "tests/gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void widen(const uint16_t *h, float *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        f[i] = bf16_to_f32(h[i]);
}

static void check_norm(gpu_ctx *c, dsk_rng *r, int rows, int W)
{
    size_t n = (size_t)rows * W;
    uint16_t *x = xmalloc(n * 2), *y = xmalloc(n * 2);
    float *w = xmalloc((size_t)W * 4), *xf = xmalloc(n * 4), *ref = xmalloc(n * 4), *got = xmalloc(n * 4);
    fill_bf16(r, x, rows, W, 1.0f);
    for (int i = 0; i < W; i++)
        w[i] = 1.0f + 0.3f * dsk_rng_normal(r);
    CUdeviceptr dx = dev_upload(x, n * 2), dw = dev_upload(w, (size_t)W * 4), dy = dev_alloc_guarded(n * 2);
    dev_poison(dy, n * 2);
    must(op_vision_rmsnorm(c->k, c->s, dx, dw, dy, rows, W), "vision_rmsnorm");
    dev_sync(c);
    dev_download(y, dy, n * 2);
    widen(x, xf, n);
    ref_vision_rmsnorm(1, xf, rows, W, w, ref);
    widen(y, got, n);
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        same += f32_to_bf16(ref[i]) == y[i];
    double e = rel_l2(got, ref, n);
    int guards = dev_guard_intact(dy, n * 2);
    char shape[64];
    snprintf(shape, sizeof shape, "rmsnorm rows %d x %d", rows, W);
    check(c, e <= 1e-3 && guards, "vision_glue", shape, "rel L2 %.2e, %.2f%% bit-equal%s", e, 100.0 * same / n,
          guards ? "" : ", WROTE OUTSIDE");
    dev_free(dx);
    dev_free(dw);
    dev_free_guarded(dy);
    free(x);
    free(y);
    free(w);
    free(xf);
    free(ref);
    free(got);
}

static void check_rope(gpu_ctx *c, dsk_rng *r, int nh, int nw, int heads, int hd)
{
    int N = nh * nw, D = heads * hd, ld = 3 * D, R = hd / 2;
    size_t n = (size_t)N * ld;
    uint16_t *x = xmalloc(n * 2), *y = xmalloc(n * 2);
    float *f = xmalloc(n * 4), *cs, *sn;
    fill_bf16(r, x, N, ld, 1.0f);
    must(ref_vision_rope_table(hd, 10000.0f, nh, nw, &cs, &sn), "ref_vision_rope_table");
    CUdeviceptr dq = dev_upload(x, n * 2), dc = dev_upload(cs, (size_t)N * R * 4), ds = dev_upload(sn, (size_t)N * R * 4);
    must(op_vision_rope(c->k, c->s, dq, ld, dc, ds, N, heads, hd), "vision_rope");
    dev_sync(c);
    dev_download(y, dq, n * 2);
    widen(x, f, n);
    ref_vision_rope(1, f, ld, N, heads, hd, cs, sn);
    ref_vision_rope(1, f + D, ld, N, heads, hd, cs, sn);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += f32_to_bf16(f[i]) != y[i];
    char shape[64];
    snprintf(shape, sizeof shape, "rope2d %d x %d patches, %d x %d", nh, nw, heads, hd);
    check(c, diff == 0, "vision_glue", shape, "%zu of %zu values differ (v untouched, q and k rotated)", diff, n);
    dev_free(dq);
    dev_free(dc);
    dev_free(ds);
    free(x);
    free(y);
    free(f);
    free(cs);
    free(sn);
}

static void check_s2d(gpu_ctx *c, dsk_rng *r, int nh, int nw, int D, int ratio)
{
    int lh = (nh + ratio - 1) / ratio, lw = (nw + ratio - 1) / ratio;
    size_t n = (size_t)nh * nw * D, m = (size_t)lh * lw * ratio * ratio * D;
    uint16_t *g = xmalloc(n * 2), *y = xmalloc(m * 2);
    float *gf = xmalloc(n * 4), *ref = xmalloc(m * 4);
    fill_bf16(r, g, nh * nw, D, 1.0f);
    CUdeviceptr dg = dev_upload(g, n * 2), dy = dev_alloc_guarded(m * 2);
    dev_poison(dy, m * 2);
    must(op_vision_s2d(c->k, c->s, dg, dy, nh, nw, D, ratio), "vision_s2d");
    dev_sync(c);
    dev_download(y, dy, m * 2);
    widen(g, gf, n);
    ref_vision_s2d(gf, nh, nw, D, ratio, ref);
    size_t diff = 0;
    for (size_t i = 0; i < m; i++)
        diff += f32_to_bf16(ref[i]) != y[i];
    int guards = dev_guard_intact(dy, m * 2);
    char shape[64];
    snprintf(shape, sizeof shape, "s2d %d x %d x %d, r %d", nh, nw, D, ratio);
    check(c, diff == 0 && guards, "vision_glue", shape, "%zu of %zu values differ%s", diff, m,
          guards ? "" : ", WROTE OUTSIDE");
    dev_free(dg);
    dev_free_guarded(dy);
    free(g);
    free(y);
    free(gf);
    free(ref);
}

void test_vision_glue(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0);
    check_norm(c, &r, 37, 64);
    check_norm(c, &r, 1, 1024);
    check_norm(c, &r, c->small ? 40 : 4070, 1024);
    check_rope(c, &r, 5, 7, 4, 16);
    check_rope(c, &r, 1, 1, 4, 16);
    if (c->small)
        check_rope(c, &r, 3, 4, 16, 64);
    else
        check_rope(c, &r, 55, 74, 16, 64);
    check_s2d(c, &r, 5, 7, 64, 3);
    check_s2d(c, &r, 1, 1, 64, 3);
    check_s2d(c, &r, 6, 9, 64, 3);
    check_s2d(c, &r, c->small ? 4 : 55, c->small ? 5 : 74, 1024, 3);
}
