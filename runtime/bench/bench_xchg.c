/* `dskit bench exchange --kit KIT`: the xchg family (the GPU ranks' exchanges through peer memory,
 * docs/ranks.md) between two ranks that are two streams of one process on one GPU, so both run at once as
 * ranks on two GPUs do (two processes on one GPU time-slice it instead). Per decode-sized payload: one
 * exchange inside a CUDA graph of 64, both ranks' graphs launched together, the time per exchange; beside
 * it, in the same run, a device-to-device copy of the same bytes inside a graph of 64 (the data movement
 * alone), the same exchange through NCCL as one GPU allows it (a one-rank communicator: its all-gather and
 * the combining launch, inside a graph of 64; NCCL refuses two ranks on one GPU) and the streaming-read
 * roofline of the GPU (a large copy). */
#include "kit/src/xchg_abi.cuh"
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "runtime/driver/nccl_api.h"
#include "runtime/launch/xchg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAP ((int64_t)1 << 21)
#define PER_GRAPH 64

/* Two ranks' exchange memory, each rank's descriptor naming both regions (one process: the pointers). */
static int sides_init(xchg_mem *s, const dsk_gpu *g)
{
    CUdeviceptr regions[2];
    for (int r = 0; r < 2; r++) {
        if (xchg_mem_alloc(&s[r], CAP, 2))
            return -1;
        regions[r] = s[r].region;
    }
    for (int r = 0; r < 2; r++)
        if (xchg_desc_write(&s[r], regions, 2, r, g->dev, 10.0))
            return -1;
    return 0;
}

/* A graph of PER_GRAPH launches of what `one` queues. */
static int capture(CUstream st, int (*one)(void *, CUstream), void *arg, CUgraphExec *out)
{
    CUgraph gr;
    CU_TRY(cu.cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    int rc = 0;
    for (int i = 0; i < PER_GRAPH && !rc; i++)
        rc = one(arg, st);
    CUresult er = cu.cuStreamEndCapture(st, &gr);
    if (rc || er != CUDA_SUCCESS)
        return rc ? -1 : dsk_cu_fail(er, "cuStreamEndCapture");
    er = cu.cuGraphInstantiateWithFlags(out, gr, 0);
    cu.cuGraphDestroy(gr);
    return er == CUDA_SUCCESS ? 0 : dsk_cu_fail(er, "cuGraphInstantiateWithFlags");
}

typedef struct {
    const kit *k;
    CUdeviceptr desc, mine, out;
    int64_t n;
    int rows, cols, gather;
} xarg;

static int one_xchg(void *p, CUstream st)
{
    xarg *a = p;
    return a->gather ? op_xchg_gather(a->k, st, a->desc, CAP, a->mine, a->out, a->rows, a->cols)
                     : op_xchg_sum(a->k, st, a->desc, CAP, a->mine, a->out, a->n);
}

typedef struct {
    CUdeviceptr dst, src;
    size_t bytes;
} carg;

typedef struct {
    const kit *k;
    ncclComm_t comm;
    CUdeviceptr desc, mine, region, out;
    int64_t n;
    int rows, cols, gather;
} narg;

static int one_nccl(void *p, CUstream st)
{
    narg *a = p;
    ncclResult_t r = nccl.ncclAllGather((const void *)(uintptr_t)a->mine, (void *)(uintptr_t)a->region, (size_t)a->n,
                                        ncclFloat32, a->comm, st);
    if (dsk_nccl_settle(a->comm, r, 10.0, "ncclAllGather"))
        return -1;
    return a->gather ? op_xchg_place(a->k, st, a->desc, CAP, a->region, a->out, a->rows, a->cols)
                     : op_xchg_combine(a->k, st, a->desc, CAP, a->region, a->out, a->n);
}

static int one_copy(void *p, CUstream st)
{
    carg *a = p;
    CU_TRY(cu.cuMemcpyDtoDAsync(a->dst, a->src, a->bytes, st));
    return 0;
}

/* Median over reps of the seconds `n` graphs (on their streams) take, launched together. */
static int time_graphs(CUgraphExec *g, CUstream *st, int n, int reps, double *med)
{
    double t[64];
    reps = reps > 64 ? 64 : reps;
    for (int r = -2; r < reps; r++) {
        double t0 = dsk_now();
        for (int i = 0; i < n; i++)
            CU_TRY(cu.cuGraphLaunch(g[i], st[i]));
        for (int i = 0; i < n; i++)
            CU_TRY(cu.cuStreamSynchronize(st[i]));
        if (r >= 0)
            t[r] = dsk_now() - t0;
    }
    for (int i = 1; i < reps; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *med = t[reps / 2];
    return 0;
}

int bench_xchg_gpu(int argc, char **argv)
{
    const char *kit_path = NULL;
    long device = 0, reps = 21;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--kit")) {
            kit_path = argv[i + 1];
            continue;
        }
        if (!strcmp(argv[i], "--device") && !cli_parse_int(argv[i], argv[i + 1], 0, 63, &device))
            continue;
        if (!strcmp(argv[i], "--reps") && !cli_parse_int(argv[i], argv[i + 1], 3, 64, &reps))
            continue;
        fprintf(stderr, "dskit bench exchange: unknown option '%s' (--kit KIT [--device N] [--reps N])\n", argv[i]);
        return 2;
    }
    dsk_gpu g;
    kit *k = NULL;
    if (!kit_path || dsk_gpu_open((int)device, &g) || kit_open(kit_path, NULL, &k) || kit_load(k, &g)) {
        fprintf(stderr, "dskit bench exchange: %s\n", kit_path ? dsk_err_msg() : "--kit KIT is required");
        kit_close(k);
        return kit_path ? 1 : 2;
    }
    xchg_mem s[2], nm = {0};
    ncclComm_t comm = NULL;
    char nccl_why[256] = "";
    CUstream st[2];
    CUdeviceptr mine[2], out[2], big[2];
    size_t big_bytes = (size_t)1 << 30;
    int rc = 1;
    if (sides_init(s, &g) || cu.cuStreamCreate(&st[0], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS ||
        cu.cuStreamCreate(&st[1], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
        goto fail;
    for (int r = 0; r < 2; r++)
        if (cu.cuMemAlloc(&mine[r], (size_t)CAP * 4) != CUDA_SUCCESS ||
            cu.cuMemAlloc(&out[r], (size_t)CAP * 8) != CUDA_SUCCESS ||
            cu.cuMemsetD32(mine[r], 0x3f800000u, (size_t)CAP) != CUDA_SUCCESS ||
            cu.cuMemAlloc(&big[r], big_bytes) != CUDA_SUCCESS) {
            dsk_err("allocating the bench's buffers failed");
            goto fail;
        }
    /* NCCL as one GPU allows it: one rank; its all-gather lands in a region of its own */
    {
        ncclUniqueId id;
        ncclResult_t nr;
        if (dsk_nccl_open() || (nr = nccl.ncclGetUniqueId(&id)) != ncclSuccess ||
            dsk_nccl_comm_init(&comm, 1, &id, 0, 30.0) || xchg_mem_alloc(&nm, CAP, 1) ||
            xchg_desc_write(&nm, NULL, 1, 0, g.dev, 1.0)) {
            snprintf(nccl_why, sizeof nccl_why, "%s", dsk_err_msg());
            if (comm)
                nccl.ncclCommAbort(comm);
            comm = NULL;
        }
    }
    /* the roofline: a 1 GiB device-to-device copy reads and writes 2 GiB */
    double t0 = dsk_now();
    for (int i = 0; i < 5; i++)
        if (cu.cuMemcpyDtoDAsync(big[1], big[0], big_bytes, st[0]) != CUDA_SUCCESS) {
            dsk_err("the roofline copy failed");
            goto fail;
        }
    if (cu.cuStreamSynchronize(st[0]) != CUDA_SUCCESS)
        goto fail;
    double roof = 2.0 * 5 * (double)big_bytes / (dsk_now() - t0);
    printf("dskit bench exchange: 2 ranks as 2 streams of %s (one context, running at once), the xchg kernel "
           "(peer memory), graphs of %d exchanges, median of %ld; device copy roofline %.0f GB/s\n",
           g.name, PER_GRAPH, reps, roof / 1e9);
    if (!comm)
        printf("NCCL: not measured (%s)\n", nccl_why);
    printf("%-22s %10s %14s %14s %16s %12s %10s\n", "payload", "bytes/rank", "exchange us", "d2d copy us",
           "NCCL 1 rank us", "GB/s", "% roofline");
    struct {
        const char *what;
        int rows, cols, gather;
    } ps[] = {{"partial, 1 row", 1, 5120, 0},      {"partial, 2 rows", 2, 5120, 0},  {"partial, 4 rows", 4, 5120, 0},
              {"partial, 8 rows", 8, 5120, 0},     {"partial, 16 rows", 16, 5120, 0}, {"logits half, 1 row", 1, 64640, 1},
              {"logits half, 6 rows", 6, 64640, 1}, {"logits half, 16 rows", 16, 64640, 1}};
    for (size_t p = 0; p < sizeof ps / sizeof ps[0]; p++) {
        int64_t n = (int64_t)ps[p].rows * ps[p].cols;
        xarg xa[2];
        CUgraphExec gx[2] = {0, 0}, gc = 0;
        for (int r = 0; r < 2; r++) {
            xa[r] = (xarg){k, xchg_desc_ptr(&s[r]), mine[r], out[r], n, ps[p].rows, ps[p].cols, ps[p].gather};
            if (capture(st[r], one_xchg, &xa[r], &gx[r]))
                goto fail;
        }
        carg ca = {out[0], mine[0], (size_t)n * 4};
        double tx = 0, tc = 0, tn = -1;
        if (capture(st[0], one_copy, &ca, &gc) || time_graphs(gx, st, 2, (int)reps, &tx) ||
            time_graphs(&gc, st, 1, (int)reps, &tc))
            goto fail;
        if (comm) {
            narg na = {k, comm, xchg_desc_ptr(&nm), mine[0], nm.region, out[0], n, ps[p].rows, ps[p].cols, ps[p].gather};
            CUgraphExec gn = 0;
            if (capture(st[0], one_nccl, &na, &gn) || time_graphs(&gn, st, 1, (int)reps, &tn))
                goto fail;
            cu.cuGraphExecDestroy(gn);
        }
        unsigned status[2] = {1, 1};
        cu.cuMemcpyDtoH(&status[0], xchg_status_ptr(&s[0]), 4);
        cu.cuMemcpyDtoH(&status[1], xchg_status_ptr(&s[1]), 4);
        if (status[0] || status[1]) {
            dsk_err("an exchange waited past its bound (status %u %u)", status[0], status[1]);
            goto fail;
        }
        double per = tx / PER_GRAPH, bytes = (double)n * 4;
        /* bytes a rank's launch moves: its part read twice, written to the other as 8-byte words, the
         * other's words read, the result written (twice as wide for a gather) */
        double gbs = bytes * (ps[p].gather ? 8 : 7) / per / 1e9;
        char nb[32] = "-";
        if (tn >= 0)
            snprintf(nb, sizeof nb, "%.2f", tn / PER_GRAPH * 1e6);
        printf("%-22s %10.0f %14.2f %14.2f %16s %12.1f %9.1f%%\n", ps[p].what, bytes, per * 1e6, tc / PER_GRAPH * 1e6,
               nb, gbs, 100.0 * gbs * 1e9 / roof);
        for (int r = 0; r < 2; r++)
            cu.cuGraphExecDestroy(gx[r]);
        cu.cuGraphExecDestroy(gc);
    }
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "dskit bench exchange: %s\n", dsk_err_msg());
    if (comm)
        nccl.ncclCommDestroy(comm);
    xchg_mem_free(&nm);
    kit_close(k);
    return rc;
}
