/* GPU checks of engram_gate against runtime/ref/engram_gate.h: the updated streams within rel L2 1e-3
 * of the CPU (the three sums run in the kernel's fixed order, the CPU's sequentially), rows launched alone
 * equal to the batch bit for bit, at the release's d = 5120 and the tiny preset's 128, gates from
 * strongly positive through +0 (a zero key) to strongly negative. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/engram_gate.h"
#include "runtime/ref/engram_gate.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_case(gpu_ctx *c, dsk_rng *r, int rows, int hc, int d)
{
    size_t xn = (size_t)rows * hc * d, kn = (size_t)rows * (hc + 1) * d;
    uint16_t *X = xmalloc(xn * 2), *kv = xmalloc(kn * 2), *ref = xmalloc(xn * 2), *gpu = xmalloc(xn * 2);
    float *w = xmalloc((size_t)hc * d * 4);
    fill_bf16(r, X, rows * hc, d, 1.0f);
    fill_bf16(r, kv, rows * (hc + 1), d, 1.0f);
    for (int i = 0; i < hc * d; i++)
        w[i] = 1.0f + 0.5f * dsk_rng_normal(r);
    /* row 0: stream 1's key equals X (a large positive d_c), stream 2's is −X (a large negative one),
     * stream 3's is zero (d_c = +0: the gate is σ(+sqrt(1e-6)), not σ(0)) */
    if (hc >= 4)
        for (int j = 0; j < d; j++) {
            kv[(size_t)1 * d + j] = X[(size_t)1 * d + j];
            kv[(size_t)2 * d + j] = X[(size_t)2 * d + j] ^ 0x8000;
            kv[(size_t)3 * d + j] = 0;
            w[(size_t)1 * d + j] = w[(size_t)2 * d + j] = fabsf(w[(size_t)1 * d + j]);
        }
    memcpy(ref, X, xn * 2);
    ref_engram_gate(ref, kv, w, rows, hc, d, 1e-20f);
    CUdeviceptr dX = dev_upload(X, xn * 2), dkv = dev_upload(kv, kn * 2), dw = dev_upload(w, (size_t)hc * d * 4);
    must(op_engram_gate(c->k, c->s, dX, dkv, dw, rows, hc, d, 1e-20f), "engram_gate");
    dev_sync(c);
    dev_download(gpu, dX, xn * 2);
    float *fa = xmalloc(xn * 4), *fb = xmalloc(xn * 4);
    size_t same = 0;
    for (size_t i = 0; i < xn; i++) {
        fa[i] = bf16_to_f32(gpu[i]);
        fb[i] = bf16_to_f32(ref[i]);
        same += gpu[i] == ref[i];
    }
    double err = rel_l2(fa, fb, xn);
    char shape[64];
    snprintf(shape, sizeof shape, "rows %d x %d streams x %d", rows, hc, d);
    check(c, err <= 1e-3, "engram_gate", shape, "rel L2 %.2e, %.2f%% bit-equal", err, 100.0 * (double)same / (double)xn);
    /* rows alone: the same bits */
    int bad = 0, picks[3] = {0, rows / 2, rows - 1};
    uint16_t *one = xmalloc((size_t)hc * d * 2);
    for (int i = 0; i < (rows < 3 ? rows : 3); i++) {
        int row = picks[i];
        CUdeviceptr x1 = dev_upload(X + (size_t)row * hc * d, (size_t)hc * d * 2);
        CUdeviceptr k1 = dev_upload(kv + (size_t)row * (hc + 1) * d, (size_t)(hc + 1) * d * 2);
        must(op_engram_gate(c->k, c->s, x1, k1, dw, 1, hc, d, 1e-20f), "engram_gate");
        dev_sync(c);
        dev_download(one, x1, (size_t)hc * d * 2);
        bad += memcmp(one, gpu + (size_t)row * hc * d, (size_t)hc * d * 2) != 0;
        dev_free(x1);
        dev_free(k1);
    }
    check(c, bad == 0, "engram_gate", shape, "%d rows launched alone differ from the batch", bad);
    dev_free(dX);
    dev_free(dkv);
    dev_free(dw);
    free(X);
    free(kv);
    free(ref);
    free(gpu);
    free(w);
    free(fa);
    free(fb);
    free(one);
}

void test_engram_gate(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x6a7e);
    const int nrows[] = {1, 2, 7, 16, 64, 1024};
    for (int i = 0; i < 6; i++) {
        check_case(c, &r, nrows[i], 4, 5120);
        check_case(c, &r, nrows[i], 4, 128);
        check_case(c, &r, nrows[i], 4, 1024); /* the middle thread bucket */
    }
    CUdeviceptr buf = dev_alloc(1 << 16);
    int refused = 0;
    refused += op_engram_gate(c->k, c->s, buf, buf, buf, 1, 4, 100, 1e-20f) != 0;     /* d not a multiple of 8 */
    refused += op_engram_gate(c->k, c->s, buf + 4, buf, buf, 1, 4, 128, 1e-20f) != 0; /* misaligned X */
    refused += op_engram_gate(c->k, c->s, buf, buf, 0, 1, 4, 128, 1e-20f) != 0;       /* no weights */
    check(c, refused == 3, "engram_gate", "bad arguments", "%d of 3 refused", refused);
    dev_free(buf);
}
