/* GPU checks of rowmm_bf16 against runtime/ref/rowmm.h: relative L2 error, and a 16-row launch equal to
 * each row launched alone, bit for bit. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/rowmm.h"
#include "runtime/ref/rowmm.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_rowmm(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0);
    struct {
        int K, N;
    } shapes[] = {{5120, 384}, {5120, 32}, {128, 8}, {1280, 136}, {4096, 1000}};
    const int nrows[] = {1, 2, 3, 4, 8, 13, 16, 40};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        /* small (the emulator): the model's K, at most 40 columns */
        int K = shapes[si].K, N = c->small && shapes[si].N > 40 ? 40 : shapes[si].N, maxr = 40;
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
            /* the scaled form: each output bf16(bf16(y)·scale), what op_cast_scale makes of y */
            const float scale = 0.0625f * 0.17677669f;
            must(op_rowmm_bf16_scaled(c->k, c->s, dx, dw, dy, R, K, N, scale), "rowmm_bf16 scaled");
            dev_sync(c);
            float *ys = xmalloc((size_t)R * N * 4);
            dev_download(ys, dy, (size_t)R * N * 4);
            size_t bad = 0;
            for (size_t i = 0; i < (size_t)R * N; i++) {
                float want = bf16_to_f32(f32_to_bf16(bf16_to_f32(f32_to_bf16(y[i])) * scale));
                bad += memcmp(&want, &ys[i], 4) != 0;
            }
            check(c, bad == 0, "rowmm_bf16", shape, "scaled by %g: %zu of %d outputs differ from bf16(bf16(y)*scale)",
                  (double)scale, bad, R * N);
            free(ys);
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
