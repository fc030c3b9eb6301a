/* `dskit bench exl3 KIT`: the EXL3 kernels on the model's shapes (issue 5, docs/exl3-kernels.md).
 * Table 1, the decode matmul: shape × K {2,3,4,6} × codebook {MCG, MUL1} × rows {1,2,4,8,16}: time per call
 * eager and replayed in a CUDA graph (how decode runs; the rates use it), decoded weights/s, GB/s read, % of the streaming-read roofline measured in the same run, time per
 * row. Table 2, the MoE form: 6 of 384 experts + the shared expert at 1 and 8 rows (and the TP2
 * half-width experts). Table 3, the prompt form. Weights are random (any trellis bits are a valid
 * encoding) and rotate over copies so that no launch reads them from L2. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "runtime/launch/exl3.h"
#include "runtime/launch/gpu_time.h"
#include "runtime/launch/stream_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RAND_BYTES ((size_t)64 << 20)
#define ROTATE_BYTES ((size_t)192 << 20) /* > 50 MB of L2 several times over */

typedef struct {
    const kit *k;
    CUstream s;
    dsk_gpu g;
    exl3_workspace ws;
    unsigned char *rnd; /* RAND_BYTES of random host bytes */
    double roof;        /* streaming read, GB/s */
} bench;

/* Fill device memory with the random bytes (repeated). */
static int fill_random(bench *b, CUdeviceptr d, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += RAND_BYTES) {
        size_t n = bytes - off < RAND_BYTES ? bytes - off : RAND_BYTES;
        CU_TRY(cu.cuMemcpyHtoD(d + off, b->rnd, n));
    }
    /* the copies run on the legacy stream, which does not order with the benchmark's stream */
    CU_TRY(cu.cuCtxSynchronize());
    return 0;
}

static int ws_need(bench *b, size_t bytes)
{
    if (b->ws.bytes >= bytes)
        return 0;
    CU_TRY(cu.cuStreamSynchronize(b->s));
    exl3_workspace_free(&b->ws);
    return exl3_workspace_alloc(&b->ws, &b->g, bytes);
}

/* Random fp16 scales in ±[0.05, 0.15] for suh/svh. */
static int fill_scales(CUdeviceptr d, int n, dsk_rng *r)
{
    uint16_t *h = dsk_malloc((size_t)n * 2);
    if (!h)
        return -1;
    for (int i = 0; i < n; i++)
        h[i] = f32_to_f16((dsk_rng_u64(r) & 1 ? -0.1f : 0.1f) * (0.5f + dsk_rng_f32(r)));
    CUresult rc = cu.cuMemcpyHtoD(d, h, (size_t)n * 2);
    free(h);
    if (rc == CUDA_SUCCESS)
        rc = cu.cuCtxSynchronize();
    return rc == CUDA_SUCCESS ? 0 : dsk_cu_fail(rc, "cuMemcpyHtoD");
}

static int fill_x(CUdeviceptr d, size_t n, dsk_rng *r)
{
    uint16_t *h = dsk_malloc(n * 2);
    if (!h)
        return -1;
    for (size_t i = 0; i < n; i++)
        h[i] = f32_to_bf16(dsk_rng_normal(r));
    CUresult rc = cu.cuMemcpyHtoD(d, h, n * 2);
    free(h);
    if (rc == CUDA_SUCCESS)
        rc = cu.cuCtxSynchronize();
    return rc == CUDA_SUCCESS ? 0 : dsk_cu_fail(rc, "cuMemcpyHtoD");
}

/* A batch length that makes one timed batch last about 3 ms. */
static int batch_for(CUstream s, gpu_launch_fn fn, void *ctx)
{
    double t0 = gpu_time_us(s, 2, 1, fn, ctx);
    if (t0 < 0)
        return -1;
    int batch = t0 > 1500 ? 2 : (int)(3000 / (t0 > 1 ? t0 : 1));
    return batch > 400 ? 400 : batch;
}

static double time_us(CUstream s, gpu_launch_fn fn, void *ctx)
{
    int batch = batch_for(s, fn, ctx);
    return batch < 0 ? -1 : gpu_time_us(s, batch, 5, fn, ctx);
}

/* GPU time per call from a replayed CUDA graph of the batch (how decode rounds launch). */
static double graph_us(CUstream s, gpu_launch_fn fn, void *ctx)
{
    int batch = batch_for(s, fn, ctx);
    return batch < 0 ? -1 : gpu_time_graph_us(s, batch, 5, fn, ctx);
}

typedef struct {
    bench *b;
    exl3_dev_linear *L; /* copies */
    int ncopy, next;
    CUdeviceptr x, y;
    int rows, out_kind;
} mm_ctx;

static int launch_mm(void *p)
{
    mm_ctx *c = p;
    const exl3_dev_linear *L = &c->L[c->next];
    c->next = (c->next + 1) % c->ncopy;
    return op_exl3_matmul(c->b->k, c->b->s, L, c->x, L->k, c->rows, c->y, L->n, c->out_kind, &c->b->ws);
}

typedef struct {
    bench *b;
    CUdeviceptr src, out;
    uint64_t bytes;
    int blocks;
} sr_ctx;

static int launch_sr(void *p)
{
    sr_ctx *c = p;
    return op_stream_read(c->b->k, c->b->s, c->src, c->bytes, c->out, c->blocks);
}

static int roofline(bench *b)
{
    const uint64_t bytes = 2ull << 30;
    CUdeviceptr big, out;
    CU_TRY(cu.cuMemAlloc(&big, bytes));
    if (cu.cuMemAlloc(&out, 1 << 20) != CUDA_SUCCESS) {
        cu.cuMemFree(big);
        return dsk_err("cannot allocate the roofline buffers");
    }
    int rc = fill_random(b, big, bytes);
    b->roof = 0;
    int grids[] = {b->g.sms * 2, b->g.sms * 4, b->g.sms * 8};
    for (int i = 0; i < 3 && !rc; i++) {
        sr_ctx c = {b, big, out, bytes, grids[i]};
        double us = gpu_time_us(b->s, 3, 5, launch_sr, &c);
        if (us < 0)
            rc = -1;
        else if (bytes / (us * 1e-6) / 1e9 > b->roof)
            b->roof = bytes / (us * 1e-6) / 1e9;
    }
    cu.cuMemFree(big);
    cu.cuMemFree(out);
    return rc;
}

/* Copies of one k × n matrix at K bits rotating through ROTATE_BYTES, their descriptors set for `cb`. */
typedef struct {
    int k, n, K, ncopy;
    CUdeviceptr tr, suh, svh, desc;
    exl3_dev_linear *L;
} mat_set;

static int mat_set_make(bench *b, mat_set *m, int k, int n, int K, dsk_rng *r)
{
    memset(m, 0, sizeof *m);
    size_t bytes = (size_t)k * (size_t)n * (size_t)K / 8;
    m->k = k, m->n = n, m->K = K;
    m->ncopy = (int)((ROTATE_BYTES + bytes - 1) / bytes);
    m->ncopy = m->ncopy < 1 ? 1 : m->ncopy > 64 ? 64 : m->ncopy;
    m->L = dsk_calloc((size_t)m->ncopy, sizeof(exl3_dev_linear));
    if (!m->L)
        return -1;
    CU_TRY(cu.cuMemAlloc(&m->tr, bytes * (size_t)m->ncopy));
    CU_TRY(cu.cuMemAlloc(&m->suh, (size_t)k * 2));
    CU_TRY(cu.cuMemAlloc(&m->svh, (size_t)n * 2));
    CU_TRY(cu.cuMemAlloc(&m->desc, (size_t)m->ncopy * 64));
    if (fill_random(b, m->tr, bytes * (size_t)m->ncopy) || fill_scales(m->suh, k, r) || fill_scales(m->svh, n, r))
        return -1;
    return 0;
}

static int mat_set_codebook(mat_set *m, int cb)
{
    size_t bytes = (size_t)m->k * (size_t)m->n * (size_t)m->K / 8;
    for (int i = 0; i < m->ncopy; i++)
        if (exl3_dev_linear_init(&m->L[i], m->k, m->n, m->K, cb, m->tr + bytes * (size_t)i, m->suh, m->svh, 0,
                                 m->desc + 64 * (CUdeviceptr)i))
            return -1;
    return 0;
}

static void mat_set_free(mat_set *m)
{
    if (m->tr)
        cu.cuMemFree(m->tr);
    if (m->suh)
        cu.cuMemFree(m->suh);
    if (m->svh)
        cu.cuMemFree(m->svh);
    if (m->desc)
        cu.cuMemFree(m->desc);
    free(m->L);
    memset(m, 0, sizeof *m);
}

static const int shapes[][2] = {{5120, 2304}, {5120, 1152}, {2304, 5120}, {1152, 5120},
                                {1280, 32768}, {8192, 5120}, {5120, 64640}, {6144, 25600}};
static const char *const shape_names[] = {"expert w1/w3", "w1/w3 TP2", "expert w2", "w2 TP2",
                                          "wq_b",         "wo_b",      "head",      "Engram wkv"};

static int decode_table(bench *b, int quick)
{
    dsk_rng r;
    dsk_rng_seed(&r, 7);
    const int Ks[] = {2, 3, 4, 6}, cbs[] = {1, 2}, rows[] = {1, 2, 4, 8, 16};
    int nK = quick ? 2 : 4;
    printf("\n%-13s %-12s %2s %-5s %4s %10s %10s %9s %9s %7s %10s  %s\n", "matrix", "k -> n", "K", "cb", "rows",
           "eager us", "graph us", "Tw/s", "GB/s", "roof", "us/row", "plan (bucket, groups)");
    CUdeviceptr x, y;
    CU_TRY(cu.cuMemAlloc(&x, (size_t)16 * 8192 * 2));
    CU_TRY(cu.cuMemAlloc(&y, (size_t)16 * 65536 * 4));
    if (fill_x(x, (size_t)16 * 8192, &r))
        return -1;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ki = 0; ki < nK; ki++) {
            int k = shapes[s][0], n = shapes[s][1], K = Ks[ki];
            mat_set m;
            if (mat_set_make(b, &m, k, n, K, &r))
                return -1;
            const exl3_dev_linear *one[1] = {&m.L[0]};
            for (int c = 0; c < 2; c++) {
                if (mat_set_codebook(&m, cbs[c]) || ws_need(b, exl3_ws_bytes_matmul(one, 1, 16)))
                    return -1;
                for (int ri = 0; ri < 5; ri++) {
                    mm_ctx ctx = {b, m.L, m.ncopy, 0, x, y, rows[ri], EXL3_OUT_F32};
                    double eus = time_us(b->s, launch_mm, &ctx), us = graph_us(b->s, launch_mm, &ctx);
                    if (eus < 0 || us < 0)
                        return -1;
                    double w = (double)k * n, bytes = w * K / 8 + 2.0 * (k + n) + 2.0 * rows[ri] * k + 4.0 * rows[ri] * n;
                    double gbs = bytes / (us * 1e-6) / 1e9;
                    exl3_mm_plan p = exl3_plan_matmul(one, 1, rows[ri], b->g.sms);
                    char kn[24];
                    snprintf(kn, sizeof kn, "%d->%d", k, n);
                    printf("%-13s %-12s %2d %-5s %4d %10.2f %10.2f %9.3f %9.1f %6.1f%% %10.2f  M%d %s, %d x %d\n",
                           shape_names[s], kn, K, cbs[c] == 1 ? "MCG" : "MUL1", rows[ri], eus, us, w / (us * 1e-6) / 1e12,
                           gbs, 100.0 * gbs / b->roof, us / rows[ri], p.bucket, p.fold ? "fold" : "split",
                           p.fold ? 1 : m.L[0].groups, n / 128);
                    fflush(stdout);
                }
            }
            mat_set_free(&m);
        }
    cu.cuMemFree(x);
    cu.cuMemFree(y);
    return 0;
}

/* One MoE layer on the device: nexp experts (W1, W3: dim -> inter at K_up; W2: inter -> dim at K_down)
 * and a shared expert (K 4), all MUL1. */
typedef struct {
    int nexp, dim, inter;
    CUdeviceptr tr, scales, descs, table, stable;
    exl3_moe_experts E, S;
} moe_layer;

static int moe_make(bench *b, moe_layer *M, int nexp, int dim, int inter, int K_up, int K_down, dsk_rng *r)
{
    memset(M, 0, sizeof *M);
    M->nexp = nexp, M->dim = dim, M->inter = inter;
    size_t wu = (size_t)dim * inter * K_up / 8, wd = (size_t)dim * inter * K_down / 8, ws = (size_t)dim * inter * 4 / 8;
    size_t per = 2 * wu + wd, total = per * (size_t)nexp + 3 * ws;
    CU_TRY(cu.cuMemAlloc(&M->tr, total));
    CU_TRY(cu.cuMemAlloc(&M->scales, (size_t)(dim + inter) * 2));
    CU_TRY(cu.cuMemAlloc(&M->descs, (size_t)(nexp + 1) * 3 * 64));
    CU_TRY(cu.cuMemAlloc(&M->table, (size_t)nexp * 3 * 64));
    CU_TRY(cu.cuMemAlloc(&M->stable, 3 * 64));
    /* every matrix shares one suh/svh pair (scales do not change the cost) */
    if (fill_random(b, M->tr, total) || fill_scales(M->scales, dim + inter, r))
        return -1;
    CUdeviceptr sd = M->scales, si = M->scales + (CUdeviceptr)dim * 2;
    exl3_dev_linear *w1 = dsk_calloc((size_t)nexp + 1, sizeof *w1), *w3 = dsk_calloc((size_t)nexp + 1, sizeof *w3),
                    *w2 = dsk_calloc((size_t)nexp + 1, sizeof *w2);
    int rc = -1;
    if (!w1 || !w3 || !w2)
        goto out;
    for (int e = 0; e <= nexp; e++) {
        int shared = e == nexp, ku = shared ? 4 : K_up, kd = shared ? 4 : K_down;
        CUdeviceptr base = M->tr + (shared ? per * (size_t)nexp : per * (size_t)e);
        size_t bu = shared ? ws : wu;
        CUdeviceptr dd = M->descs + (CUdeviceptr)e * 3 * 64;
        if (exl3_dev_linear_init(&w1[e], dim, inter, ku, 2, base, sd, si, 0, dd) ||
            exl3_dev_linear_init(&w3[e], dim, inter, ku, 2, base + bu, sd, si, 0, dd + 64) ||
            exl3_dev_linear_init(&w2[e], inter, dim, kd, 2, base + 2 * bu, si, sd, 0, dd + 128))
            goto out;
    }
    if (exl3_moe_experts_init(&M->E, w1, w3, w2, nexp, M->table) ||
        exl3_moe_experts_init(&M->S, w1 + nexp, w3 + nexp, w2 + nexp, 1, M->stable))
        goto out;
    rc = 0;
out:
    free(w1);
    free(w3);
    free(w2);
    return rc;
}

static void moe_free(moe_layer *M)
{
    CUdeviceptr p[] = {M->tr, M->scales, M->descs, M->table, M->stable};
    for (int i = 0; i < 5; i++)
        if (p[i])
            cu.cuMemFree(p[i]);
    memset(M, 0, sizeof *M);
}

typedef struct {
    bench *b;
    moe_layer *M;
    CUdeviceptr x, y, route, w;
    int rows, topk, with_shared;
} moe_ctx;

static int launch_moe(void *p)
{
    moe_ctx *c = p;
    const kit *k = c->b->k;
    if (op_exl3_moe(k, c->b->s, &c->M->E, c->x, c->M->dim, c->rows, c->route, c->w, c->topk, 0, c->y, c->M->dim, 0,
                    &c->b->ws, EXL3_AUTO))
        return -1;
    if (c->with_shared &&
        op_exl3_moe(k, c->b->s, &c->M->S, c->x, c->M->dim, c->rows, 0, 0, 1, 0, c->y, c->M->dim, 1, &c->b->ws, EXL3_AUTO))
        return -1;
    return 0;
}

static int moe_table(bench *b, int quick)
{
    dsk_rng r;
    dsk_rng_seed(&r, 11);
    printf("\nMoE: top-6 of 384 experts (W1, W3 K2, W2 K3, MUL1) + shared expert (K4), random routing\n");
    printf("%-22s %4s %7s %10s %10s %9s %9s %7s %10s\n", "experts", "rows", "unique", "eager us", "graph us", "Tw/s",
           "GB/s", "roof", "us/row");
    const int inter[] = {2304, 1152};
    const char *names[] = {"5120->2304->5120", "5120->1152->5120 TP2"};
    const int rowset[] = {1, 8, 16};
    for (int v = 0; v < (quick ? 1 : 2); v++) {
        moe_layer M;
        if (moe_make(b, &M, 384, 5120, inter[v], 2, 3, &r))
            return -1;
        for (int ri = 0; ri < 3; ri++) {
            int rows = rowset[ri], topk = 6;
            int32_t route[16 * 6];
            float wts[16 * 6];
            int used[384] = {0}, unique = 0;
            for (int i = 0; i < rows; i++)
                for (int s = 0; s < topk; s++) {
                    int32_t id;
                    int dup;
                    do {
                        id = (int32_t)dsk_rng_below(&r, 384);
                        dup = 0;
                        for (int t = 0; t < s; t++)
                            dup |= route[i * topk + t] == id;
                    } while (dup);
                    route[i * topk + s] = id;
                    wts[i * topk + s] = 0.25f;
                    unique += !used[id];
                    used[id] = 1;
                }
            CUdeviceptr x, y, dr, dw;
            CU_TRY(cu.cuMemAlloc(&x, (size_t)rows * 5120 * 2));
            CU_TRY(cu.cuMemAlloc(&y, (size_t)rows * 5120 * 4));
            CU_TRY(cu.cuMemAlloc(&dr, sizeof route));
            CU_TRY(cu.cuMemAlloc(&dw, sizeof wts));
            CU_TRY(cu.cuMemcpyHtoD(dr, route, sizeof route));
            CU_TRY(cu.cuMemcpyHtoD(dw, wts, sizeof wts));
            CU_TRY(cu.cuCtxSynchronize());
            size_t need = exl3_ws_bytes_moe(&M.E, rows, topk);
            if (fill_x(x, (size_t)rows * 5120, &r) || ws_need(b, need))
                return -1;
            for (int shared = 0; shared < 2; shared++) {
                moe_ctx c = {b, &M, x, y, dr, dw, rows, topk, shared};
                double eus = time_us(b->s, launch_moe, &c), us = graph_us(b->s, launch_moe, &c);
                if (eus < 0 || us < 0)
                    return -1;
                int mats = unique + shared;
                double w = 3.0 * mats * 5120.0 * inter[v];
                double bytes = (double)unique * 5120.0 * inter[v] * (2 * 2 + 3) / 8 + shared * 3.0 * 5120 * inter[v] * 4 / 8;
                double gbs = bytes / (us * 1e-6) / 1e9;
                printf("%-22s %4d %7d %10.2f %10.2f %9.3f %9.1f %6.1f%% %10.2f%s\n", names[v], rows, unique, eus, us,
                       w / (us * 1e-6) / 1e12, gbs, 100.0 * gbs / b->roof, us / rows, shared ? "  + shared" : "");
                fflush(stdout);
            }
            cu.cuMemFree(x);
            cu.cuMemFree(y);
            cu.cuMemFree(dr);
            cu.cuMemFree(dw);
        }
        moe_free(&M);
    }
    return 0;
}

static int prompt_table(bench *b)
{
    dsk_rng r;
    dsk_rng_seed(&r, 13);
    printf("\nprompt form (K4 MUL1): many rows on tensor cores, decoded tiles shared by 64-row tiles\n");
    printf("%-13s %-12s %5s %10s %9s %10s  %s\n", "matrix", "k -> n", "rows", "time us", "TFLOP/s", "us/row", "plan");
    const int sidx[] = {0, 5, 4}, rows[] = {64, 256, 1024};
    CUdeviceptr x, y;
    CU_TRY(cu.cuMemAlloc(&x, (size_t)1024 * 8192 * 2));
    CU_TRY(cu.cuMemAlloc(&y, (size_t)1024 * 32768 * 4));
    if (fill_x(x, (size_t)1024 * 8192, &r))
        return -1;
    for (int i = 0; i < 3; i++) {
        int k = shapes[sidx[i]][0], n = shapes[sidx[i]][1];
        mat_set m;
        if (mat_set_make(b, &m, k, n, 4, &r) || mat_set_codebook(&m, 2))
            return -1;
        const exl3_dev_linear *one[1] = {&m.L[0]};
        for (int ri = 0; ri < 3; ri++) {
            if (ws_need(b, exl3_ws_bytes_matmul(one, 1, rows[ri])))
                return -1;
            mm_ctx ctx = {b, m.L, m.ncopy, 0, x, y, rows[ri], EXL3_OUT_F32};
            double us = time_us(b->s, launch_mm, &ctx);
            if (us < 0)
                return -1;
            exl3_mm_plan p = exl3_plan_matmul(one, 1, rows[ri], b->g.sms);
            char kn[24];
            snprintf(kn, sizeof kn, "%d->%d", k, n);
            printf("%-13s %-12s %5d %10.2f %9.1f %10.3f  M%d%s %s\n", shape_names[sidx[i]], kn, rows[ri], us,
                   2.0 * rows[ri] * k * n / (us * 1e-6) / 1e12, us / rows[ri], p.bucket, p.xf ? " xf" : "",
                   p.fold ? "fold" : "split");
            fflush(stdout);
        }
        mat_set_free(&m);
    }
    cu.cuMemFree(x);
    cu.cuMemFree(y);
    return 0;
}

/* --split-sweep: the decode time of each real shape as the k split varies (the canonical split is
 * rule_exl3_split; this measures the alternatives, to choose the rule). */
static int split_sweep(bench *b)
{
    dsk_rng r;
    dsk_rng_seed(&r, 11);
    const int Ks[] = {2, 4}, rows[] = {1, 8}, cand[] = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 64};
    CUdeviceptr x, y;
    CU_TRY(cu.cuMemAlloc(&x, (size_t)16 * 8192 * 2));
    CU_TRY(cu.cuMemAlloc(&y, (size_t)16 * 65536 * 4));
    if (fill_x(x, (size_t)16 * 8192, &r))
        return -1;
    printf("\nk split sweep (MUL1): groups G of qb 128-blocks each; CTAs = G x column blocks\n");
    printf("%-13s %-12s %2s %4s %4s %4s %6s %10s %10s %9s %s\n", "matrix", "k -> n", "K", "rows", "G", "qb", "CTAs",
           "eager us", "graph us", "Tw/s", "canonical");
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
        for (int ki = 0; ki < 2; ki++) {
            int k = shapes[sh][0], n = shapes[sh][1], K = Ks[ki], kb = k / 128;
            mat_set m;
            if (mat_set_make(b, &m, k, n, K, &r) || mat_set_codebook(&m, 2))
                return -1;
            int canon_qb = m.L[0].qb, last_qb = -1;
            for (size_t ci = 0; ci < sizeof cand / sizeof cand[0]; ci++) {
                int qb = (kb + cand[ci] - 1) / cand[ci];
                if (cand[ci] > kb || qb == last_qb)
                    continue;
                last_qb = qb;
                for (int i = 0; i < m.ncopy; i++) {
                    exl3_desc d;
                    m.L[i].qb = qb;
                    m.L[i].groups = (kb + qb - 1) / qb;
                    exl3_desc_fill(&m.L[i], &d);
                    CU_TRY(cu.cuMemcpyHtoD(m.L[i].desc, &d, sizeof d));
                }
                CU_TRY(cu.cuCtxSynchronize());
                const exl3_dev_linear *one[1] = {&m.L[0]};
                if (ws_need(b, exl3_ws_bytes_matmul(one, 1, 16)))
                    return -1;
                for (int ri = 0; ri < 2; ri++) {
                    mm_ctx ctx = {b, m.L, m.ncopy, 0, x, y, rows[ri], EXL3_OUT_F32};
                    double us = time_us(b->s, launch_mm, &ctx), gus = graph_us(b->s, launch_mm, &ctx);
                    if (us < 0 || gus < 0)
                        return -1;
                    char kn[24];
                    snprintf(kn, sizeof kn, "%d->%d", k, n);
                    printf("%-13s %-12s %2d %4d %4d %4d %6d %10.2f %10.2f %9.3f %s\n", shape_names[sh], kn, K,
                           rows[ri], m.L[0].groups, qb, m.L[0].groups * (n / 128), us, gus,
                           (double)k * n / (gus * 1e-6) / 1e12, qb == canon_qb ? "*" : "");
                    fflush(stdout);
                }
            }
            mat_set_free(&m);
        }
    cu.cuMemFree(x);
    cu.cuMemFree(y);
    return 0;
}

int bench_exl3(int argc, char **argv)
{
    int quick = 0, sweep = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--split-sweep"))
            sweep = 1;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "usage: dskit bench exl3 KIT [--quick | --split-sweep]\n");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: dskit bench exl3 KIT [--quick | --split-sweep]\n");
        return 2;
    }
    bench b;
    memset(&b, 0, sizeof b);
    kit *k = NULL;
    if (dsk_gpu_open(0, &b.g) || kit_open(path, NULL, &k) || kit_load(k, &b.g)) {
        fprintf(stderr, "dskit bench exl3: %s\n", dsk_err_msg());
        return 2;
    }
    b.k = k;
    int rc = 1;
    double t0 = dsk_now();
    b.rnd = dsk_malloc(RAND_BYTES);
    if (!b.rnd || cu.cuStreamCreate(&b.s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        goto done;
    dsk_rng r;
    dsk_rng_seed(&r, 1);
    for (size_t i = 0; i < RAND_BYTES; i += 8) {
        uint64_t v = dsk_rng_u64(&r);
        memcpy(b.rnd + i, &v, 8);
    }
    if (roofline(&b))
        goto done;
    printf("EXL3 kernels on %s (%d SMs); streaming-read roofline %.1f GB/s (same run)\n", b.g.name, b.g.sms, b.roof);
    printf("Tw/s = decoded weights per second / 1e12; GB/s = trellis + suh/svh + x + y bytes / time\n");
    fflush(stdout);
    if (sweep ? split_sweep(&b) : (decode_table(&b, quick) || moe_table(&b, quick) || (!quick && prompt_table(&b))))
        goto done;
    printf("\ntotal %.1f s\n", dsk_now() - t0);
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "dskit bench exl3: %s\n", dsk_err_msg());
    exl3_workspace_free(&b.ws);
    if (b.s)
        cu.cuStreamDestroy(b.s);
    free(b.rnd);
    kit_close(k);
    dsk_gpu_close(&b.g);
    return rc;
}
