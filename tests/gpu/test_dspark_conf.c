/* GPU checks of dspark_conf against runtime/ref/dspark_conf.h, release (d 5120, rank 256) and tiny (d 128,
 * rank 128) shapes: the confidence logits within relative L2 1e-3 and each row equal to the row launched
 * alone; the Markov bias as rowmm_bf16 of the E_m rows by markov_head [NV][R] against the CPU drafter's
 * loop over the transposed head (relative L2 1e-3), and its addition to the logits exactly the CPU's fp32
 * add. Bad arguments are refused. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/dspark_conf.h"
#include "runtime/ref/dspark_conf.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NV 129280 /* the vocabulary */

static void run_case(gpu_ctx *c, dsk_rng *r, int d, int R, int rows, const uint16_t *head, const uint16_t *head_t,
                     CUdeviceptr dhead)
{
    const int64_t ldu = d + 8, lde = R, ldl = NV;
    uint16_t *u = xmalloc(2 * (size_t)rows * ldu), *e = xmalloc(2 * (size_t)rows * lde), *w = xmalloc(2 * (size_t)(d + R));
    fill_bf16(r, u, rows, (int)ldu, 1.0f);
    fill_bf16(r, e, rows, R, 1.0f);
    fill_bf16(r, w, 1, d + R, 0.02f);
    float *lg = xmalloc(4 * (size_t)rows * ldl), *conf = xmalloc(4 * (size_t)rows), *rconf = xmalloc(4 * (size_t)rows);
    for (size_t i = 0; i < (size_t)rows * ldl; i++)
        lg[i] = 3.0f * dsk_rng_normal(r);
    for (int i = 0; i < rows; i++)
        rconf[i] = ref_dspark_conf(w, u + (size_t)i * ldu, d, e + (size_t)i * lde, R);
    CUdeviceptr du = dev_upload(u, 2 * (size_t)rows * ldu), de = dev_upload(e, 2 * (size_t)rows * lde),
                dw = dev_upload(w, 2 * (size_t)(d + R)), dl = dev_upload(lg, 4 * (size_t)rows * ldl),
                dc = dev_alloc(4 * (size_t)rows), db = dev_alloc(4 * (size_t)rows * ldl), d1 = dev_alloc(16);
    /* the bias, then the confidence with the add */
    must(op_dspark_markov_bias(c->k, c->s, de, rows, R, dhead, NV, db), "dspark Markov bias");
    dspark_conf_args a = {.u = du, .ldu = ldu, .d = d, .e = de, .lde = lde, .R = R, .w = dw, .conf = dc, .bias = db,
                          .ldb = ldl, .logits = dl, .ldl = ldl, .V = NV, .rows = rows};
    must(op_dspark_conf(c->k, c->s, &a), "dspark_conf");
    dev_sync(c);
    dev_download(conf, dc, 4 * (size_t)rows);
    double ec = rel_l2(conf, rconf, (size_t)rows);
    /* the add: exactly logits + the GPU's bias; the bias against the CPU's loop (16 rows at most: slow) */
    float *bias = xmalloc(4 * (size_t)rows * ldl), *after = xmalloc(4 * (size_t)rows * ldl), *rb = xmalloc(4 * (size_t)NV);
    dev_download(bias, db, 4 * (size_t)rows * ldl);
    dev_download(after, dl, 4 * (size_t)rows * ldl);
    size_t add_bad = 0;
    for (size_t i = 0; i < (size_t)rows * ldl; i++) {
        float want = lg[i] + bias[i];
        add_bad += memcmp(&want, &after[i], 4) != 0;
    }
    double eb = 0;
    int nb = rows < 16 ? rows : 16;
    for (int i = 0; i < nb; i++) {
        ref_markov_bias(e + (size_t)i * lde, head_t, R, NV, rb);
        double x = rel_l2(bias + (size_t)i * ldl, rb, NV);
        eb = x > eb ? x : eb;
    }
    /* each row's confidence alone (no bias) equals its row of the launch */
    int alone_bad = 0;
    for (int i = 0; i < rows; i++) {
        dspark_conf_args b = a;
        b.u = du + (CUdeviceptr)i * ldu * 2, b.e = de + (CUdeviceptr)i * lde * 2, b.conf = d1, b.bias = 0, b.rows = 1;
        b.logits = 0;
        must(op_dspark_conf(c->k, c->s, &b), "dspark_conf alone");
        dev_sync(c);
        float one;
        dev_download(&one, d1, 4);
        alone_bad += memcmp(&one, &conf[i], 4) != 0;
    }
    char shape[64];
    snprintf(shape, sizeof shape, "rows %d, d %d, rank %d", rows, d, R);
    check(c, ec <= 1e-3 && eb <= 1e-3 && !add_bad && !alone_bad, "dspark_conf", shape,
          "conf rel L2 %.2e, Markov bias (rowmm) rel L2 %.2e over %d rows, add != CPU %zu, alone != batched %d", ec, eb,
          nb, add_bad, alone_bad);
    (void)head;
    dev_free(du);
    dev_free(de);
    dev_free(dw);
    dev_free(dl);
    dev_free(dc);
    dev_free(db);
    dev_free(d1);
    free(u);
    free(e);
    free(w);
    free(lg);
    free(conf);
    free(rconf);
    free(bias);
    free(after);
    free(rb);
}

static void bad_arguments(gpu_ctx *c)
{
    CUdeviceptr d = dev_alloc(1 << 16);
    dspark_conf_args ok = {.u = d, .ldu = 5120, .d = 5120, .e = d, .lde = 256, .R = 256, .w = d, .conf = d, .rows = 1};
    struct {
        const char *what;
        dspark_conf_args a;
    } bad[] = {{"d 100", ok}, {"ldu < d", ok}, {"misaligned w", ok}, {"bias without logits", ok}, {"ldb < NV", ok}};
    bad[0].a.d = 100, bad[0].a.ldu = 100;
    bad[1].a.ldu = 5112;
    bad[2].a.w = d + 2;
    bad[3].a.bias = d, bad[3].a.ldb = NV, bad[3].a.ldl = NV, bad[3].a.V = NV;
    bad[4].a.bias = d, bad[4].a.logits = d, bad[4].a.ldb = NV - 4, bad[4].a.ldl = NV, bad[4].a.V = NV;
    int refused = 0, n = (int)(sizeof bad / sizeof bad[0]);
    for (int i = 0; i < n; i++) {
        int rc = op_dspark_conf(c->k, c->s, &bad[i].a);
        refused += rc != 0;
        if (rc == 0)
            printf("     dspark_conf accepted %s\n", bad[i].what);
    }
    dev_sync(c);
    dev_free(d);
    check(c, refused == n, "dspark_conf", "bad arguments", "%d of %d refused", refused, n);
}

void test_dspark_conf(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0xd5c0);
    const struct {
        int d, R;
    } shapes[] = {{5120, 256}, {128, 128}};
    const int nrows[] = {1, 2, 5, 7, 16, 64};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int R = shapes[si].R;
        uint16_t *head = xmalloc(2 * (size_t)NV * R), *head_t = xmalloc(2 * (size_t)NV * R);
        fill_bf16(&r, head, NV, R, 0.05f);
        for (int v = 0; v < NV; v++)
            for (int k = 0; k < R; k++)
                head_t[(size_t)k * NV + v] = head[(size_t)v * R + k];
        CUdeviceptr dhead = dev_upload(head, 2 * (size_t)NV * R);
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++)
            run_case(c, &r, shapes[si].d, R, nrows[ri], head, head_t, dhead);
        dev_free(dhead);
        free(head);
        free(head_t);
    }
    bad_arguments(c);
}
