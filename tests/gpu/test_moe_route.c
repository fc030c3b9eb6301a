/* GPU checks of moe_route against runtime/ref/moe_route.h, for the release (384 experts, top 6), the
 * drafter (128, top 3) and the tiny configs (8/3, 4/2). The sqrtsoftplus scores are CUDA's expf, log1pf
 * and sqrtf, which may differ from glibc's by an ulp: the scores are checked within 4 ulps, and given
 * the GPU's own scores the selection and the weights must equal the reference's bit for bit; against the
 * reference from the logits a row may pick another expert only at a near-tie of the biased scores
 * (counted and reported), and the weights of rows that agree are within 1e-6. Every row equals the row
 * launched alone. Bad arguments are refused. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/moe_route.h"
#include "runtime/ref/moe_route.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ulps(float a, float b)
{
    int32_t x = (int32_t)f32_bits(a), y = (int32_t)f32_bits(b);
    int64_t d = (int64_t)x - y;
    return (int)(d < 0 ? -d : d);
}

static void run_case(gpu_ctx *c, dsk_rng *r, int E, int k, int rows, int ties)
{
    const float scale = 1.5f;
    const int64_t ld = (E + 3) & ~3;
    float *lg = xmalloc(sizeof(float) * (size_t)rows * ld), *bias = xmalloc(sizeof(float) * (size_t)E);
    for (size_t i = 0; i < (size_t)rows * ld; i++) {
        float v = 2.0f * dsk_rng_normal(r);
        lg[i] = ties ? (float)(int)v : dsk_rng_below(r, 50) == 0 ? 25.0f * dsk_rng_f32(r) : v; /* > 20: linear */
    }
    for (int e = 0; e < E; e++)
        bias[e] = ties ? 0.0f : 0.2f * dsk_rng_normal(r);
    CUdeviceptr dl = dev_upload(lg, sizeof(float) * (size_t)rows * ld), db = dev_upload(bias, sizeof(float) * (size_t)E),
                di = dev_alloc(sizeof(int32_t) * (size_t)rows * k), dw = dev_alloc(sizeof(float) * (size_t)rows * k),
                ds = dev_alloc(sizeof(float) * (size_t)rows * E), di1 = dev_alloc(64 * 4), dw1 = dev_alloc(64 * 4);
    dev_memset(di, 0xff, sizeof(int32_t) * (size_t)rows * k);
    must(op_moe_route(c->k, c->s, dl, ld, db, rows, E, k, scale, di, dw, ds), "moe_route");
    dev_sync(c);
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)rows * k), rid[64], sid[64], one_i[64];
    float *wts = xmalloc(sizeof(float) * (size_t)rows * k), *sc = xmalloc(sizeof(float) * (size_t)rows * E);
    float rw[64], sw[64], one_w[64];
    dev_download(ids, di, sizeof(int32_t) * (size_t)rows * k);
    dev_download(wts, dw, sizeof(float) * (size_t)rows * k);
    dev_download(sc, ds, sizeof(float) * (size_t)rows * E);
    int worst_ulp = 0, given_s_bad = 0, flips = 0, flip_far = 0, alone_bad = 0;
    double worst_w = 0;
    for (int i = 0; i < rows; i++) {
        const float *l = lg + (size_t)i * ld, *s = sc + (size_t)i * E;
        for (int e = 0; e < E; e++) {
            int u = ulps(s[e], moe_sqrtsoftplus(l[e]));
            worst_ulp = u > worst_ulp ? u : worst_ulp;
        }
        /* given the GPU's scores: the reference's selection and weights, bit for bit */
        moe_route_scores(scale, E, k, bias, s, sid, sw);
        given_s_bad += memcmp(sid, ids + (size_t)i * k, sizeof(int32_t) * (size_t)k) ||
                       memcmp(sw, wts + (size_t)i * k, sizeof(float) * (size_t)k);
        /* from the logits: the same experts unless the biased scores nearly tie at the cut */
        moe_route(scale, E, k, bias, l, rid, rw);
        if (memcmp(rid, ids + (size_t)i * k, sizeof(int32_t) * (size_t)k)) {
            flips++;
            float lo_in = INFINITY, hi_out = -INFINITY; /* the GPU's weakest pick, the best it left out */
            for (int e = 0; e < E; e++) {
                float key = moe_sqrtsoftplus(l[e]) + bias[e];
                int in = 0;
                for (int t = 0; t < k; t++)
                    in |= ids[(size_t)i * k + t] == e;
                if (in)
                    lo_in = key < lo_in ? key : lo_in;
                else
                    hi_out = key > hi_out ? key : hi_out;
            }
            flip_far += fabsf(hi_out - lo_in) > 1e-5f * fabsf(hi_out);
        } else
            for (int t = 0; t < k; t++) {
                double d = fabs((double)wts[(size_t)i * k + t] - rw[t]) / fabs(rw[t]);
                worst_w = d > worst_w ? d : worst_w;
            }
        if (rows <= 16 || i == 0 || i == rows - 1 || i % 61 == 3) {
            must(op_moe_route(c->k, c->s, dl + (CUdeviceptr)i * ld * 4, ld, db, 1, E, k, scale, di1, dw1, 0),
                 "moe_route alone");
            dev_sync(c);
            dev_download(one_i, di1, sizeof(int32_t) * (size_t)k);
            dev_download(one_w, dw1, sizeof(float) * (size_t)k);
            alone_bad += memcmp(one_i, ids + (size_t)i * k, sizeof(int32_t) * (size_t)k) ||
                         memcmp(one_w, wts + (size_t)i * k, sizeof(float) * (size_t)k);
        }
    }
    char shape[64];
    snprintf(shape, sizeof shape, "rows %d, top %d of %d%s", rows, k, E, ties ? " ties" : "");
    check(c, worst_ulp <= 4 && !given_s_bad && !flip_far && worst_w <= 1e-6 && !alone_bad, "moe_route", shape,
          "scores within %d ulp, given them %d rows differ; %d near-tie flips (%d not near), weights rel %.1e, alone %d",
          worst_ulp, given_s_bad, flips, flip_far, worst_w, alone_bad);
    dev_free(dl);
    dev_free(db);
    dev_free(di);
    dev_free(dw);
    dev_free(ds);
    dev_free(di1);
    dev_free(dw1);
    free(lg);
    free(bias);
    free(ids);
    free(wts);
    free(sc);
}

static void bad_arguments(gpu_ctx *c)
{
    CUdeviceptr d = dev_alloc(1 << 16);
    struct {
        const char *what;
        int E, k;
        int64_t ld;
        CUdeviceptr bias, ids;
    } bad[] = {{"512 experts", 512, 6, 512, d, d}, {"top 17", 384, 17, 384, d, d}, {"top 0", 384, 0, 384, d, d},
               {"ld < E", 384, 6, 380, d, d},     {"no bias", 384, 6, 384, 0, d}, {"misaligned ids", 384, 6, 384, d, d + 2}};
    int refused = 0, n = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < n; i++) {
        int rc = op_moe_route(c->k, c->s, d, bad[i].ld, bad[i].bias, 2, bad[i].E, bad[i].k, 1.5f, bad[i].ids, d, 0);
        refused += rc != 0;
        if (rc == 0)
            printf("     moe_route accepted %s\n", bad[i].what);
    }
    dev_sync(c);
    dev_free(d);
    check(c, refused == n, "moe_route", "bad arguments", "%d of %d refused", refused, n);
}

void test_moe_route(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x3073);
    const struct {
        int E, k;
    } shapes[] = {{384, 6}, {128, 3}, {8, 3}, {4, 2}};
    const int nrows[] = {1, 2, 7, 16, 64, 4096};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++)
            run_case(c, &r, shapes[si].E, shapes[si].k, nrows[ri], 0);
    run_case(c, &r, 384, 6, 64, 1);
    run_case(c, &r, 8, 3, 16, 1);
    bad_arguments(c);
}
