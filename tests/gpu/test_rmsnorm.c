/* GPU checks of rmsnorm against runtime/ref/rmsnorm.h: relative L2 error <= 1e-3 (bf16 outputs). */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/rmsnorm.h"
#include "runtime/ref/rmsnorm.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_rmsnorm(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0);
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
