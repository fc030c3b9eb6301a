/* GPU checks of embed against runtime/ref/embed.h: streams and π bit-equal to the reference (ids outside
 * the vocabulary give zero streams on both), each row of a launch equal to the row launched alone, no
 * write outside the outputs, bad arguments refused. */
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/launch/embed.h"
#include "runtime/ref/embed.h"
#include "tests/gpu/gpu_check.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC 4

static void refused(gpu_ctx *c, const char *what, int rc)
{
    check(c, rc != 0, "embed", what, "refused: %s", rc ? dsk_err_msg() : "NO");
}

static void refusals(gpu_ctx *c, CUdeviceptr table, CUdeviceptr ids, CUdeviceptr x, CUdeviceptr pi)
{
    refused(c, "d not a multiple of 8", op_embed(c->k, c->s, table, 100, ids, x, pi, 1, HC, 132));
    refused(c, "vocab 0", op_embed(c->k, c->s, table, 0, ids, x, pi, 1, HC, 128));
    refused(c, "x misaligned", op_embed(c->k, c->s, table, 100, ids, x + 2, pi, 1, HC, 128));
    refused(c, "ids missing", op_embed(c->k, c->s, table, 100, 0, x, pi, 1, HC, 128));
    refused(c, "no variant for hc 3", op_embed(c->k, c->s, table, 100, ids, x, pi, 1, 3, 128));
    refused(c, "x overlaps pi", op_embed(c->k, c->s, table, 100, ids, x, x + 64, 1, HC, 128));
}

void test_embed(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(11);
    struct {
        int d, vocab, prompt;
    } shapes[] = {{5120, 1000, 2048}, {128, 129280, 4096}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int d = shapes[si].d, V = shapes[si].vocab, P = shapes[si].prompt;
        size_t tb = (size_t)V * d * 2, xb = (size_t)P * HC * d * 2, pb = (size_t)P * HC * 4;
        uint16_t *table = xmalloc(tb), *x = xmalloc(xb), *xr = xmalloc(xb), *x1 = xmalloc((size_t)HC * d * 2);
        float *pi = xmalloc(pb), *pir = xmalloc(pb), pi1[HC];
        int32_t *ids = xmalloc((size_t)P * 4);
        fill_bf16(&r, table, V, d, 1.0f);
        CUdeviceptr dt = dev_upload(table, tb), dx = dev_alloc_guarded(xb), dp = dev_alloc_guarded(pb),
                    d1 = dev_alloc_guarded((size_t)HC * d * 2), dp1 = dev_alloc_guarded(HC * 4);
        const int nrows[] = {1, 2, 7, 16, 64, P};
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++) {
            int R = nrows[ri];
            for (int i = 0; i < R; i++)
                ids[i] = (int32_t)dsk_rng_below(&r, (uint64_t)V);
            /* ids the host should have refused: read nothing, zero streams */
            const int32_t wild[] = {V, -1, INT_MAX, INT_MIN};
            if (R >= 7)
                for (int i = 0; i < 4; i++)
                    ids[dsk_rng_below(&r, (uint64_t)R)] = wild[i];
            CUdeviceptr di = dev_upload(ids, (size_t)R * 4);
            dev_poison(dx, xb);
            dev_poison(dp, pb);
            must(op_embed(c->k, c->s, dt, V, di, dx, dp, R, HC, d), "embed");
            dev_sync(c);
            dev_download(x, dx, (size_t)R * HC * d * 2);
            dev_download(pi, dp, (size_t)R * HC * 4);
            ref_embed(table, V, d, ids, R, HC, xr, pir);
            int same = !memcmp(x, xr, (size_t)R * HC * d * 2) && !memcmp(pi, pir, (size_t)R * HC * 4);
            int guards = dev_guard_intact(dx, (size_t)R * HC * d * 2) && dev_guard_intact(dp, (size_t)R * HC * 4);
            /* rows alone: all of a small launch, 8 of a prompt (first, last, random) */
            int alone_ok = 1, tried = R <= 16 ? R : 8;
            for (int t = 0; t < tried && alone_ok; t++) {
                int row = R <= 16 ? t : t == 0 ? 0 : t == 1 ? R - 1 : (int)dsk_rng_below(&r, (uint64_t)R);
                CUdeviceptr d1i = dev_upload(ids + row, 4); /* the plan's arrays start 16-byte aligned */
                must(op_embed(c->k, c->s, dt, V, d1i, d1, dp1, 1, HC, d), "embed alone");
                dev_sync(c);
                dev_free(d1i);
                dev_download(x1, d1, (size_t)HC * d * 2);
                dev_download(pi1, dp1, HC * 4);
                alone_ok = !memcmp(x1, x + (size_t)row * HC * d, (size_t)HC * d * 2) &&
                           !memcmp(pi1, pi + (size_t)row * HC, HC * 4);
            }
            char shape[64];
            snprintf(shape, sizeof shape, "rows %d x %d, vocab %d", R, d, V);
            check(c, same && guards && alone_ok, "embed", shape, "bit-equal: %s, guards: %s, each row == alone: %s",
                  same ? "yes" : "NO", guards ? "intact" : "WRITTEN", alone_ok ? "yes" : "NO");
            dev_free(di);
        }
        if (si == 0)
            refusals(c, dt, dp, dx, dp);
        dev_free(dt);
        dev_free_guarded(dx);
        dev_free_guarded(dp);
        dev_free_guarded(d1);
        dev_free_guarded(dp1);
        free(table);
        free(x);
        free(xr);
        free(x1);
        free(pi);
        free(pir);
        free(ids);
    }
}
