/* GPU checks of vision_mm against runtime/ref/vision_mm.h at the tiny tower's shapes and the release tower's
 * (vision.md §3.1; the patch embedding's K 588 padded to 608), every epilogue. Large launches are compared on
 * three blocks of 64 rows (first, middle, last). Tolerances: relative L2 <= 2e-3 for the bias and residual
 * forms (the fp32 sum runs in another order, then one bf16 rounding: most outputs equal, some 1 ulp apart),
 * 4e-3 for GELU and SwiGLU (the device's erff and expf differ from glibc's by an ulp or two before a second
 * rounding). Every row launched alone (a 1-row launch, the other tile size) equals its row of the whole
 * launch bit for bit, and nothing is written outside the output. */
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/launch/vision_mm.h"
#include "runtime/ref/vision_mm.h"
#include "tests/gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int has_family(const kit *k, const char *family)
{
    for (int i = 0; i < kit_nkernels(k); i++)
        if (!strcmp(kit_kernel_at(k, i)->meta->family, family))
            return 1;
    return 0;
}

typedef struct {
    int M, K, N, mode, bias;
    const char *what;
} mm_case;

/* sm: the form to run (rule_vision_mm_pick: 90 Hopper's vision_mm_wgmma, 0 the generic vision_mm) */
static void run_case(gpu_ctx *c, dsk_rng *r, const mm_case *t, int sm)
{
    int M = t->M, K = t->K, N = t->N, mode = t->mode, No = mode == VISION_MM_SWIGLU ? N / 2 : N;
    size_t xs = (size_t)M * K, ws = (size_t)N * K, ys = (size_t)M * No;
    uint16_t *x = xmalloc(xs * 2), *w = xmalloc(ws * 2), *wi = xmalloc(ws * 2), *b = xmalloc((size_t)N * 2);
    uint16_t *y0 = xmalloc(ys * 2), *y = xmalloc(ys * 2), *alone = xmalloc((size_t)No * 2);
    fill_bf16(r, x, M, K, 1.0f);
    fill_bf16(r, w, N, K, 0.05f);
    fill_bf16(r, b, 1, N, 0.5f);
    fill_bf16(r, y0, M, No, 1.0f); /* the residual (mode 1), or poison the kernel must overwrite */
    if (mode == VISION_MM_SWIGLU)
        vision_mm_interleave(w, N / 2, K, wi);
    else
        memcpy(wi, w, ws * 2);
    CUdeviceptr dx = dev_upload(x, xs * 2), dw = dev_upload(wi, ws * 2), db = t->bias ? dev_upload(b, (size_t)N * 2) : 0;
    CUdeviceptr dy = dev_alloc_guarded(ys * 2), d1 = dev_alloc((size_t)No * 2);
    dev_poison(dy, ys * 2);
    dev_upload_to(dy, y0, ys * 2);
    must(op_vision_mm_as(c->k, sm, c->s, dx, dw, db, dy, M, K, N, mode), "vision_mm");
    dev_sync(c);
    dev_download(y, dy, ys * 2);
    int guards = dev_guard_intact(dy, ys * 2);
    /* the reference on up to three blocks of 64 rows */
    int starts[3] = {0, M / 2 - 32 > 64 ? M / 2 - 32 : 64, M - 64 > 128 ? M - 64 : 128}, nb = M > 192 ? 3 : 1;
    double num = 0, den = 0;
    size_t same = 0, cnt = 0;
    int invariant = 1;
    for (int bi = 0; bi < nb; bi++) {
        int r0 = nb == 1 ? 0 : starts[bi], rows = nb == 1 ? M : 64;
        float *xf = xmalloc((size_t)rows * K * 4), *yr = xmalloc((size_t)rows * No * 4);
        for (size_t i = 0; i < (size_t)rows * K; i++)
            xf[i] = bf16_to_f32(x[(size_t)r0 * K + i]);
        for (size_t i = 0; i < (size_t)rows * No; i++)
            yr[i] = bf16_to_f32(y0[(size_t)r0 * No + i]);
        must(ref_vision_mm(1, xf, rows, K, w, t->bias ? b : NULL, N, mode, yr), "ref_vision_mm");
        for (size_t i = 0; i < (size_t)rows * No; i++) {
            float g = bf16_to_f32(y[(size_t)r0 * No + i]), e = yr[i];
            num += (double)(g - e) * (g - e);
            den += (double)e * e;
            same += f32_to_bf16(e) == y[(size_t)r0 * No + i];
            cnt++;
        }
        /* the block's first row alone (another tile size when M is large) */
        dev_upload_to(d1, y0 + (size_t)r0 * No, (size_t)No * 2);
        must(op_vision_mm_as(c->k, sm, c->s, dx + (CUdeviceptr)r0 * K * 2, dw, db, d1, 1, K, N, mode), "vision_mm alone");
        dev_sync(c);
        dev_download(alone, d1, (size_t)No * 2);
        invariant &= !memcmp(alone, y + (size_t)r0 * No, (size_t)No * 2);
        free(xf);
        free(yr);
    }
    double e = den > 0 ? __builtin_sqrt(num / den) : 0;
    double tol = mode == VISION_MM_GELU || mode == VISION_MM_SWIGLU ? 4e-3 : 2e-3;
    char shape[96];
    snprintf(shape, sizeof shape, "%s: %d x %d -> %d, mode %d%s", t->what, M, K, N, mode, t->bias ? " +b" : "");
    check(c, e <= tol && invariant && guards, sm == 90 ? "vision_mm_wgmma" : "vision_mm", shape, "rel L2 %.2e (<= %.0e), %.1f%% bit-equal, row alone: %s%s",
          e, tol, 100.0 * same / (double)cnt, invariant ? "equal" : "DIFFERS", guards ? "" : ", WROTE OUTSIDE");
    dev_free(dx);
    dev_free(dw);
    if (db)
        dev_free(db);
    dev_free_guarded(dy);
    dev_free(d1);
    free(x);
    free(w);
    free(wi);
    free(b);
    free(y0);
    free(y);
    free(alone);
}

void test_vision_mm(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0);
    /* the tiny tower (vision.md §5: D 64, I 96, patch 4 -> K 48 padded to 64, aligner 576 -> 128) */
    const mm_case tiny[] = {
        {130, 64, 64, VISION_MM_BIAS, 1, "tiny patch embed"},    {130, 64, 192, VISION_MM_BIAS, 1, "tiny wqkv"},
        {130, 64, 64, VISION_MM_RESIDUAL, 1, "tiny wo"},         {130, 64, 192, VISION_MM_SWIGLU, 0, "tiny w1"},
        {130, 96, 64, VISION_MM_RESIDUAL, 0, "tiny w2"},         {15, 576, 128, VISION_MM_GELU, 1, "tiny aligner w1"},
        {15, 128, 128, VISION_MM_BIAS, 1, "tiny aligner w2"},     {1, 64, 192, VISION_MM_BIAS, 1, "one row"},
    };
    /* the release tower at a 1024x768 image (55 x 74 = 4070 patches, 19 x 25 = 475 cells) */
    const mm_case real[] = {
        {4070, 608, 1024, VISION_MM_BIAS, 1, "patch embed"},     {4070, 1024, 3072, VISION_MM_BIAS, 1, "wqkv"},
        {4070, 1024, 1024, VISION_MM_RESIDUAL, 1, "wo"},         {4070, 1024, 5632, VISION_MM_SWIGLU, 0, "w1"},
        {4070, 2816, 1024, VISION_MM_RESIDUAL, 0, "w2"},         {475, 9216, 5120, VISION_MM_GELU, 1, "aligner w1"},
        {475, 5120, 5120, VISION_MM_BIAS, 1, "aligner w2"},      {33, 1024, 3072, VISION_MM_BIAS, 1, "33 rows"},
    };
    /* on the emulator: the release K at few rows and columns */
    const mm_case small[] = {
        {70, 1024, 136, VISION_MM_BIAS, 1, "release K, few rows"}, {70, 2816, 64, VISION_MM_RESIDUAL, 0, "w2 K"},
        {40, 1024, 144, VISION_MM_SWIGLU, 0, "w1 K"},
    };
    /* the kit's own form; on an sm_90 kit also the generic one when the kit holds it (a whole-spec build) */
    int sm = kit_sm(c->k), forms[2], nf = 0;
    forms[nf++] = sm;
    if (sm == 90 && has_family(c->k, "vision_mm"))
        forms[nf++] = 0;
    for (int f = 0; f < nf; f++) {
        for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++)
            run_case(c, &r, &tiny[i], forms[f]);
        if (c->small)
            for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
                run_case(c, &r, &small[i], forms[f]);
        else
            for (size_t i = 0; i < sizeof real / sizeof real[0]; i++)
                run_case(c, &r, &real[i], forms[f]);
    }
}
