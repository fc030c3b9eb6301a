/* GPU checks of the mhc family against runtime/ref/mhc.h (and runtime/ref/rmsnorm.h for mhc_pre's norm):
 *   mhc_mix: coefficient rows within relative L2 1e-3 of hc_mixes (the GPU adds the 24 dots in chunks and
 *            its expf is CUDA's), comb's columns summing to 1;
 *   mhc_pre: y bit-equal to hc_pre; the fused RMSNorm within 1e-3 of ref_rmsnorm_bf16 and bit-equal to
 *            op_rmsnorm on the GPU's y;
 *   mhc_post: bit-equal to hc_post.
 * Every case: real and tiny widths, rows 1, 2, 7, 16, 64 and a prompt-sized count, each row of a launch
 * equal to the row launched alone, no write outside the outputs, bad arguments refused. */
#include "kit/src/mhc_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/mhc.h"
#include "runtime/launch/rmsnorm.h"
#include "runtime/model/config.h"
#include "runtime/ref/mhc.h"
#include "runtime/ref/rmsnorm.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HC 4
#define M ((2 + HC) * HC)

typedef struct {
    int d, prompt;
} width_case;

/* rows of a launch checked alone: all of a small one, else the first, the last and six at random */
static int alone_row(dsk_rng *r, int R, int t)
{
    return R <= 16 ? t : t == 0 ? 0 : t == 1 ? R - 1 : (int)dsk_rng_below(r, (uint64_t)R);
}

static int alone_count(int R)
{
    return R <= 16 ? R : 8;
}

static void refused(gpu_ctx *c, const char *family, const char *what, int rc)
{
    check(c, rc != 0, family, what, "refused: %s", rc ? dsk_err_msg() : "NO");
}

/* Coefficient rows as mhc_post and mhc_pre read them: pre in (0, 1), post in (0, 2), comb positive. */
static void fill_coef(dsk_rng *r, float *coef, int rows)
{
    for (int i = 0; i < rows; i++)
        for (int s = 0; s < M; s++)
            coef[(size_t)i * M + s] = s < HC       ? dsk_rng_f32(r) + 1e-6f
                                      : s < 2 * HC ? 2.0f * dsk_rng_f32(r)
                                                   : 0.5f * dsk_rng_f32(r);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs((double)a[i] - b[i]) > m ? fabs((double)a[i] - b[i]) : m;
    return m;
}

/* op_mhc_mix_pre == op_mhc_mix then op_mhc_pre, bit for bit (coefficients and the pre's normed rows and
 * y_raw): one launch at widths whose rmsnorm rule takes 256 threads (the release's 5120), two elsewhere;
 * the counters left zero. */
static void check_mix_pre(gpu_ctx *c, dsk_rng *r, int d, int R)
{
    int K = HC * d;
    mhc_dims md = {HC, d, 20, 1e-20f, 1e-6f};
    float *fn = xmalloc((size_t)M * K * 4), base[M], scale[3], *pi = xmalloc((size_t)R * M * 4);
    for (size_t i = 0; i < (size_t)M * K; i++)
        fn[i] = dsk_rng_normal(r) * 1.4142f / sqrtf((float)K);
    for (int s = 0; s < M; s++)
        base[s] = dsk_rng_normal(r);
    for (int s = 0; s < 3; s++)
        scale[s] = 0.5f + dsk_rng_f32(r);
    fill_coef(r, pi, R);
    uint16_t *x = xmalloc((size_t)R * K * 2), *g = xmalloc((size_t)d * 2), *x2 = xmalloc((size_t)R * K * 2);
    fill_bf16(r, x, R, K, 1.0f);
    fill_bf16(r, x2, R, K, 1.0f);
    fill_bf16(r, g, 1, d, 1.0f);
    size_t wsb = op_mhc_mix_ws_bytes(R, HC, d), cb = (size_t)R * M * 4, yb = (size_t)R * d * 2;
    uint32_t *zeros = calloc(MHC_MIX_COUNTERS, 4), *cnt = xmalloc(MHC_MIX_COUNTERS * 4);
    CUdeviceptr dfn = dev_upload(fn, (size_t)M * K * 4), dbase = dev_upload(base, sizeof base),
                dscale = dev_upload(scale, sizeof scale), dx = dev_upload(x, (size_t)R * K * 2),
                dx2 = dev_upload(x2, (size_t)R * K * 2), dpi = dev_upload(pi, cb), dg = dev_upload(g, (size_t)d * 2),
                dws = dev_alloc(wsb), dcnt = dev_upload(zeros, MHC_MIX_COUNTERS * 4), dc[2], dout[2], draw[2];
    for (int i = 0; i < 2; i++) {
        dc[i] = dev_alloc(cb);
        dout[i] = dev_alloc(yb);
        draw[i] = dev_alloc(yb);
        dev_memset(dout[i], 0xff, yb);
    }
    /* the pre on the other streams (x2) with π = pi, as a sublayer's pre reads another's coefficients */
    must(op_mhc_mix(c->k, c->s, &md, dx, dfn, dbase, dscale, dc[0], R, dws, wsb, dcnt), "mhc_mix");
    must(op_mhc_pre(c->k, c->s, dx2, dpi, M, dg, 1e-6f, dout[0], draw[0], R, HC, d), "mhc_pre");
    mhc_pre_call p = {dx2, dpi, M, dg, 1e-6f, dout[1], draw[1]};
    must(op_mhc_mix_pre(c->k, c->s, &md, dx, dfn, dbase, dscale, dc[1], R, dws, wsb, dcnt, &p), "mhc_mix_pre");
    dev_sync(c);
    float *c0 = xmalloc(cb), *c1 = xmalloc(cb);
    uint16_t *o0 = xmalloc(yb), *o1 = xmalloc(yb), *w0 = xmalloc(yb), *w1 = xmalloc(yb);
    dev_download(c0, dc[0], cb);
    dev_download(c1, dc[1], cb);
    dev_download(o0, dout[0], yb);
    dev_download(o1, dout[1], yb);
    dev_download(w0, draw[0], yb);
    dev_download(w1, draw[1], yb);
    dev_download(cnt, dcnt, MHC_MIX_COUNTERS * 4);
    int left = 0;
    for (int i = 0; i < MHC_MIX_COUNTERS; i++)
        left += cnt[i] != 0;
    int same = !memcmp(c0, c1, cb) && !memcmp(o0, o1, yb) && !memcmp(w0, w1, yb);
    char shape[64];
    snprintf(shape, sizeof shape, "rows %d, hc %d x %d, with hc_pre (%s)", R, HC, d,
             rule_mhc_pre_threads(d) == MHC_MIX_THREADS ? "one launch" : "two launches");
    check(c, same && !left, "mhc_mix", shape, "== mix then pre: %s, counters not zero: %d", same ? "yes" : "NO", left);
    /* a pre that reads the coefficients this mix writes is refused */
    mhc_pre_call bad = {dx2, dc[1], M, dg, 1e-6f, dout[1], 0};
    refused(c, "mhc_mix", "an hc_pre reading the mix's coefficients",
            op_mhc_mix_pre(c->k, c->s, &md, dx, dfn, dbase, dscale, dc[1], R, dws, wsb, dcnt, &bad));
    CUdeviceptr all[] = {dfn, dbase, dscale, dx, dx2, dpi, dg, dws, dcnt, dc[0], dc[1], dout[0], dout[1], draw[0],
                         draw[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        dev_free(all[i]);
    free(fn), free(pi), free(x), free(x2), free(g), free(zeros), free(cnt);
    free(c0), free(c1), free(o0), free(o1), free(w0), free(w1);
}

void test_mhc_mix(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(21);
    /* 136: hc·d = 544 is not a whole number of 256-input chunks; 1100 and 2500 rows cross the 1024-row slabs */
    const width_case widths[] = {{5120, 1100}, {128, 2500}, {136, 300}};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        int d = widths[wi].d, P = widths[wi].prompt, K = HC * d;
        model_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.hc_mult = HC;
        cfg.dim = d;
        cfg.norm_eps = 1e-20f;
        cfg.hc_eps = 1e-6f;
        cfg.hc_sinkhorn_iters = 20;
        mhc_dims md = {HC, d, cfg.hc_sinkhorn_iters, cfg.norm_eps, cfg.hc_eps};
        /* W x̂ / |x̂| ~ N(0, 2): sigmoids and the softmax see logits of a few units */
        float *fn = xmalloc((size_t)M * K * 4), base[M], scale[3];
        for (size_t i = 0; i < (size_t)M * K; i++)
            fn[i] = dsk_rng_normal(&r) * 1.4142f / sqrtf((float)K);
        for (int s = 0; s < M; s++)
            base[s] = dsk_rng_normal(&r);
        for (int s = 0; s < 3; s++)
            scale[s] = 0.5f + dsk_rng_f32(&r);
        size_t xb = (size_t)P * K * 2, cb = (size_t)P * M * 4, wsb = op_mhc_mix_ws_bytes(P, HC, d);
        uint16_t *x = xmalloc(xb);
        float *coef = xmalloc(cb), *ref = xmalloc(cb), one[M];
        CUdeviceptr dfn = dev_upload(fn, (size_t)M * K * 4), dbase = dev_upload(base, sizeof base),
                    dscale = dev_upload(scale, sizeof scale), dc = dev_alloc_guarded(cb), d1 = dev_alloc_guarded(M * 4),
                    dws = dev_alloc(wsb), dx = 0;
        uint32_t *zeros = calloc(MHC_MIX_COUNTERS, 4), *cnt = xmalloc(MHC_MIX_COUNTERS * 4);
        CUdeviceptr dcnt = dev_upload(zeros, MHC_MIX_COUNTERS * 4);
        const int nrows[] = {1, 2, 7, 16, 64, P};
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++) {
            int R = nrows[ri];
            fill_bf16(&r, x, R, K, 1.0f);
            if (dx)
                dev_free(dx);
            dx = dev_upload(x, (size_t)R * K * 2);
            dev_poison(dc, cb);
            must(op_mhc_mix(c->k, c->s, &md, dx, dfn, dbase, dscale, dc, R, dws, wsb, dcnt), "mhc_mix");
            dev_sync(c);
            dev_download(coef, dc, (size_t)R * M * 4);
            double colerr = 0;
            for (int i = 0; i < R; i++) {
                hc_coeffs k;
                hc_mixes(&cfg, fn, base, scale, x + (size_t)i * K, &k);
                hc_coeffs_pack(&k, HC, ref + (size_t)i * M);
                for (int j = 0; j < HC; j++) {
                    double col = 0;
                    for (int s = 0; s < HC; s++)
                        col += coef[(size_t)i * M + 2 * HC + s * HC + j];
                    colerr = fabs(col - 1.0) > colerr ? fabs(col - 1.0) : colerr;
                }
            }
            double e = rel_l2(coef, ref, (size_t)R * M), mad = max_abs_diff(coef, ref, (size_t)R * M);
            int guards = dev_guard_intact(dc, (size_t)R * M * 4), alone_ok = 1;
            for (int t = 0; t < alone_count(R) && alone_ok; t++) {
                int row = alone_row(&r, R, t);
                must(op_mhc_mix(c->k, c->s, &md, dx + (CUdeviceptr)row * K * 2, dfn, dbase, dscale, d1, 1, dws, wsb, dcnt),
                     "mhc_mix alone");
                dev_sync(c);
                dev_download(one, d1, M * 4);
                alone_ok = !memcmp(one, coef + (size_t)row * M, M * 4);
            }
            /* the last CTA of each row block left its counter zero */
            dev_download(cnt, dcnt, MHC_MIX_COUNTERS * 4);
            int left = 0;
            for (int i = 0; i < MHC_MIX_COUNTERS; i++)
                left += cnt[i] != 0;
            char shape[64];
            snprintf(shape, sizeof shape, "rows %d, hc %d x %d", R, HC, d);
            check(c, e <= 1e-3 && colerr <= 1e-3 && guards && alone_ok && !left, "mhc_mix", shape,
                  "rel L2 %.2e, max |diff| %.2e, comb columns - 1 <= %.1e, guards %s, each row == alone: %s, "
                  "counters not zero: %d",
                  e, mad, colerr, guards ? "intact" : "WRITTEN", alone_ok ? "yes" : "NO", left);
        }
        if (wi == 1) {
            mhc_dims bad = md;
            bad.hc = 5;
            refused(c, "mhc_mix", "hc 5 (more sums than a warp)",
                    op_mhc_mix(c->k, c->s, &bad, dx, dfn, dbase, dscale, dc, 1, dws, wsb, dcnt));
            bad = md;
            bad.sinkhorn_iters = 0;
            refused(c, "mhc_mix", "0 Sinkhorn iterations",
                    op_mhc_mix(c->k, c->s, &bad, dx, dfn, dbase, dscale, dc, 1, dws, wsb, dcnt));
            bad = md;
            bad.d = 132;
            refused(c, "mhc_mix", "d not a multiple of 8",
                    op_mhc_mix(c->k, c->s, &bad, dx, dfn, dbase, dscale, dc, 1, dws, wsb, dcnt));
            refused(c, "mhc_mix", "workspace too small",
                    op_mhc_mix(c->k, c->s, &md, dx, dfn, dbase, dscale, dc, 64, dws, op_mhc_mix_ws_bytes(63, HC, d), dcnt));
            refused(c, "mhc_mix", "workspace missing",
                    op_mhc_mix(c->k, c->s, &md, dx, dfn, dbase, dscale, dc, 1, 0, wsb, dcnt));
            refused(c, "mhc_mix", "arrival counters missing",
                    op_mhc_mix(c->k, c->s, &md, dx, dfn, dbase, dscale, dc, 1, dws, wsb, 0));
            refused(c, "mhc_mix", "arrival counters inside the workspace",
                    op_mhc_mix(c->k, c->s, &md, dx, dfn, dbase, dscale, dc, 1, dws, wsb, dws));
            refused(c, "mhc_mix", "hc_fn misaligned",
                    op_mhc_mix(c->k, c->s, &md, dx, dfn + 4, dbase, dscale, dc, 1, dws, wsb, dcnt));
            refused(c, "mhc_mix", "coef inside the workspace",
                    op_mhc_mix(c->k, c->s, &md, dx, dfn, dbase, dscale, dws, 1, dws, wsb, dcnt));
        }
        dev_free(dx);
        dev_free(dfn);
        dev_free(dbase);
        dev_free(dscale);
        dev_free(dws);
        dev_free(dcnt);
        free(zeros);
        free(cnt);
        dev_free_guarded(dc);
        dev_free_guarded(d1);
        free(fn);
        free(x);
        free(coef);
        free(ref);
    }
    const int mp_rows[] = {1, 16, 64, 300};
    for (int i = 0; i < 4; i++) {
        check_mix_pre(c, &r, 5120, mp_rows[i]);
        check_mix_pre(c, &r, 128, mp_rows[i]);
    }
}

/* One mhc_pre case: w rows of stride ws (π: hc; coefficient rows: M), with or without the norm. */
typedef struct {
    int stride, norm, raw;
    const char *what;
} pre_mode;

void test_mhc_pre(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(22);
    const width_case widths[] = {{5120, 2048}, {128, 4096}, {1280, 300}}; /* T = 256, 32, 128 */
    const pre_mode modes[] = {{HC, 0, 0, "pi, no norm"}, {M, 1, 1, "coef pre, norm + y"}, {M, 1, 0, "coef pre, norm"}};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        int d = widths[wi].d, P = widths[wi].prompt;
        size_t xb = (size_t)P * HC * d * 2, yb = (size_t)P * d * 2, wb = (size_t)P * M * 4;
        uint16_t *x = xmalloc(xb), *g = xmalloc((size_t)d * 2), *y = xmalloc(yb), *yn = xmalloc(yb), *yr = xmalloc(yb),
                 *ynr = xmalloc(yb), *ysep = xmalloc(yb), *o1 = xmalloc((size_t)d * 2), *r1 = xmalloc((size_t)d * 2);
        float *w = xmalloc(wb), *a = xmalloc(yb * 2), *b = xmalloc(yb * 2);
        for (int i = 0; i < d; i++)
            g[i] = f32_to_bf16(1.0f + 0.3f * dsk_rng_normal(&r));
        CUdeviceptr dg = dev_upload(g, (size_t)d * 2), dout = dev_alloc_guarded(yb), draw = dev_alloc_guarded(yb),
                    dsep = dev_alloc(yb), d1 = dev_alloc_guarded((size_t)d * 2), d1r = dev_alloc_guarded((size_t)d * 2),
                    dx = 0, dw = 0;
        const int nrows[] = {1, 2, 7, 16, 64, P};
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++) {
            int R = nrows[ri];
            size_t rb = (size_t)R * d * 2;
            fill_bf16(&r, x, R * HC, d, 1.0f);
            fill_coef(&r, w, R);
            if (dx) {
                dev_free(dx);
                dev_free(dw);
            }
            dx = dev_upload(x, (size_t)R * HC * d * 2);
            dw = dev_upload(w, (size_t)R * M * 4);
            for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
                const pre_mode *pm = &modes[mi];
                float eps = 1e-20f;
                for (int i = 0; i < R; i++)
                    hc_pre(x + (size_t)i * HC * d, w + (size_t)i * pm->stride, HC, d, yr + (size_t)i * d);
                dev_poison(dout, yb);
                dev_poison(draw, yb);
                must(op_mhc_pre(c->k, c->s, dx, dw, pm->stride, pm->norm ? dg : 0, eps, dout, pm->raw ? draw : 0, R, HC,
                                d),
                     "mhc_pre");
                dev_sync(c);
                int guards = dev_guard_intact(dout, rb) && dev_guard_intact(draw, pm->raw ? rb : 0);
                double e = 0;
                int same = 1, fused_eq = 1, alone_ok = 1;
                if (!pm->norm) {
                    dev_download(y, dout, rb);
                    same = !memcmp(y, yr, rb);
                } else {
                    dev_download(yn, dout, rb);
                    ref_rmsnorm_bf16(yr, g, ynr, R, d, eps);
                    for (size_t i = 0; i < (size_t)R * d; i++) {
                        a[i] = bf16_to_f32(yn[i]);
                        b[i] = bf16_to_f32(ynr[i]);
                    }
                    e = rel_l2(a, b, (size_t)R * d);
                    if (pm->raw) {
                        dev_download(y, draw, rb);
                        same = !memcmp(y, yr, rb);
                        /* fused == the GPU's own rmsnorm of the un-normed y, bit for bit */
                        must(op_rmsnorm(c->k, c->s, draw, dg, dsep, R, d, eps), "rmsnorm of mhc_pre's y");
                        dev_sync(c);
                        dev_download(ysep, dsep, rb);
                        fused_eq = !memcmp(ysep, yn, rb);
                    } else
                        fused_eq = !memcmp(yn, ysep, rb); /* the previous mode's fused output, same inputs */
                }
                for (int t = 0; t < alone_count(R) && alone_ok; t++) {
                    int row = alone_row(&r, R, t);
                    dev_poison(d1r, (size_t)d * 2);
                    must(op_mhc_pre(c->k, c->s, dx + (CUdeviceptr)row * HC * d * 2,
                                    dw + (CUdeviceptr)row * pm->stride * 4, pm->stride, pm->norm ? dg : 0, eps, d1,
                                    pm->raw ? d1r : 0, 1, HC, d),
                         "mhc_pre alone");
                    dev_sync(c);
                    dev_download(o1, d1, (size_t)d * 2);
                    alone_ok = !memcmp(o1, (pm->norm ? yn : y) + (size_t)row * d, (size_t)d * 2);
                    if (pm->raw) {
                        dev_download(r1, d1r, (size_t)d * 2);
                        alone_ok &= !memcmp(r1, y + (size_t)row * d, (size_t)d * 2);
                    }
                }
                char shape[80];
                snprintf(shape, sizeof shape, "rows %d x %d, %s", R, d, pm->what);
                check(c, same && (!pm->norm || (e <= 1e-3 && fused_eq)) && guards && alone_ok, "mhc_pre", shape,
                      "y bit-equal: %s, norm rel L2 %.2e, fused == rmsnorm(y): %s, guards %s, each row == alone: %s",
                      pm->norm && !pm->raw ? "-"
                      : same               ? "yes"
                                           : "NO",
                      e, pm->norm ? fused_eq ? "yes" : "NO" : "-", guards ? "intact" : "WRITTEN",
                      alone_ok ? "yes" : "NO");
            }
        }
        if (wi == 1) {
            refused(c, "mhc_pre", "stride shorter than hc", op_mhc_pre(c->k, c->s, dx, dw, 3, 0, 0, dout, 0, 1, HC, d));
            refused(c, "mhc_pre", "y_raw without a norm",
                    op_mhc_pre(c->k, c->s, dx, dw, HC, 0, 0, dout, draw, 1, HC, d));
            refused(c, "mhc_pre", "d not a multiple of 8",
                    op_mhc_pre(c->k, c->s, dx, dw, HC, 0, 0, dout, 0, 1, HC, 124));
            refused(c, "mhc_pre", "norm wider than the kernel holds",
                    op_mhc_pre(c->k, c->s, dx, dw, HC, dg, 1e-6f, dout, 0, 1, HC, MHC_PRE_MAX_D + 8));
            refused(c, "mhc_pre", "out overlaps x", op_mhc_pre(c->k, c->s, dx, dw, HC, 0, 0, dx, 0, 1, HC, d));
            refused(c, "mhc_pre", "w misaligned", op_mhc_pre(c->k, c->s, dx, dw + 4, HC, 0, 0, dout, 0, 1, HC, d));
            refused(c, "mhc_pre", "no variant for hc 2", op_mhc_pre(c->k, c->s, dx, dw, HC, 0, 0, dout, 0, 1, 2, d));
        }
        dev_free(dx);
        dev_free(dw);
        dev_free(dg);
        dev_free(dsep);
        dev_free_guarded(dout);
        dev_free_guarded(draw);
        dev_free_guarded(d1);
        dev_free_guarded(d1r);
        free(x);
        free(g);
        free(y);
        free(yn);
        free(yr);
        free(ynr);
        free(ysep);
        free(o1);
        free(r1);
        free(w);
        free(a);
        free(b);
    }
}

/* The CPU's hc_post of R rows. */
static void post_reference(const uint16_t *y, const uint16_t *x, const float *coef, int R, int d, uint16_t *ref)
{
    for (int i = 0; i < R; i++) {
        hc_coeffs k;
        hc_coeffs_unpack(coef + (size_t)i * M, HC, &k);
        hc_post(y + (size_t)i * d, x + (size_t)i * HC * d, &k, HC, d, ref + (size_t)i * HC * d);
    }
}

/* The post with the window keys' ring store in its launch (op_mhc_post_copy) == the post alone (`want`,
 * the fp32-y result) and the copy's destination rows == the source rows, bit for bit; the ring's other
 * rows (an index of -1, or no row sent there) untouched. */
static void check_post_copy(gpu_ctx *c, dsk_rng *r, CUdeviceptr dy32, CUdeviceptr dx, CUdeviceptr dc,
                            CUdeviceptr dout, int R, int d, const uint16_t *want)
{
    int row_bytes = d >= 1024 ? 1024 : 256, ring_rows = 2 * R + 3; /* a 512-dim (or tiny's 128) bf16 key */
    size_t rb = (size_t)R * HC * d * 2, kb = (size_t)R * row_bytes, ringb = (size_t)ring_rows * row_bytes;
    uint8_t *src = xmalloc(kb), *ring = xmalloc(ringb), *got = xmalloc(ringb);
    uint16_t *o = xmalloc(rb);
    int32_t *idx = xmalloc((size_t)R * 4), *used = xmalloc((size_t)ring_rows * 4);
    for (size_t i = 0; i < kb; i++)
        src[i] = (uint8_t)dsk_rng_below(r, 256);
    for (size_t i = 0; i < ringb; i++)
        ring[i] = (uint8_t)dsk_rng_below(r, 256);
    memset(used, 0, (size_t)ring_rows * 4);
    for (int i = 0; i < R; i++) {
        int t;
        do
            t = (int)dsk_rng_below(r, (uint64_t)ring_rows);
        while (used[t]);
        used[t] = 1;
        idx[i] = dsk_rng_below(r, 5) == 0 ? -1 : t;
    }
    CUdeviceptr dsrc = dev_upload(src, kb), dring = dev_upload(ring, ringb), didx = dev_upload(idx, (size_t)R * 4);
    rows_copy_job job = {dsrc, row_bytes, 0, dring, row_bytes, didx, R, row_bytes};
    dev_poison(dout, rb);
    must(op_mhc_post_copy(c->k, c->s, dy32, 1, dx, dc, dout, R, HC, d, &job), "mhc_post with a rows copy");
    dev_sync(c);
    dev_download(o, dout, rb);
    dev_download(got, dring, ringb);
    for (int i = 0; i < R; i++)
        if (idx[i] >= 0)
            memcpy(ring + (size_t)idx[i] * row_bytes, src + (size_t)i * row_bytes, (size_t)row_bytes);
    int post_same = !memcmp(o, want, rb), ring_same = !memcmp(got, ring, ringb);
    char shape[64];
    snprintf(shape, sizeof shape, "rows %d, hc %d x %d, copy %d x %d B", R, HC, d, R, row_bytes);
    check(c, post_same && ring_same, "mhc_post", shape,
          "with the ring store in its launch: the post == alone: %s, the ring == the copy: %s",
          post_same ? "yes" : "NO", ring_same ? "yes" : "NO");
    if (R == 1) {
        rows_copy_job reads_out = {dout, row_bytes, 0, dring, row_bytes, 0, 1, row_bytes};
        refused(c, "mhc_post", "a copy that reads xout",
                op_mhc_post_copy(c->k, c->s, dy32, 1, dx, dc, dout, 1, HC, d, &reads_out));
        rows_copy_job odd = {dsrc, row_bytes, 0, dring, row_bytes, 0, 1, 24};
        refused(c, "mhc_post", "a copy of 24-byte rows",
                op_mhc_post_copy(c->k, c->s, dy32, 1, dx, dc, dout, 1, HC, d, &odd));
    }
    dev_free(dsrc);
    dev_free(dring);
    dev_free(didx);
    free(src), free(ring), free(got), free(o), free(idx), free(used);
}

void test_mhc_post(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(23);
    const width_case widths[] = {{5120, 2048}, {128, 4096}};
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        int d = widths[wi].d, P = widths[wi].prompt;
        size_t xb = (size_t)P * HC * d * 2;
        uint16_t *x = xmalloc(xb), *y = xmalloc((size_t)P * d * 2), *o = xmalloc(xb), *ref = xmalloc(xb),
                 *o1 = xmalloc((size_t)HC * d * 2);
        float *coef = xmalloc((size_t)P * M * 4);
        CUdeviceptr dout = dev_alloc_guarded(xb), d1 = dev_alloc_guarded((size_t)HC * d * 2), dx = 0, dy = 0, dc = 0;
        const int nrows[] = {1, 2, 7, 16, 64, P};
        for (size_t ri = 0; ri < sizeof nrows / sizeof nrows[0]; ri++) {
            int R = nrows[ri];
            size_t rb = (size_t)R * HC * d * 2;
            fill_bf16(&r, x, R * HC, d, 1.0f);
            fill_bf16(&r, y, R, d, 1.0f);
            fill_coef(&r, coef, R);
            if (dx) {
                dev_free(dx);
                dev_free(dy);
                dev_free(dc);
            }
            dx = dev_upload(x, rb);
            dy = dev_upload(y, (size_t)R * d * 2);
            dc = dev_upload(coef, (size_t)R * M * 4);
            dev_poison(dout, xb);
            must(op_mhc_post(c->k, c->s, dy, dx, dc, dout, R, HC, d), "mhc_post");
            dev_sync(c);
            dev_download(o, dout, rb);
            post_reference(y, x, coef, R, d, ref);
            int same = !memcmp(o, ref, rb), guards = dev_guard_intact(dout, rb), alone_ok = 1;
            for (int t = 0; t < alone_count(R) && alone_ok; t++) {
                int row = alone_row(&r, R, t);
                must(op_mhc_post(c->k, c->s, dy + (CUdeviceptr)row * d * 2, dx + (CUdeviceptr)row * HC * d * 2,
                                 dc + (CUdeviceptr)row * M * 4, d1, 1, HC, d),
                     "mhc_post alone");
                dev_sync(c);
                dev_download(o1, d1, (size_t)HC * d * 2);
                alone_ok = !memcmp(o1, o + (size_t)row * HC * d, (size_t)HC * d * 2);
            }
            char shape[64];
            snprintf(shape, sizeof shape, "rows %d, hc %d x %d", R, HC, d);
            check(c, same && guards && alone_ok, "mhc_post", shape, "bit-equal: %s, guards %s, each row == alone: %s",
                  same ? "yes" : "NO", guards ? "intact" : "WRITTEN", alone_ok ? "yes" : "NO");
            /* y as an fp32 partial: rounded to bf16 in the kernel, the reference on the rounded values */
            float *y32 = xmalloc((size_t)R * d * 4);
            for (size_t i = 0; i < (size_t)R * d; i++) {
                y32[i] = dsk_rng_normal(&r) * 3.0f;
                y[i] = f32_to_bf16(y32[i]);
            }
            CUdeviceptr dy32 = dev_upload(y32, (size_t)R * d * 4);
            dev_poison(dout, xb);
            must(op_mhc_post_f32(c->k, c->s, dy32, dx, dc, dout, R, HC, d), "mhc_post f32");
            dev_sync(c);
            dev_download(o, dout, rb);
            post_reference(y, x, coef, R, d, ref);
            same = !memcmp(o, ref, rb);
            guards = dev_guard_intact(dout, rb);
            check(c, same && guards, "mhc_post", shape, "y fp32: bit-equal to the reference on bf16(y): %s, guards %s",
                  same ? "yes" : "NO", guards ? "intact" : "WRITTEN");
            check_post_copy(c, &r, dy32, dx, dc, dout, R, d, o);
            dev_free(dy32);
            free(y32);
        }
        if (wi == 1) {
            refused(c, "mhc_post", "xout aliases x", op_mhc_post(c->k, c->s, dy, dx, dc, dx, 1, HC, d));
            refused(c, "mhc_post", "xout overlaps y", op_mhc_post(c->k, c->s, dy, dx, dc, dy, 1, HC, d));
            refused(c, "mhc_post", "coef misaligned", op_mhc_post(c->k, c->s, dy, dx, dc + 4, dout, 1, HC, d));
            refused(c, "mhc_post", "d not a multiple of 8", op_mhc_post(c->k, c->s, dy, dx, dc, dout, 1, HC, 100));
            refused(c, "mhc_post", "no variant for hc 3", op_mhc_post(c->k, c->s, dy, dx, dc, dout, 1, 3, d));
        }
        dev_free(dx);
        dev_free(dy);
        dev_free(dc);
        dev_free_guarded(dout);
        dev_free_guarded(d1);
        free(x);
        free(y);
        free(o);
        free(ref);
        free(o1);
        free(coef);
    }
}
