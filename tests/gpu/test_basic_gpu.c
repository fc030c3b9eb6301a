/* GPU checks of the first families: stream_read, rmsnorm, rope, rowmm_bf16, topk. Tolerances: bf16
 * outputs compare by relative L2 error (||gpu - cpu|| / ||cpu|| <= 1e-3); RoPE and top-k exactly; the
 * row matmul also bit for bit between a 16-row launch and each row launched alone. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/basic.h"
#include "manifest/rules/rules.h"
#include "runtime/ref/rmsnorm.h"
#include "runtime/ref/rope.h"
#include "runtime/ref/rowmm.h"
#include "runtime/ref/topk.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static dsk_rng fresh_rng(void)
{
    dsk_rng r;
    dsk_rng_seed(&r, (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32));
    return r;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "gpu_tests: out of memory\n");
        exit(2);
    }
    return p;
}

/* Random bf16 values with a per-row scale spanning several orders of magnitude. */
static void fill_bf16(dsk_rng *r, uint16_t *x, int rows, int cols, float scale)
{
    for (int i = 0; i < rows; i++) {
        float s = scale * powf(10.0f, 2.0f * dsk_rng_f32(r) - 1.0f);
        for (int j = 0; j < cols; j++)
            x[(size_t)i * cols + j] = f32_to_bf16(s * dsk_rng_normal(r));
    }
}

void test_stream_read(gpu_ctx *c)
{
    dsk_rng r = fresh_rng();
    size_t bytes = 64u << 20;
    uint32_t *h = xmalloc(bytes);
    for (size_t i = 0; i < bytes / 4; i++)
        h[i] = (uint32_t)dsk_rng_u64(&r);
    CUdeviceptr d = dev_upload(h, bytes), out = dev_alloc(4096 * 4);
    int blocks = 4 * c->g->sms;
    must(op_stream_read(c->k, c->s, d, bytes, out, blocks), "stream_read");
    uint32_t *o = xmalloc((size_t)blocks * 4);
    dev_download(o, out, (size_t)blocks * 4);
    uint32_t want = 0, got = 0;
    for (size_t i = 0; i < bytes / 4; i++)
        want ^= h[i];
    for (int b = 0; b < blocks; b++)
        got ^= o[b];
    check(c, got == want, "stream_read", "64 MiB", "xor fold %08x, cpu %08x", got, want);
    dev_free(d);
    dev_free(out);
    free(h);
    free(o);
}

void test_rmsnorm(gpu_ctx *c)
{
    dsk_rng r = fresh_rng();
    const int widths[] = {128, 136, 512, 1280, 4096, 5120};
    const int nrows[] = {1, 7, 64};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++) {
            int W = widths[wi], R = nrows[ri];
            size_t n = (size_t)W * R;
            uint16_t *x = xmalloc(n * 2), *w = xmalloc((size_t)W * 2), *y = xmalloc(n * 2), *ref = xmalloc(n * 2);
            fill_bf16(&r, x, R, W, 1.0f);
            for (int i = 0; i < W; i++)
                w[i] = f32_to_bf16(1.0f + 0.3f * dsk_rng_normal(&r));
            float eps = wi % 2 ? 1e-20f : 1e-6f;
            CUdeviceptr dx = dev_upload(x, n * 2), dw = dev_upload(w, (size_t)W * 2), dy = dev_alloc(n * 2);
            must(op_rmsnorm(c->k, c->s, dx, dw, dy, R, W, eps), "rmsnorm");
            dev_sync(c);
            dev_download(y, dy, n * 2);
            ref_rmsnorm_bf16(x, w, ref, R, W, eps);
            float *a = xmalloc(n * 4), *b = xmalloc(n * 4);
            size_t same = 0;
            for (size_t i = 0; i < n; i++) {
                a[i] = bf16_to_f32(y[i]);
                b[i] = bf16_to_f32(ref[i]);
                same += y[i] == ref[i];
            }
            double e = rel_l2(a, b, n);
            char shape[64];
            snprintf(shape, sizeof shape, "rows %d x %d, eps %g", R, W, eps);
            check(c, e <= 1e-3, "rmsnorm", shape, "rel L2 %.2e, %.2f%% bit-equal", e, 100.0 * same / n);
            dev_free(dx);
            dev_free(dw);
            dev_free(dy);
            free(x);
            free(w);
            free(y);
            free(ref);
            free(a);
            free(b);
        }
}

void test_rope(gpu_ctx *c)
{
    dsk_rng r = fresh_rng();
    struct {
        int rows, heads, head_dim, R;
        double base;
        int yarn;
    } cases[] = {{1, 64, 512, 64, 160000.0, 1}, {37, 64, 512, 64, 10000.0, 0}, {5, 1, 128, 64, 160000.0, 1},
                 {19, 8, 128, 32, 160000.0, 1}, {3, 32, 128, 64, 10000.0, 0}};
    const int max_pos = 1 << 20;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int inverse = 0; inverse < 2; inverse++) {
            int rows = cases[ci].rows, heads = cases[ci].heads, hd = cases[ci].head_dim, R = cases[ci].R;
            rope_params p = {R, cases[ci].base, cases[ci].yarn ? 16.0 : 0, 32, 1, cases[ci].yarn ? 65536 : 0};
            int32_t *pos = xmalloc((size_t)rows * 4);
            for (int i = 0; i < rows; i++)
                pos[i] = (int32_t)dsk_rng_below(&r, (uint64_t)max_pos);
            pos[0] = max_pos - 1; /* the far end of a 1M context */
            /* a table holding just the rows used, re-indexed 0..rows-1 */
            float *table = xmalloc((size_t)rows * R * 4);
            int32_t *slot = xmalloc((size_t)rows * 4);
            for (int i = 0; i < rows; i++) {
                ref_rope_table(&p, pos[i], 1, table + (size_t)i * R);
                slot[i] = i;
            }
            size_t n = (size_t)rows * heads * hd;
            uint16_t *x = xmalloc(n * 2), *y = xmalloc(n * 2);
            fill_bf16(&r, x, rows * heads, hd, 1.0f);
            CUdeviceptr dx = dev_upload(x, n * 2), dp = dev_upload(slot, (size_t)rows * 4),
                        dt = dev_upload(table, (size_t)rows * R * 4);
            must(op_rope(c->k, c->s, dx, dp, dt, rows, heads, hd, R, inverse), "rope");
            dev_sync(c);
            dev_download(y, dx, n * 2);
            ref_rope_apply_bf16(x, rows, heads, hd, R, slot, table, inverse);
            size_t diff = 0;
            for (size_t i = 0; i < n; i++)
                diff += x[i] != y[i];
            char shape[80];
            snprintf(shape, sizeof shape, "%d x %d x %d, R %d%s%s", rows, heads, hd, R, cases[ci].yarn ? " yarn" : "",
                     inverse ? " inv" : "");
            check(c, diff == 0, "rope", shape, "%zu of %zu values differ from the CPU", diff, n);
            dev_free(dx);
            dev_free(dp);
            dev_free(dt);
            free(pos);
            free(table);
            free(slot);
            free(x);
            free(y);
        }
}

void test_rowmm(gpu_ctx *c)
{
    dsk_rng r = fresh_rng();
    struct {
        int K, N;
    } shapes[] = {{5120, 384}, {5120, 32}, {128, 8}, {1280, 136}, {4096, 1000}};
    const int nrows[] = {1, 2, 3, 4, 8, 13, 16, 40};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int K = shapes[si].K, N = shapes[si].N, maxr = 40;
        uint16_t *x = xmalloc((size_t)maxr * K * 2), *w = xmalloc((size_t)N * K * 2);
        fill_bf16(&r, x, maxr, K, 1.0f);
        fill_bf16(&r, w, N, K, 0.05f);
        CUdeviceptr dx = dev_upload(x, (size_t)maxr * K * 2), dw = dev_upload(w, (size_t)N * K * 2),
                    dy = dev_alloc((size_t)maxr * N * 4), d1 = dev_alloc((size_t)N * 4);
        float *y = xmalloc((size_t)maxr * N * 4), *ref = xmalloc((size_t)maxr * N * 4), *alone = xmalloc((size_t)N * 4);
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++) {
            int R = nrows[ri];
            must(op_rowmm_bf16(c->k, c->s, dx, dw, dy, R, K, N), "rowmm_bf16");
            dev_sync(c);
            dev_download(y, dy, (size_t)R * N * 4);
            ref_rowmm_bf16(x, w, ref, R, K, N);
            double e = rel_l2(y, ref, (size_t)R * N);
            int invariant = 1;
            for (int row = 0; row < R && invariant; row++) {
                must(op_rowmm_bf16(c->k, c->s, dx + (CUdeviceptr)row * K * 2, dw, d1, 1, K, N), "rowmm_bf16 alone");
                dev_sync(c);
                dev_download(alone, d1, (size_t)N * 4);
                invariant = !memcmp(alone, y + (size_t)row * N, (size_t)N * 4);
            }
            char shape[64];
            snprintf(shape, sizeof shape, "rows %d, %d -> %d", R, K, N);
            check(c, e <= 1e-3 && invariant, "rowmm_bf16", shape, "rel L2 %.2e, each row == alone: %s", e,
                  invariant ? "yes" : "NO");
        }
        dev_free(dx);
        dev_free(dw);
        dev_free(dy);
        dev_free(d1);
        free(x);
        free(w);
        free(y);
        free(ref);
        free(alone);
    }
}

void test_topk(gpu_ctx *c)
{
    dsk_rng r = fresh_rng();
    struct {
        int rows, N, k, bias, levels;
    } cases[] = {{1, 384, 6, 1, 0},       {16, 384, 6, 1, 0},   {16, 384, 6, 1, 5},    {7, 384, 16, 0, 3},
                 {3, 1000, 16, 1, 0},     {2, 16384, 512, 0, 0}, {2, 16384, 512, 0, 7}, {1, 1048576, 512, 0, 0},
                 {2, 1048576, 512, 0, 50}, {1, 131072, 2048, 0, 0}, {1, 700, 700, 0, 2}, {4, 513, 512, 0, 0},
                 {5, 8, 3, 1, 0},          {9, 128, 3, 1, 2},     {2, 1024, 16, 1, 0},   {3, 384, 17, 0, 2},
                 {11, 128, 16, 0, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int rows = cases[ci].rows, N = cases[ci].N, k = cases[ci].k;
        size_t n = (size_t)rows * N;
        float *s = xmalloc(n * 4), *b = xmalloc((size_t)N * 4);
        for (size_t i = 0; i < n; i++) {
            float v = dsk_rng_normal(&r);
            /* few levels: many exact ties straddle the cut; sprinkle -0, +0, -inf and NaN */
            s[i] = cases[ci].levels ? (float)(int)(v * (float)cases[ci].levels) : v;
            uint64_t u = dsk_rng_below(&r, 1000);
            if (u == 0)
                s[i] = NAN;
            else if (u == 1)
                s[i] = -INFINITY;
            else if (u == 2)
                s[i] = -0.0f;
        }
        for (int i = 0; i < N; i++)
            b[i] = cases[ci].bias ? 0.1f * dsk_rng_normal(&r) : 0.0f;
        CUdeviceptr ds = dev_upload(s, n * 4), db = cases[ci].bias ? dev_upload(b, (size_t)N * 4) : 0,
                    di = dev_alloc((size_t)rows * k * 4), dv = dev_alloc((size_t)rows * k * 4);
        int32_t *idx = xmalloc((size_t)rows * k * 4), *ridx = xmalloc((size_t)rows * k * 4);
        float *val = xmalloc((size_t)rows * k * 4), *rval = xmalloc((size_t)rows * k * 4);
        for (int row = 0; row < rows; row++)
            ref_topk(s + (size_t)row * N, cases[ci].bias ? b : NULL, N, k, ridx + (size_t)row * k,
                     rval + (size_t)row * k);
        /* the rule's choice, then one block per row and several (slices shorter than k, ties across
         * slices), each against the CPU */
        int blocks[] = {0, 1, 5, 64};
        for (int bi = 0; bi < 4; bi++) {
            if (blocks[bi] > N)
                continue;
            int nb = blocks[bi] ? blocks[bi] : rule_topk_blocks(N);
            size_t wsb = op_topk_ws_bytes_blocks(rows, nb);
            CUdeviceptr ws = wsb ? dev_alloc(wsb) : 0;
            dev_memset(di, 0xff, (size_t)rows * k * 4);
            dev_memset(dv, 0xff, (size_t)rows * k * 4);
            must(op_topk_blocks(c->k, c->s, ds, db, rows, N, k, N, di, dv, ws, wsb, nb), "topk");
            dev_sync(c);
            dev_download(idx, di, (size_t)rows * k * 4);
            dev_download(val, dv, (size_t)rows * k * 4);
            int bad_rows = 0;
            for (int row = 0; row < rows; row++)
                if (memcmp(ridx + (size_t)row * k, idx + (size_t)row * k, (size_t)k * 4) ||
                    memcmp(rval + (size_t)row * k, val + (size_t)row * k, (size_t)k * 4))
                    bad_rows++;
            char shape[96];
            snprintf(shape, sizeof shape, "rows %d, top %d of %d%s%s, %d block%s%s", rows, k, N,
                     cases[ci].bias ? " +bias" : "", cases[ci].levels ? " ties" : "", nb, nb > 1 ? "s" : "",
                     blocks[bi] ? "" : " (rule)");
            check(c, bad_rows == 0, "topk", shape, "%d of %d rows differ from the CPU", bad_rows, rows);
            if (ws)
                dev_free(ws);
        }
        dev_free(ds);
        if (db)
            dev_free(db);
        dev_free(di);
        dev_free(dv);
        free(s);
        free(b);
        free(idx);
        free(ridx);
        free(val);
        free(rval);
    }
}
