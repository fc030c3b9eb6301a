/* GPU checks of the EXL3 families (docs/exl3-kernels.md) on fresh random EXL3 tensors (any trellis bits
 * are a valid encoding; suh/svh random fp16): the decode bit for bit against the CPU decoder for every
 * K x codebook; every form against the CPU reference (runtime/weights/exl3.h, exl3_moe_ref.h) by relative
 * L2 error <= 1e-3 at the model's shapes and at small odd ones; row invariance bit for bit (each row
 * of a launch equals the row launched alone, for every bucket and plan); grouped == separate launches;
 * MoE with random routing, shared experts, expert-parallel skipping. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "manifest/rules/rules.h"
#include "runtime/launch/exl3.h"
#include "runtime/launch/moe_route.h"
#include "runtime/ref/exl3.h"
#include "runtime/ref/exl3_moe.h"
#include "tests/gpu/gpu_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const cb_name[3] = {"3INST", "MCG", "MUL1"};

/* A random EXL3 linear, on the host (for the CPU reference) and on the device. */
typedef struct {
    exl3_linear cpu;
    uint16_t *trellis, *suh, *svh;
    float *bias;
    CUdeviceptr dt, ds, dv, db, dd;
    exl3_dev_linear dev;
} rlin;

static uint16_t rand_scale_f16(dsk_rng *r, float scale)
{
    float s = dsk_rng_u64(r) & 1 ? -scale : scale;
    return f32_to_f16(s * (0.5f + dsk_rng_f32(r)));
}

static void rlin_make(rlin *L, dsk_rng *r, int k, int n, int K, int cb, int with_bias, float suh_scale)
{
    memset(L, 0, sizeof *L);
    size_t nt = (size_t)k / 16 * (size_t)n / 16 * 16 * (size_t)K;
    L->trellis = xmalloc(nt * 2);
    for (size_t i = 0; i < nt; i += 4) {
        uint64_t v = dsk_rng_u64(r);
        for (size_t j = 0; j < 4 && i + j < nt; j++)
            L->trellis[i + j] = (uint16_t)(v >> (16 * j));
    }
    L->suh = xmalloc((size_t)k * 2);
    L->svh = xmalloc((size_t)n * 2);
    for (int i = 0; i < k; i++)
        L->suh[i] = rand_scale_f16(r, suh_scale);
    for (int i = 0; i < n; i++)
        L->svh[i] = rand_scale_f16(r, 1.0f);
    if (with_bias) {
        L->bias = xmalloc((size_t)n * 4);
        for (int i = 0; i < n; i++)
            L->bias[i] = dsk_rng_normal(r);
    }
    L->cpu = (exl3_linear){"random", k, n, K, cb, L->trellis, L->suh, L->svh, L->bias, 1};
    L->dt = dev_upload(L->trellis, nt * 2);
    L->ds = dev_upload(L->suh, (size_t)k * 2);
    L->dv = dev_upload(L->svh, (size_t)n * 2);
    L->db = with_bias ? dev_upload(L->bias, (size_t)n * 4) : 0;
    L->dd = dev_alloc(64);
    must(exl3_dev_linear_init(&L->dev, k, n, K, cb, L->dt, L->ds, L->dv, L->db, L->dd), "exl3_dev_linear_init");
}

static void rlin_free(rlin *L)
{
    dev_free(L->dt);
    dev_free(L->ds);
    dev_free(L->dv);
    if (L->db)
        dev_free(L->db);
    dev_free(L->dd);
    free(L->trellis);
    free(L->suh);
    free(L->svh);
    free(L->bias);
}

/* Random bf16 activations rows × ld (the first k columns used), also widened for the CPU. */
static void rand_x(dsk_rng *r, int rows, int k, int ld, uint16_t *xb, float *xf)
{
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < ld; j++) {
            uint16_t b = f32_to_bf16(dsk_rng_normal(r));
            xb[(size_t)i * ld + j] = b;
            if (j < k)
                xf[(size_t)i * k + j] = bf16_to_f32(b);
        }
}

/* One workspace for the whole program, grown on demand (a fresh one starts with zero counters). */
static exl3_workspace ws;

static void ws_need(gpu_ctx *c, size_t bytes)
{
    if (ws.bytes >= bytes)
        return;
    dev_sync(c);
    exl3_workspace_free(&ws);
    must(exl3_workspace_alloc(&ws, c->g, bytes), "exl3_workspace_alloc");
}

/* y (rows × n fp32) of a grouped launch, downloaded. */
static void run_grouped(gpu_ctx *c, const exl3_dev_linear *const *L, int nmat, CUdeviceptr dx, int ldx, int rows,
                        CUdeviceptr dy, int ldy, int out_kind, exl3_force f, void *host, size_t bytes)
{
    size_t need = exl3_ws_bytes_matmul(L, nmat, rows);
    /* forced plans may add x' space even for few rows */
    need += (size_t)nmat * 64 * (size_t)((rows + 63) / 64) * (size_t)L[0]->k * 2 + 16;
    ws_need(c, need);
    /* uploads and memsets ran on the legacy stream, which does not order with c->s */
    must(cu.cuCtxSynchronize() != CUDA_SUCCESS, "cuCtxSynchronize");
    must(op_exl3_grouped(c->k, c->s, L, nmat, dx, ldx, rows, dy, ldy, out_kind, &ws, f), "op_exl3_grouped");
    dev_sync(c);
    dev_download(host, dy, bytes);
}

static void run_matmul(gpu_ctx *c, const rlin *L, CUdeviceptr dx, int ldx, int rows, CUdeviceptr dy, exl3_force f,
                       float *host)
{
    const exl3_dev_linear *one[1] = {&L->dev};
    run_grouped(c, one, 1, dx, ldx, rows, dy, L->dev.n, EXL3_OUT_F32, f, host, (size_t)rows * L->dev.n * 4);
}

void test_exl3_decode(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x5eed);
    const int k = 256, n = 384;
    CUdeviceptr out = dev_alloc((size_t)k * n * 4);
    uint16_t *hat = xmalloc((size_t)k * n * 2), *ref = xmalloc((size_t)k * n * 2);
    float *w = xmalloc((size_t)k * n * 4), *wref = xmalloc((size_t)k * n * 4);
    for (int K = 1; K <= 8; K++)
        for (int cb = 0; cb < 3; cb++) {
            rlin L;
            rlin_make(&L, &r, k, n, K, cb, 0, 0.1f);
            must(cu.cuCtxSynchronize() != CUDA_SUCCESS, "cuCtxSynchronize");
            must(op_exl3_reconstruct(c->k, c->s, &L.dev, out, 0), "op_exl3_reconstruct");
            dev_sync(c);
            dev_download(hat, out, (size_t)k * n * 2);
            exl3_reconstruct_hat(&L.cpu, ref);
            size_t diff = 0;
            for (size_t i = 0; i < (size_t)k * n; i++)
                diff += hat[i] != ref[i];
            char shape[64];
            snprintf(shape, sizeof shape, "W_hat %dx%d K%d %s", k, n, K, cb_name[cb]);
            check(c, diff == 0, "exl3_recon", shape, "%zu of %d decoded weights differ from the CPU decoder", diff,
                  k * n);
            must(op_exl3_reconstruct(c->k, c->s, &L.dev, out, 1), "op_exl3_reconstruct");
            dev_sync(c);
            dev_download(w, out, (size_t)k * n * 4);
            exl3_reconstruct(&L.cpu, wref);
            size_t same = 0;
            for (size_t i = 0; i < (size_t)k * n; i++)
                same += f32_bits(w[i]) == f32_bits(wref[i]);
            double e = rel_l2(w, wref, (size_t)k * n);
            snprintf(shape, sizeof shape, "W %dx%d K%d %s", k, n, K, cb_name[cb]);
            check(c, e <= 1e-5, "exl3_recon", shape, "rel L2 %.2e, %.2f%% bit-equal", e, 100.0 * same / ((double)k * n));
            rlin_free(&L);
        }
    dev_free(out);
    free(hat);
    free(ref);
    free(w);
    free(wref);
}

/* A matmul vs the CPU, fp32 and bf16 outputs; bf16 must be exactly the RNE of the fp32 output. */
static void matmul_vs_cpu(gpu_ctx *c, dsk_rng *r, int k, int n, int K, int cb, int rows, int bias, int ldpad)
{
    rlin L;
    rlin_make(&L, r, k, n, K, cb, bias, 0.1f);
    int ldx = k + ldpad;
    uint16_t *xb = xmalloc((size_t)rows * ldx * 2);
    float *xf = xmalloc((size_t)rows * k * 4), *y = xmalloc((size_t)rows * n * 4), *ref = xmalloc((size_t)rows * n * 4);
    uint16_t *yb = xmalloc((size_t)rows * n * 2);
    rand_x(r, rows, k, ldx, xb, xf);
    CUdeviceptr dx = dev_upload(xb, (size_t)rows * ldx * 2), dy = dev_alloc((size_t)rows * n * 4);
    run_matmul(c, &L, dx, ldx, rows, dy, EXL3_AUTO, y);
    const exl3_dev_linear *one[1] = {&L.dev};
    run_grouped(c, one, 1, dx, ldx, rows, dy, n, EXL3_OUT_BF16, EXL3_AUTO, yb, (size_t)rows * n * 2);
    if (exl3_matmul(&L.cpu, xf, rows, ref))
        must(-1, "exl3_matmul");
    double e = rel_l2(y, ref, (size_t)rows * n);
    size_t bad_bf16 = 0;
    for (size_t i = 0; i < (size_t)rows * n; i++)
        bad_bf16 += yb[i] != f32_to_bf16(y[i]);
    char shape[80];
    snprintf(shape, sizeof shape, "%d->%d K%d %s rows %d%s", k, n, K, cb_name[cb], rows, bias ? " +bias" : "");
    check(c, e <= 1e-3 && bad_bf16 == 0, "exl3_mm", shape, "rel L2 %.2e; bf16 out != bf16(fp32 out): %zu", e, bad_bf16);
    dev_free(dx);
    dev_free(dy);
    free(xb);
    free(xf);
    free(y);
    free(ref);
    free(yb);
    rlin_free(&L);
}

/* Each row of a `rows`-row launch equals the row launched alone (1 row, the decode plan), bit for bit;
 * and the launch against the CPU. */
static void invariance(gpu_ctx *c, dsk_rng *r, const rlin *L, int rows, int check_cpu, int every)
{
    int k = L->dev.k, n = L->dev.n;
    uint16_t *xb = xmalloc((size_t)rows * k * 2);
    float *xf = xmalloc((size_t)rows * k * 4), *y = xmalloc((size_t)rows * n * 4), *y1 = xmalloc((size_t)n * 4);
    rand_x(r, rows, k, k, xb, xf);
    CUdeviceptr dx = dev_upload(xb, (size_t)rows * k * 2), dy = dev_alloc((size_t)rows * n * 4),
                d1 = dev_alloc((size_t)n * 4);
    run_matmul(c, L, dx, k, rows, dy, EXL3_AUTO, y);
    int bad = 0, tried = 0;
    for (int row = 0; row < rows; row += every) {
        run_matmul(c, L, dx + (CUdeviceptr)row * k * 2, k, 1, d1, EXL3_AUTO, y1);
        bad += memcmp(y1, y + (size_t)row * n, (size_t)n * 4) != 0;
        tried++;
    }
    const exl3_dev_linear *one[1] = {&L->dev};
    exl3_mm_plan p = exl3_plan_matmul(one, 1, rows, c->g->sms);
    char shape[96], cpu[48] = "";
    double e = 0;
    if (check_cpu) {
        float *ref = xmalloc((size_t)rows * n * 4);
        if (exl3_matmul(&L->cpu, xf, rows, ref))
            must(-1, "exl3_matmul");
        e = rel_l2(y, ref, (size_t)rows * n);
        snprintf(cpu, sizeof cpu, "rel L2 %.2e, ", e);
        free(ref);
    }
    snprintf(shape, sizeof shape, "%d->%d K%d %s rows %d (M%d%s%s)", k, n, L->dev.K, cb_name[L->dev.codebook], rows,
             p.bucket, p.xf ? " xf" : "", p.fold ? " fold" : " split");
    check(c, bad == 0 && e <= 1e-3, "exl3_mm", shape, "%s%d of %d rows differ from the row alone", cpu, bad, tried);
    dev_free(dx);
    dev_free(dy);
    dev_free(d1);
    free(xb);
    free(xf);
    free(y);
    free(y1);
}

/* The same rows under every plan (bucket, transform inside or before, split or fold): the same bits. */
static void plans_agree(gpu_ctx *c, dsk_rng *r, const rlin *L, int rows)
{
    int k = L->dev.k, n = L->dev.n;
    uint16_t *xb = xmalloc((size_t)rows * k * 2);
    float *xf = xmalloc((size_t)rows * k * 4), *y0 = xmalloc((size_t)rows * n * 4), *y = xmalloc((size_t)rows * n * 4);
    rand_x(r, rows, k, k, xb, xf);
    CUdeviceptr dx = dev_upload(xb, (size_t)rows * k * 2), dy = dev_alloc((size_t)rows * n * 4);
    run_matmul(c, L, dx, k, rows, dy, EXL3_AUTO, y0);
    const exl3_force plans[] = {{16, 0, 0}, {16, 0, 1}, {16, 1, 0}, {32, 0, 1}, {64, 1, 0}, {64, 1, 1}, {8, 1, 1}};
    int differ = 0;
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
        run_matmul(c, L, dx, k, rows, dy, plans[i], y);
        differ += memcmp(y, y0, (size_t)rows * n * 4) != 0;
    }
    char shape[80];
    snprintf(shape, sizeof shape, "%d->%d K%d %s rows %d, 7 plans", k, n, L->dev.K, cb_name[L->dev.codebook], rows);
    check(c, differ == 0, "exl3_mm", shape, "%d plans differ from the automatic one", differ);
    dev_free(dx);
    dev_free(dy);
    free(xb);
    free(xf);
    free(y0);
    free(y);
}

/* nmat matrices sharing x in one launch == one launch each (bit for bit), and each vs the CPU. */
static void grouped_vs_separate(gpu_ctx *c, dsk_rng *r, int k, const int *ns, int nmat, int K, int cb, int rows)
{
    rlin L[4];
    const exl3_dev_linear *dl[4];
    int ntot = 0;
    for (int m = 0; m < nmat; m++) {
        rlin_make(&L[m], r, k, ns[m], K, cb, 0, 0.1f);
        dl[m] = &L[m].dev;
        ntot += ns[m];
    }
    uint16_t *xb = xmalloc((size_t)rows * k * 2);
    float *xf = xmalloc((size_t)rows * k * 4), *yg = xmalloc((size_t)rows * ntot * 4);
    rand_x(r, rows, k, k, xb, xf);
    CUdeviceptr dx = dev_upload(xb, (size_t)rows * k * 2), dy = dev_alloc((size_t)rows * ntot * 4);
    run_grouped(c, dl, nmat, dx, k, rows, dy, ntot, EXL3_OUT_F32, EXL3_AUTO, yg, (size_t)rows * ntot * 4);
    int differ = 0, off = 0;
    double worst = 0;
    for (int m = 0; m < nmat; m++) {
        float *ys = xmalloc((size_t)rows * ns[m] * 4), *ref = xmalloc((size_t)rows * ns[m] * 4);
        CUdeviceptr d1 = dev_alloc((size_t)rows * ns[m] * 4);
        run_matmul(c, &L[m], dx, k, rows, d1, EXL3_AUTO, ys);
        for (int i = 0; i < rows; i++)
            differ += memcmp(ys + (size_t)i * ns[m], yg + (size_t)i * ntot + off, (size_t)ns[m] * 4) != 0;
        if (exl3_matmul(&L[m].cpu, xf, rows, ref))
            must(-1, "exl3_matmul");
        double e = rel_l2(ys, ref, (size_t)rows * ns[m]);
        worst = e > worst ? e : worst;
        off += ns[m];
        dev_free(d1);
        free(ys);
        free(ref);
    }
    char shape[96];
    int len = snprintf(shape, sizeof shape, "grouped %d->", k);
    for (int m = 0; m < nmat; m++)
        len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%d", m ? "+" : "", ns[m]);
    snprintf(shape + len, sizeof shape - (size_t)len, " K%d rows %d", K, rows);
    check(c, differ == 0 && worst <= 1e-3, "exl3_mm", shape, "%d rows differ from separate launches; worst rel L2 %.2e",
          differ, worst);
    dev_free(dx);
    dev_free(dy);
    free(xb);
    free(xf);
    free(yg);
    for (int m = 0; m < nmat; m++)
        rlin_free(&L[m]);
}

/* Block-diagonal (grouped wo_a): nmat matrices k -> n, matrix m on x's columns [m·k, (m+1)·k), their
 * descriptors one array; == one launch per block on its slice of x (bit for bit), and each vs the CPU. */
static void blockdiag_vs_separate(gpu_ctx *c, dsk_rng *r, int k, int n, int nmat, int K, int cb, int rows)
{
    rlin L[EXL3_MAX_BLOCKS];
    const exl3_dev_linear *dl[EXL3_MAX_BLOCKS];
    CUdeviceptr table = dev_alloc((size_t)nmat * sizeof(exl3_desc));
    for (int m = 0; m < nmat; m++) {
        rlin_make(&L[m], r, k, n, K, cb, 0, 0.1f);
        exl3_dev_linear *d = &L[m].dev;
        must(exl3_dev_linear_init(d, k, n, K, cb, d->trellis, d->suh, d->svh, 0, table + (CUdeviceptr)m * 64),
             "exl3_dev_linear_init");
        dl[m] = d;
    }
    int ldx = nmat * k, ntot = nmat * n;
    uint16_t *xb = xmalloc((size_t)rows * ldx * 2);
    float *xall = xmalloc((size_t)rows * ldx * 4), *xf = xmalloc((size_t)rows * k * 4);
    float *yg = xmalloc((size_t)rows * ntot * 4), *ys = xmalloc((size_t)rows * n * 4), *ref = xmalloc((size_t)rows * n * 4);
    rand_x(r, rows, ldx, ldx, xb, xall);
    CUdeviceptr dx = dev_upload(xb, (size_t)rows * ldx * 2), dy = dev_alloc((size_t)rows * ntot * 4);
    CUdeviceptr d1 = dev_alloc((size_t)rows * n * 4);
    size_t need = exl3_ws_bytes_matmul(dl, nmat, rows);
    ws_need(c, need);
    must(cu.cuCtxSynchronize() != CUDA_SUCCESS, "cuCtxSynchronize");
    must(op_exl3_blockdiag(c->k, c->s, dl, nmat, dx, ldx, rows, dy, ntot, EXL3_OUT_F32, &ws, EXL3_AUTO),
         "op_exl3_blockdiag");
    dev_sync(c);
    dev_download(yg, dy, (size_t)rows * ntot * 4);
    /* a forced plan (bucket 64, x' in its own launch, folded) gives the same bits */
    float *yf = xmalloc((size_t)rows * ntot * 4);
    ws_need(c, need + (size_t)nmat * 64 * (size_t)((rows + 63) / 64) * (size_t)k * 2 + 16);
    must(cu.cuCtxSynchronize() != CUDA_SUCCESS, "cuCtxSynchronize");
    must(op_exl3_blockdiag(c->k, c->s, dl, nmat, dx, ldx, rows, dy, ntot, EXL3_OUT_F32, &ws, (exl3_force){64, 1, 1}),
         "op_exl3_blockdiag, forced plan");
    dev_sync(c);
    dev_download(yf, dy, (size_t)rows * ntot * 4);
    int differ = memcmp(yf, yg, (size_t)rows * ntot * 4) != 0;
    free(yf);
    double worst = 0;
    for (int m = 0; m < nmat; m++) {
        run_matmul(c, &L[m], dx + (CUdeviceptr)m * k * 2, ldx, rows, d1, EXL3_AUTO, ys);
        for (int i = 0; i < rows; i++)
            differ += memcmp(ys + (size_t)i * n, yg + (size_t)i * ntot + (size_t)m * n, (size_t)n * 4) != 0;
        for (int i = 0; i < rows; i++)
            memcpy(xf + (size_t)i * k, xall + (size_t)i * ldx + (size_t)m * k, (size_t)k * 4);
        if (exl3_matmul(&L[m].cpu, xf, rows, ref))
            must(-1, "exl3_matmul");
        float *yb = xmalloc((size_t)rows * n * 4);
        for (int i = 0; i < rows; i++)
            memcpy(yb + (size_t)i * n, yg + (size_t)i * ntot + (size_t)m * n, (size_t)n * 4);
        double eb = rel_l2(yb, ref, (size_t)rows * n);
        worst = eb > worst ? eb : worst;
        free(yb);
    }
    char shape[96];
    snprintf(shape, sizeof shape, "block-diagonal %d x %d->%d K%d %s rows %d", nmat, k, n, K, cb_name[cb], rows);
    check(c, differ == 0 && worst <= 1e-3, "exl3_mm", shape,
          "%d block rows (or the forced plan) differ from one launch per block; worst rel L2 %.2e", differ, worst);
    dev_free(dx);
    dev_free(dy);
    dev_free(d1);
    free(xb);
    free(xall);
    free(xf);
    free(yg);
    free(ys);
    free(ref);
    for (int m = 0; m < nmat; m++)
        rlin_free(&L[m]);
    dev_free(table);
}

void test_exl3_mm(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x5eed);
    /* small odd shapes, odd row counts, a padded row stride, a bias */
    const int odd[][2] = {{128, 384}, {384, 128}, {640, 256}};
    const int odd_rows[] = {1, 3, 5, 13};
    int v = 0;
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 4; i++, v++)
            matmul_vs_cpu(c, &r, odd[s][0], odd[s][1], 1 + v % 8, v % 3, odd_rows[i], v % 5 == 0, v % 2 ? 8 : 0);
    /* the model's shapes (K and codebook varied over the list) */
    const int real[][4] = {{5120, 2304, 2, 2}, {5120, 1152, 3, 1}, {2304, 5120, 2, 1}, {1152, 5120, 3, 2},
                           {1280, 32768, 4, 2}, {8192, 5120, 4, 1}, {5120, 64640, 6, 2}, {6144, 25600, 4, 0}};
    for (int s = 0; s < 8 && !c->small; s++)
        matmul_vs_cpu(c, &r, real[s][0], real[s][1], real[s][2], real[s][3], 1 + s % 3, 0, 0);
    int sm = c->small;
    /* row invariance for every bucket, against the CPU too */
    rlin L;
    rlin_make(&L, &r, 1280, 1024, 4, 2, 0, 0.1f);
    const int rows[] = {2, 3, 5, 8, 13, 16, 24, 32, 40, 64};
    for (int i = 0; i < 10; i++)
        invariance(c, &r, &L, rows[i], 1, 1);
    plans_agree(c, &r, &L, 13);
    rlin_free(&L);
    rlin_make(&L, &r, sm ? 640 : 2304, sm ? 768 : 5120, 3, 1, 0, 0.1f);
    plans_agree(c, &r, &L, 5);
    invariance(c, &r, &L, 16, 1, 1);
    /* prompt sizes */
    invariance(c, &r, &L, 200, 1, 13);
    rlin_free(&L);
    rlin_make(&L, &r, sm ? 256 : 1024, sm ? 384 : 2048, 2, 2, 0, 0.1f);
    invariance(c, &r, &L, 64, 1, 7);
    invariance(c, &r, &L, 1000, 1, 97);
    plans_agree(c, &r, &L, 200);
    rlin_free(&L);
    /* grouped */
    const int qa_kv[] = {1536, 512}, w13[] = {2304, 2304}, three[] = {256, 384, 128};
    grouped_vs_separate(c, &r, sm ? 640 : 5120, qa_kv, 2, 4, 2, 1);
    grouped_vs_separate(c, &r, sm ? 384 : 5120, w13, 2, 2, 1, 8);
    grouped_vs_separate(c, &r, 384, three, 3, 5, 0, 13);
    grouped_vs_separate(c, &r, 1024, three, 3, 3, 2, 40);
    /* block-diagonal: wo_a's 8 groups (4096 -> 1024 each) at decode and prompt rows (x' in its own launch,
     * fold), tiny's 4 and 16 small blocks */
    blockdiag_vs_separate(c, &r, sm ? 256 : 4096, sm ? 128 : 1024, 8, 4, 2, 1);
    blockdiag_vs_separate(c, &r, sm ? 256 : 4096, sm ? 128 : 1024, 8, 3, 1, 13);
    blockdiag_vs_separate(c, &r, sm ? 256 : 4096, sm ? 128 : 1024, 8, 4, 2, 200);
    blockdiag_vs_separate(c, &r, 256, 128, 4, 4, 2, 6);
    blockdiag_vs_separate(c, &r, 128, 128, 16, 2, 0, 70);
}

/* A random MoE table of nexp experts: W1, W3 k -> n (K_up), W2 n -> k (K_down). */
typedef struct {
    int nexp;
    rlin *w1, *w3, *w2;
    exl3_linear *c1, *c3, *c2;
    exl3_moe_experts E;
    CUdeviceptr table;
} rmoe;

static void rmoe_make(rmoe *M, dsk_rng *r, int nexp, int k, int n, int K_up, int K_down, int cb)
{
    M->nexp = nexp;
    M->w1 = xmalloc(sizeof(rlin) * nexp);
    M->w3 = xmalloc(sizeof(rlin) * nexp);
    M->w2 = xmalloc(sizeof(rlin) * nexp);
    M->c1 = xmalloc(sizeof(exl3_linear) * nexp);
    M->c3 = xmalloc(sizeof(exl3_linear) * nexp);
    M->c2 = xmalloc(sizeof(exl3_linear) * nexp);
    exl3_dev_linear *d1 = xmalloc(sizeof(exl3_dev_linear) * nexp), *d3 = xmalloc(sizeof(exl3_dev_linear) * nexp),
                    *d2 = xmalloc(sizeof(exl3_dev_linear) * nexp);
    for (int e = 0; e < nexp; e++) {
        rlin_make(&M->w1[e], r, k, n, K_up, cb, 0, 0.1f);
        rlin_make(&M->w3[e], r, k, n, K_up, cb, 0, 0.1f);
        rlin_make(&M->w2[e], r, n, k, K_down, cb, 0, 0.1f);
        M->c1[e] = M->w1[e].cpu, M->c3[e] = M->w3[e].cpu, M->c2[e] = M->w2[e].cpu;
        d1[e] = M->w1[e].dev, d3[e] = M->w3[e].dev, d2[e] = M->w2[e].dev;
    }
    M->table = dev_alloc((size_t)nexp * 3 * sizeof(exl3_desc));
    must(exl3_moe_experts_init(&M->E, d1, d3, d2, nexp, M->table), "exl3_moe_experts_init");
    free(d1);
    free(d3);
    free(d2);
}

static void rmoe_free(rmoe *M)
{
    for (int e = 0; e < M->nexp; e++) {
        rlin_free(&M->w1[e]);
        rlin_free(&M->w3[e]);
        rlin_free(&M->w2[e]);
    }
    dev_free(M->table);
    free(M->w1);
    free(M->w3);
    free(M->w2);
    free(M->c1);
    free(M->c3);
    free(M->c2);
}

/* Random routing: topk distinct ids per row from [0, id_range) (a small range makes rows share
 * experts), weights positive. */
static void rand_route(dsk_rng *r, int rows, int topk, int id_range, int32_t *route, float *w)
{
    for (int i = 0; i < rows; i++)
        for (int s = 0; s < topk; s++) {
            int32_t id;
            int dup;
            do {
                id = (int32_t)dsk_rng_below(r, (uint64_t)id_range);
                dup = 0;
                for (int t = 0; t < s; t++)
                    dup |= route[i * topk + t] == id;
            } while (dup);
            route[i * topk + s] = id;
            w[i * topk + s] = 0.05f + dsk_rng_f32(r) * 0.5f;
        }
}

/* y = routed MoE (+ shared expert, accumulated) for `rows` rows on the GPU, downloaded. */
static void run_moe(gpu_ctx *c, const rmoe *M, const rmoe *shared, CUdeviceptr dx, int rows, CUdeviceptr dr,
                    CUdeviceptr dw, int topk, int e_lo, CUdeviceptr dy, exl3_force f, float *y)
{
    int k = M->E.k;
    size_t need = exl3_ws_bytes_moe(&M->E, rows, topk);
    if (shared && exl3_ws_bytes_moe(&shared->E, rows, 1) > need)
        need = exl3_ws_bytes_moe(&shared->E, rows, 1);
    ws_need(c, need);
    must(cu.cuCtxSynchronize() != CUDA_SUCCESS, "cuCtxSynchronize");
    must(op_exl3_moe(c->k, c->s, &M->E, dx, k, rows, dr, dw, topk, e_lo, dy, k, 0, &ws, f), "op_exl3_moe");
    if (shared)
        must(op_exl3_moe(c->k, c->s, &shared->E, dx, k, rows, 0, 0, 1, 0, dy, k, 1, &ws, f), "op_exl3_moe shared");
    dev_sync(c);
    dev_download(y, dy, (size_t)rows * k * 4);
}

/* As the engine runs them: the shared expert's gate and up on a second stream (its own workspace) beside
 * the routed experts, its down after theirs on the first; y downloaded. */
static void run_moe_beside(gpu_ctx *c, const rmoe *M, const rmoe *shared, CUdeviceptr dx, int rows, CUdeviceptr dr,
                           CUdeviceptr dw, int topk, int e_lo, CUdeviceptr dy, float *y)
{
    int k = M->E.k;
    ws_need(c, exl3_ws_bytes_moe(&M->E, rows, topk));
    exl3_workspace ws2;
    CUstream s2;
    CUevent fork, join;
    must(exl3_workspace_alloc(&ws2, c->g, exl3_ws_bytes_moe(&shared->E, rows, 1)), "exl3_workspace_alloc");
    must(cu.cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
             cu.cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS ||
             cu.cuEventCreate(&join, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS,
         "a second stream and its events");
    must(cu.cuEventRecord(fork, c->s) != CUDA_SUCCESS || cu.cuStreamWaitEvent(s2, fork, 0) != CUDA_SUCCESS, "fork");
    must(op_exl3_moe_phase(c->k, s2, &shared->E, dx, k, rows, dy, k, 1, &ws2, EXL3_AUTO, EXL3_MOE_UP), "shared up");
    must(op_exl3_moe(c->k, c->s, &M->E, dx, k, rows, dr, dw, topk, e_lo, dy, k, 0, &ws, EXL3_AUTO), "op_exl3_moe");
    must(cu.cuEventRecord(join, s2) != CUDA_SUCCESS || cu.cuStreamWaitEvent(c->s, join, 0) != CUDA_SUCCESS, "join");
    must(op_exl3_moe_phase(c->k, c->s, &shared->E, dx, k, rows, dy, k, 1, &ws2, EXL3_AUTO, EXL3_MOE_DOWN),
         "shared down");
    dev_sync(c);
    dev_download(y, dy, (size_t)rows * k * 4);
    exl3_workspace_free(&ws2);
    cu.cuEventDestroy(fork);
    cu.cuEventDestroy(join);
    cu.cuStreamDestroy(s2);
}

/* One expert on one row with dense GPU launches (bf16 outputs: the MoE's rounding points, the same
 * canonical sum order): o = bf16(W2 bf16(w·silu(min(g,10))·clamp(u))), the SwiGLU on the CPU. */
static void composed_expert(gpu_ctx *c, const rmoe *M, int e, CUdeviceptr xrow, float w, float *o)
{
    int k = M->E.k, n = M->E.n;
    const exl3_dev_linear *l1[1] = {&M->w1[e].dev}, *l3[1] = {&M->w3[e].dev}, *l2[1] = {&M->w2[e].dev};
    uint16_t *g = xmalloc((size_t)n * 2), *u = xmalloc((size_t)n * 2), *h = xmalloc((size_t)n * 2),
             *ob = xmalloc((size_t)k * 2);
    CUdeviceptr dg = dev_alloc((size_t)n * 2), dh = dev_alloc((size_t)n * 2), dob = dev_alloc((size_t)k * 2);
    run_grouped(c, l1, 1, xrow, k, 1, dg, n, EXL3_OUT_BF16, EXL3_AUTO, g, (size_t)n * 2);
    run_grouped(c, l3, 1, xrow, k, 1, dg, n, EXL3_OUT_BF16, EXL3_AUTO, u, (size_t)n * 2);
    for (int i = 0; i < n; i++) {
        float gv = fminf(bf16_to_f32(g[i]), 10.0f), uv = fminf(fmaxf(bf16_to_f32(u[i]), -10.0f), 10.0f);
        h[i] = f32_to_bf16(w * ((gv / (1.0f + expf(-gv))) * uv));
    }
    cu.cuMemcpyHtoD(dh, h, (size_t)n * 2);
    run_grouped(c, l2, 1, dh, n, 1, dob, k, EXL3_OUT_BF16, EXL3_AUTO, ob, (size_t)k * 2);
    for (int i = 0; i < k; i++)
        o[i] = bf16_to_f32(ob[i]);
    dev_free(dg);
    dev_free(dh);
    dev_free(dob);
    free(g);
    free(u);
    free(h);
    free(ob);
}

/* The MoE output composed from dense launches, each row's experts added in ascending id. Returns the
 * number of rows whose bits differ from y (only a silu difference between the GPU's and the CPU's expf
 * can make one differ). */
static int composed_rows_differ(gpu_ctx *c, const rmoe *M, const rmoe *shared, CUdeviceptr dx, int rows,
                                const int32_t *route, const float *w, int topk, int e_lo, const float *y, double *rel)
{
    int k = M->E.k, differ = 0;
    float *acc = xmalloc((size_t)rows * k * 4), *o = xmalloc((size_t)k * 4);
    for (int i = 0; i < rows; i++) {
        float *a = acc + (size_t)i * k;
        memset(a, 0, (size_t)k * 4);
        for (int id = e_lo; id < e_lo + M->nexp; id++)
            for (int s = 0; s < topk; s++)
                if (route[i * topk + s] == id) {
                    composed_expert(c, M, id - e_lo, dx + (CUdeviceptr)i * k * 2, w[i * topk + s], o);
                    for (int j = 0; j < k; j++)
                        a[j] += o[j];
                }
        if (shared) {
            composed_expert(c, shared, 0, dx + (CUdeviceptr)i * k * 2, 1.0f, o);
            for (int j = 0; j < k; j++)
                a[j] += o[j];
        }
        differ += memcmp(a, y + (size_t)i * k, (size_t)k * 4) != 0;
    }
    *rel = rel_l2(y, acc, (size_t)rows * k);
    free(acc);
    free(o);
    return differ;
}

/* The fused MoE against (1) the CPU reference: relative L2 <= 2e-3, since every bf16 rounding point turns
 * the fp32 summation-order difference of a few elements into a whole bf16 ulp (2^-8); (2) the same
 * computation composed from dense GPU launches: bit-equal rows except where the GPU's expf differs from
 * the CPU's in the SwiGLU (at most a quarter of the rows, rounded up; a wrong order of the expert sum
 * would change nearly every row); (3) each row launched alone and other plans: bit-equal. */
static void moe_case(gpu_ctx *c, dsk_rng *r, const rmoe *M, const rmoe *shared, int rows, int topk, int id_range,
                     int e_lo, const char *label)
{
    int k = M->E.k;
    uint16_t *xb = xmalloc((size_t)rows * k * 2);
    float *xf = xmalloc((size_t)rows * k * 4), *y = xmalloc((size_t)rows * k * 4), *ref = xmalloc((size_t)rows * k * 4),
          *y1 = xmalloc((size_t)k * 4), *yo = xmalloc((size_t)rows * k * 4), *w = xmalloc((size_t)rows * topk * 4);
    int32_t *route = xmalloc((size_t)rows * topk * 4);
    rand_x(r, rows, k, k, xb, xf);
    rand_route(r, rows, topk, id_range, route, w);
    CUdeviceptr dx = dev_upload(xb, (size_t)rows * k * 2), dr = dev_upload(route, (size_t)rows * topk * 4),
                dw = dev_upload(w, (size_t)rows * topk * 4), dy = dev_alloc((size_t)rows * k * 4),
                d1 = dev_alloc((size_t)k * 4);
    /* garbage in y first: every row must be written */
    must(cu.cuMemsetD32(dy, 0x7fc00000u, (size_t)rows * k) != CUDA_SUCCESS, "cuMemsetD32");
    run_moe(c, M, shared, dx, rows, dr, dw, topk, e_lo, dy, EXL3_AUTO, y);
    if (exl3_moe_ref(M->c1, M->c3, M->c2, M->nexp, xf, rows, route, w, topk, e_lo, 0, ref) ||
        (shared && exl3_moe_ref(shared->c1, shared->c3, shared->c2, 1, xf, rows, NULL, NULL, 1, 0, 1, ref)))
        must(-1, "exl3_moe_ref");
    double e = rel_l2(y, ref, (size_t)rows * k);
    /* row invariance: each row alone; and the other plan (fold <-> split) */
    int bad = 0;
    for (int i = 0; i < rows; i++) {
        run_moe(c, M, shared, dx + (CUdeviceptr)i * k * 2, 1, dr + (CUdeviceptr)i * topk * 4,
                dw + (CUdeviceptr)i * topk * 4, topk, e_lo, d1, EXL3_AUTO, y1);
        bad += memcmp(y1, y + (size_t)i * k, (size_t)k * 4) != 0;
    }
    int plans_differ = 0;
    const exl3_force other[] = {{-1, -1, 1}, {-1, -1, 0}, {64, -1, 1}};
    for (int p = 0; p < 3; p++) {
        run_moe(c, M, shared, dx, rows, dr, dw, topk, e_lo, dy, other[p], yo);
        plans_differ += memcmp(yo, y, (size_t)rows * k * 4) != 0;
    }
    int beside = 0; /* the shared expert's gate and up on a second stream: the same bits */
    if (shared) {
        must(cu.cuMemsetD32(dy, 0x7fc00000u, (size_t)rows * k) != CUDA_SUCCESS, "cuMemsetD32");
        run_moe_beside(c, M, shared, dx, rows, dr, dw, topk, e_lo, dy, yo);
        beside = memcmp(yo, y, (size_t)rows * k * 4) != 0;
    }
    double crel;
    int cdiff = composed_rows_differ(c, M, shared, dx, rows, route, w, topk, e_lo, y, &crel);
    char shape[96];
    snprintf(shape, sizeof shape, "%s %d->%d->%d K%d/%d rows %d top%d", label, k, M->E.n, k, M->E.K_up, M->E.K_down,
             rows, topk);
    check(c, e <= 2e-3 && crel <= 1e-3 && cdiff <= (rows + 3) / 4 && bad == 0 && plans_differ == 0 && !beside,
          "exl3_moe", shape,
          "rel L2 %.2e vs CPU; vs dense launches %d rows differ, rel L2 %.1e; %d rows differ from the row alone; %d "
          "plans differ%s",
          e, cdiff, crel, bad, plans_differ,
          !shared ? "" : beside ? "; the shared expert beside on a second stream differs" : "; shared beside: same");
    dev_free(dx);
    dev_free(dr);
    dev_free(dw);
    dev_free(dy);
    dev_free(d1);
    free(xb);
    free(xf);
    free(y);
    free(ref);
    free(y1);
    free(yo);
    free(w);
    free(route);
}

/* The rows routed inside the plan's launch (op_exl3_moe_route) == op_moe_route then op_exl3_moe, bit for
 * bit: ids, weights and y. Gate logits random over E experts (E = 384 or 128: both routing variants) of
 * which the table holds M's (ids [e_lo, e_lo + nexp)); rows whose experts are all elsewhere get y = 0 in
 * both. */
static void route_plan_case(gpu_ctx *c, dsk_rng *r, const rmoe *M, int rows, int E, int topk, int e_lo)
{
    int k = M->E.k;
    uint16_t *xb = xmalloc((size_t)rows * k * 2);
    float *xf = xmalloc((size_t)rows * k * 4), *lg = xmalloc((size_t)rows * E * 4), *bias = xmalloc((size_t)E * 4);
    rand_x(r, rows, k, k, xb, xf);
    for (int i = 0; i < rows * E; i++)
        lg[i] = 2.0f * dsk_rng_normal(r);
    for (int e = 0; e < E; e++)
        bias[e] = 0.1f * dsk_rng_normal(r);
    size_t nb = (size_t)rows * topk * 4, yb = (size_t)rows * k * 4;
    CUdeviceptr dx = dev_upload(xb, (size_t)rows * k * 2), dl = dev_upload(lg, (size_t)rows * E * 4),
                db = dev_upload(bias, (size_t)E * 4), ids[2], w[2], y[2];
    ws_need(c, exl3_ws_bytes_moe(&M->E, rows, topk));
    for (int v = 0; v < 2; v++) {
        ids[v] = dev_alloc(nb), w[v] = dev_alloc(nb), y[v] = dev_alloc(yb);
        must(cu.cuMemsetD32(y[v], 0x7fc00000u, (size_t)rows * k) != CUDA_SUCCESS, "cuMemsetD32");
    }
    const float scale = 2.5f;
    must(op_moe_route(c->k, c->s, dl, E, db, rows, E, topk, scale, ids[0], w[0], 0), "op_moe_route");
    must(op_exl3_moe(c->k, c->s, &M->E, dx, k, rows, ids[0], w[0], topk, e_lo, y[0], k, 0, &ws, EXL3_AUTO),
         "op_exl3_moe");
    exl3_router rt = {dl, E, db, E, scale};
    must(op_exl3_moe_route(c->k, c->s, &M->E, dx, k, rows, &rt, ids[1], w[1], topk, e_lo, y[1], k, 0, &ws, EXL3_AUTO),
         "op_exl3_moe_route");
    dev_sync(c);
    int32_t *i0 = xmalloc(nb), *i1 = xmalloc(nb);
    float *w0 = xmalloc(nb), *w1 = xmalloc(nb), *y0 = xmalloc(yb), *y1 = xmalloc(yb);
    dev_download(i0, ids[0], nb), dev_download(i1, ids[1], nb);
    dev_download(w0, w[0], nb), dev_download(w1, w[1], nb);
    dev_download(y0, y[0], yb), dev_download(y1, y[1], yb);
    int local = 0;
    for (int i = 0; i < rows * topk; i++)
        local += i0[i] >= e_lo && i0[i] < e_lo + M->nexp;
    int same_ids = !memcmp(i0, i1, nb), same_w = !memcmp(w0, w1, nb), same_y = !memcmp(y0, y1, yb);
    char shape[96];
    snprintf(shape, sizeof shape, "routed in the plan: rows %d, top %d of %d, %d local slots", rows, topk, E, local);
    check(c, same_ids && same_w && same_y, "exl3_moe", shape,
          "== moe_route then the MoE: ids %s, weights %s, y %s", same_ids ? "equal" : "DIFFER",
          same_w ? "equal" : "DIFFER", same_y ? "equal" : "DIFFER");
    if (rows == 1) {
        int rc = op_exl3_moe_route(c->k, c->s, &M->E, dx, k, RULE_ROUTE_PLAN_ROWS + 1, &rt, ids[1], w[1], topk, e_lo,
                                   y[1], k, 0, &ws, EXL3_AUTO);
        check(c, rc != 0, "exl3_moe", "routed in the plan, too many rows", "refused: %s", rc ? dsk_err_msg() : "NO");
    }
    for (int v = 0; v < 2; v++)
        dev_free(ids[v]), dev_free(w[v]), dev_free(y[v]);
    dev_free(dx), dev_free(dl), dev_free(db);
    free(xb), free(xf), free(lg), free(bias), free(i0), free(i1), free(w0), free(w1), free(y0), free(y1);
}

void test_exl3_moe(gpu_ctx *c)
{
    dsk_rng r = fresh_rng(0x5eed);
    rmoe M, S;
    rmoe_make(&M, &r, 8, 256, 384, 3, 4, 1);
    rmoe_make(&S, &r, 1, 256, 384, 4, 4, 1);
    moe_case(c, &r, &M, NULL, 1, 3, 8, 0, "small");
    moe_case(c, &r, &M, &S, 3, 3, 8, 0, "small+shared");
    moe_case(c, &r, &M, &S, 13, 3, 8, 0, "small+shared");
    /* expert parallel: this table holds ids 4..11 of 16; some rows have no local expert */
    moe_case(c, &r, &M, NULL, 13, 2, 16, 4, "EP 8 of 16");
    moe_case(c, &r, &M, NULL, 40, 3, 8, 0, "small");
    rmoe_free(&M);
    rmoe_free(&S);
    /* the model's shape: experts 5120 -> 2304 -> 5120, 6 of 16 per row, plus the shared expert */
    int sm = c->small;
    rmoe_make(&M, &r, 16, sm ? 640 : 5120, sm ? 256 : 2304, 2, 3, 2);
    rmoe_make(&S, &r, 1, sm ? 640 : 5120, sm ? 256 : 2304, 4, 4, 2);
    moe_case(c, &r, &M, &S, 1, 6, 16, 0, "model");
    moe_case(c, &r, &M, &S, 8, 6, 16, 0, "model");
    /* routing in the plan's launch: 16 of 16 experts local (NPL 4), 16 of 384 (NPL 12: most slots
     * elsewhere), rows up to the rule's cap */
    const int rp_rows[] = {1, 2, 7, 16, 33, RULE_ROUTE_PLAN_ROWS};
    for (int i = 0; i < 6; i++) {
        route_plan_case(c, &r, &M, rp_rows[i], 16, 6, 0);
        route_plan_case(c, &r, &M, rp_rows[i], 384, 6, 0);
    }
    route_plan_case(c, &r, &M, 5, 128, 6, 100); /* the drafter's 128: ids 100..115 local */
    rmoe_free(&M);
    rmoe_free(&S);
    /* tensor-parallel halves: 5120 -> 1152 -> 5120, MCG */
    rmoe_make(&M, &r, 8, sm ? 384 : 5120, sm ? 128 : 1152, 2, 2, 1);
    moe_case(c, &r, &M, NULL, 5, 6, 8, 0, "TP half");
    rmoe_free(&M);
    exl3_workspace_free(&ws);
}
