/* GPU checks of tap_mean against runtime/ref/tap_mean.h: bit-equal taps at the target slot, the other
 * targets' slots untouched, each row of a launch equal to the row launched alone, no write outside the
 * buffer, bad arguments refused. */
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/launch/tap_mean.h"
#include "runtime/ref/tap_mean.h"
#include "tests/gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC 4

static void refused(gpu_ctx *c, const char *what, int rc)
{
    check(c, rc != 0, "tap_mean", what, "refused: %s", rc ? dsk_err_msg() : "NO");
}

static void refusals(gpu_ctx *c, CUdeviceptr x, CUdeviceptr taps)
{
    refused(c, "target past the targets", op_tap_mean(c->k, c->s, x, taps, 1, HC, 128, 3, 3));
    refused(c, "negative target", op_tap_mean(c->k, c->s, x, taps, 1, HC, 128, 3, -1));
    refused(c, "d not a multiple of 8", op_tap_mean(c->k, c->s, x, taps, 1, HC, 100, 3, 0));
    refused(c, "taps misaligned", op_tap_mean(c->k, c->s, x, taps + 8, 1, HC, 128, 3, 0));
    refused(c, "taps overlap x", op_tap_mean(c->k, c->s, x, x + 256, 1, HC, 128, 3, 0));
    refused(c, "no variant for hc 2", op_tap_mean(c->k, c->s, x, taps, 1, 2, 128, 3, 0));
}

void test_tap_mean(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(12);
    struct {
        int d, prompt;
    } shapes[] = {{5120, 2048}, {128, 4096}};
    const int NT = 3; /* the release's three DSpark targets */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int d = shapes[si].d, P = shapes[si].prompt;
        size_t xb = (size_t)P * HC * d * 2, tb = (size_t)P * NT * d * 2;
        uint16_t *x = xmalloc(xb), *t = xmalloc(tb), *tr = xmalloc(tb), *t1 = xmalloc((size_t)NT * d * 2);
        CUdeviceptr dt = dev_alloc_guarded(tb), d1 = dev_alloc_guarded((size_t)NT * d * 2), dx = 0;
        const int nrows[] = {1, 2, 7, 16, 64, P};
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++) {
            int R = nrows[ri], target = (int)dsk_rng_below(&r, NT);
            size_t rb = (size_t)R * NT * d * 2;
            fill_bf16(&r, x, R * HC, d, 1.0f);
            if (dx)
                dev_free(dx);
            dx = dev_upload(x, (size_t)R * HC * d * 2);
            dev_poison(dt, tb);
            must(op_tap_mean(c->k, c->s, dx, dt, R, HC, d, NT, target), "tap_mean");
            dev_sync(c);
            dev_download(t, dt, rb);
            memset(tr, GPU_GUARD_BYTE, rb); /* the other targets keep the poison */
            ref_tap_mean(x, R, HC, d, tr, NT, target);
            int same = !memcmp(t, tr, rb), guards = dev_guard_intact(dt, rb);
            int alone_ok = 1, tried = R <= 16 ? R : 8;
            for (int k = 0; k < tried && alone_ok; k++) {
                int row = R <= 16 ? k : k == 0 ? 0 : k == 1 ? R - 1 : (int)dsk_rng_below(&r, (uint64_t)R);
                dev_poison(d1, (size_t)NT * d * 2);
                must(op_tap_mean(c->k, c->s, dx + (CUdeviceptr)row * HC * d * 2, d1, 1, HC, d, NT, target),
                     "tap_mean alone");
                dev_sync(c);
                dev_download(t1, d1, (size_t)NT * d * 2);
                alone_ok = !memcmp(t1 + (size_t)target * d, t + ((size_t)row * NT + target) * d, (size_t)d * 2);
            }
            char shape[64];
            snprintf(shape, sizeof shape, "rows %d x %d, target %d of %d", R, d, target, NT);
            check(c, same && guards && alone_ok, "tap_mean", shape,
                  "bit-equal (other targets untouched): %s, guards: %s, each row == alone: %s", same ? "yes" : "NO",
                  guards ? "intact" : "WRITTEN", alone_ok ? "yes" : "NO");
        }
        if (si == 1)
            refusals(c, dx, dt);
        dev_free(dx);
        dev_free_guarded(dt);
        dev_free_guarded(d1);
        free(x);
        free(t);
        free(tr);
        free(t1);
    }
}
