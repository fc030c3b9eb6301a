/* GPU checks of the top-k families against runtime/ref/topk.h: exact (ties, NaN, -0, -inf), every case
 * with the rule's blocks per row, one block, 5 and 64, and in one launch (topk_tl) at 2, 5 and 16 blocks
 * where the slices hold k. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "manifest/rules/rules.h"
#include "runtime/launch/topk.h"
#include "runtime/ref/topk.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rows of a finished top-k (indices di, values dv, rows × k) whose indices or values differ from the
 * CPU's (ridx, rval); idx and val take the download. */
static int rows_differ(gpu_ctx *c, CUdeviceptr di, CUdeviceptr dv, int rows, int k, const int32_t *ridx,
                       const float *rval, int32_t *idx, float *val)
{
    dev_sync(c);
    dev_download(idx, di, (size_t)rows * k * 4);
    dev_download(val, dv, (size_t)rows * k * 4);
    int bad = 0;
    for (int row = 0; row < rows; row++)
        if (memcmp(ridx + (size_t)row * k, idx + (size_t)row * k, (size_t)k * 4) ||
            memcmp(rval + (size_t)row * k, val + (size_t)row * k, (size_t)k * 4))
            bad++;
    return bad;
}

void test_topk(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0);
    struct {
        int rows, N, k, bias, levels;
    } cases[] = {{1, 384, 6, 1, 0},       {16, 384, 6, 1, 0},   {16, 384, 6, 1, 5},    {7, 384, 16, 0, 3},
                 {3, 1000, 16, 1, 0},     {2, 16384, 512, 0, 0}, {2, 16384, 512, 0, 7}, {1, 1048576, 512, 0, 0},
                 {2, 1048576, 512, 0, 50}, {1, 131072, 2048, 0, 0}, {1, 700, 700, 0, 2}, {4, 513, 512, 0, 0},
                 {5, 8, 3, 1, 0},          {9, 128, 3, 1, 2},     {2, 1024, 16, 1, 0},   {3, 384, 17, 0, 2},
                 {11, 128, 16, 0, 1},     {1, 65536, 512, 0, 0}, {3, 65536, 512, 1, 9}, {2, 40000, 512, 0, 0},
                 {1, 32768, 512, 0, 50}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        /* small (the emulator): the 1M-entry rows shrink to 128K, still several blocks per row */
        int rows = cases[ci].rows, N = c->small && cases[ci].N > 131072 ? 131072 : cases[ci].N, k = cases[ci].k;
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
            int bad_rows = rows_differ(c, di, dv, rows, k, ridx, rval, idx, val);
            char shape[96];
            snprintf(shape, sizeof shape, "rows %d, top %d of %d%s%s, %d block%s%s", rows, k, N,
                     cases[ci].bias ? " +bias" : "", cases[ci].levels ? " ties" : "", nb, nb > 1 ? "s" : "",
                     blocks[bi] ? "" : " (rule)");
            check(c, bad_rows == 0, "topk", shape, "%d of %d rows differ from the CPU", bad_rows, rows);
            if (ws)
                dev_free(ws);
        }
        /* the one-launch form at blocks whose slices hold k (where rule_topk_tl_fits, it could replace
         * topk_mb's six launches) */
        int tl_blocks[] = {2, 5, 16};
        for (int bi = 0; bi < 3; bi++) {
            int nb = tl_blocks[bi];
            if (N / nb < k)
                continue;
            size_t wsb = op_topk_tl_ws_bytes(rows, nb, k);
            CUdeviceptr ws = dev_alloc(wsb);
            dev_memset(ws, 0xff, wsb); /* the counters are the launcher's to zero */
            dev_memset(di, 0xff, (size_t)rows * k * 4);
            dev_memset(dv, 0xff, (size_t)rows * k * 4);
            must(op_topk_tl(c->k, c->s, ds, db, rows, N, k, N, di, dv, ws, wsb, nb), "topk_tl");
            int bad_rows = rows_differ(c, di, dv, rows, k, ridx, rval, idx, val);
            char shape[96];
            snprintf(shape, sizeof shape, "rows %d, top %d of %d%s%s, %d blocks, one launch", rows, k, N,
                     cases[ci].bias ? " +bias" : "", cases[ci].levels ? " ties" : "", nb);
            check(c, bad_rows == 0, "topk", shape, "%d of %d rows differ from the CPU", bad_rows, rows);
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
