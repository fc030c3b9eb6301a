/* GPU checks of the xchg family against runtime/ref/xchg.h: two ranks in this process (two streams on
 * GPU 0, each with its own exchange region and descriptor, the other's region by its pointer) exchange
 * fresh random parts, sums and gathers of decode and prompt sizes one after another (the counters and
 * the alternating slots carry across them); each rank's result bit for bit the reference's; then a rank
 * whose peer never comes stops at its bound and names it; bad arguments refused. Skipped on the kernel
 * emulator, which runs one grid at a time: a rank's launch waits for the other's. */
#include "kit/src/xchg_abi.cuh"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/driver/nccl_api.h"
#include "runtime/launch/xchg.h"
#include "runtime/ref/xchg.h"
#include "tests/gpu/gpu_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAP ((int64_t)1 << 20)

/* Two ranks' exchange memory, each rank's descriptor naming both regions (one process: the pointers). */
static void sides(gpu_ctx *c, xchg_mem *s, int tp, double timeout_s)
{
    CUdeviceptr regions[XCHG_MAX_RANKS];
    for (int r = 0; r < tp; r++) {
        must(xchg_mem_alloc(&s[r], CAP, tp), "a rank's exchange memory");
        regions[r] = s[r].region;
    }
    for (int r = 0; r < tp; r++)
        must(xchg_desc_write(&s[r], regions, tp, r, c->g->dev, timeout_s), "a rank's descriptor");
}

static void free_sides(xchg_mem *s, int tp)
{
    for (int r = 0; r < tp; r++)
        xchg_mem_free(&s[r]);
}

static void cu_ok(CUresult r, const char *what)
{
    must(r != CUDA_SUCCESS ? dsk_cu_fail(r, what) : 0, what);
}

static void fill_f32(dsk_rng *r, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)dsk_rng_below(r, 1u << 24) / (1 << 23) - 1.0) * 3.0f;
}

void test_xchg(gpu_ctx *c)
{
    if (!strncmp(c->g->name, "dskit emulator", 14)) {
        printf("xchg: skipped (the emulator runs one grid at a time: two ranks' launches cannot meet)\n");
        return;
    }
    enum { TP = 2 };
    xchg_mem s[TP];
    sides(c, s, TP, 10.0);
    CUstream st[TP];
    st[0] = c->s;
    cu_ok(cu.cuStreamCreate(&st[1], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    dsk_rng r = fresh_rng(0x6c8);
    /* (rows, cols) of each exchange: sums of 1, 16 and 1024 rows of 5120 and odd sizes; gathers of the head's
     * halves (64640 columns) for 1, 16 and 64 rows */
    struct {
        int mode, rows, cols;
    } xs[] = {{0, 1, 5120}, {0, 16, 5120}, {1, 1, 64640}, {0, 1, 5120}, {1, 16, 64640}, {0, 1, 3},
              {0, 204, 5120}, {1, 3, 128}, {0, 7, 999}, {1, 16, 64640}, {0, 1, 5120}, {0, 1, 5120}};
    int nx = (int)(sizeof xs / sizeof xs[0]), bad = 0, rounds = 3;
    size_t most = (size_t)CAP;
    float *part[TP], *got = xmalloc(most * TP * 4), *want = xmalloc(most * TP * 4);
    CUdeviceptr dpart[TP], dout[TP];
    for (int k = 0; k < TP; k++) {
        part[k] = xmalloc(most * 4);
        dpart[k] = dev_alloc(most * 4);
        dout[k] = dev_alloc(most * TP * 4);
    }
    for (int round = 0; round < rounds; round++)
        for (int i = 0; i < nx; i++) {
            int64_t n = (int64_t)xs[i].rows * xs[i].cols;
            for (int k = 0; k < TP; k++) {
                fill_f32(&r, part[k], (size_t)n);
                dev_upload_to(dpart[k], part[k], (size_t)n * 4);
            }
            for (int k = 0; k < TP; k++) {
                int rc = xs[i].mode ? op_xchg_gather(c->k, st[k], xchg_desc_ptr(&s[k]), CAP, dpart[k], dout[k], xs[i].rows, xs[i].cols)
                                    : op_xchg_sum(c->k, st[k], xchg_desc_ptr(&s[k]), CAP, dpart[k], dout[k], n);
                must(rc, "an exchange");
            }
            for (int k = 0; k < TP; k++)
                cu_ok(cu.cuStreamSynchronize(st[k]), "an exchange on the device");
            const float *const parts[TP] = {part[0], part[1]};
            size_t outn = (size_t)n * (xs[i].mode ? TP : 1);
            if (xs[i].mode)
                ref_xchg_gather(parts, TP, xs[i].rows, xs[i].cols, want);
            else
                ref_xchg_sum(parts, TP, n, want);
            for (int k = 0; k < TP; k++) {
                dev_download(got, dout[k], outn * 4);
                bad += memcmp(got, want, outn * 4) != 0;
            }
        }
    unsigned st0 = 1, st1 = 1;
    dev_download(&st0, xchg_status_ptr(&s[0]), 4);
    dev_download(&st1, xchg_status_ptr(&s[1]), 4);
    check(c, bad == 0 && st0 == 0 && st1 == 0, "xchg", "2 ranks, sums and gathers",
          "%d of %d results differ from the reference (%d exchanges a rank: 1 to 1024 rows of 5120, gathers of up to 16 "
          "rows of 64640); status %u %u",
          bad, rounds * nx * TP, rounds * nx, st0, st1);
    /* an in-place sum (the engine's form) */
    {
        int64_t n = 16 * 5120;
        for (int k = 0; k < TP; k++) {
            fill_f32(&r, part[k], (size_t)n);
            cu_ok(cu.cuMemcpyHtoDAsync(dout[k], part[k], (size_t)n * 4, st[k]), "an upload on the rank's stream");
            must(op_xchg_sum(c->k, st[k], xchg_desc_ptr(&s[k]), CAP, dout[k], dout[k], n), "an exchange in place");
        }
        for (int k = 0; k < TP; k++)
            cu_ok(cu.cuStreamSynchronize(st[k]), "an exchange on the device");
        const float *const parts[TP] = {part[0], part[1]};
        ref_xchg_sum(parts, TP, n, want);
        int same = 1;
        for (int k = 0; k < TP; k++) {
            dev_download(got, dout[k], (size_t)n * 4);
            same &= !memcmp(got, want, (size_t)n * 4);
        }
        check(c, same, "xchg", "in place (16 rows of 5120)", "both ranks %s", same ? "equal the reference" : "DIFFER");
    }
    free_sides(s, TP);
    /* a peer that never comes: rank 0 alone, a bound of about 20 ms */
    sides(c, s, TP, 0.02);
    double t0 = dsk_now();
    must(op_xchg_sum(c->k, st[0], xchg_desc_ptr(&s[0]), CAP, dpart[0], dout[0], 5120), "a lone exchange");
    cu_ok(cu.cuStreamSynchronize(st[0]), "a lone exchange on the device");
    double dt = dsk_now() - t0;
    unsigned lone = 0;
    dev_download(&lone, xchg_status_ptr(&s[0]), 4);
    check(c, lone == 2 && dt < 5.0, "xchg", "a peer that never comes",
          "status %u (2: it waited for rank 1), returned after %.3f s (bound 20 ms of SM clock)", lone, dt);
    free_sides(s, TP);
    check(c, op_xchg_sum(c->k, st[0], 0, CAP, dpart[0], dout[0], 16) != 0, "xchg", "no descriptor", "refused: %s",
          dsk_err_msg());
    check(c, op_xchg_sum(c->k, st[0], xchg_desc_ptr(&s[0]), CAP, dpart[0], dout[0], CAP + 1) != 0, "xchg", "past the slots",
          "refused: %s", dsk_err_msg());
    check(c, op_xchg_gather(c->k, st[0], xchg_desc_ptr(&s[0]), CAP, dpart[0] + 4, dout[0], 1, 16) != 0, "xchg", "misaligned",
          "refused: %s", dsk_err_msg());
    cu.cuStreamDestroy(st[1]);
    for (int k = 0; k < TP; k++) {
        free(part[k]);
        dev_free(dpart[k]);
        dev_free(dout[k]);
    }
    free(got);
    free(want);
}

/* The NCCL transport with what one GPU allows (NCCL refuses two ranks on one GPU): the combining launches
 * (modes 2 and 3) of parts laid out as NCCL's all-gather leaves them, for two ranks, against the
 * reference; a one-rank communicator joined through the bounded non-blocking init, its all-gather and the
 * combine captured in a graph and replayed, equal to eager and to the reference; a two-rank communicator
 * whose other rank never comes refused within its bound. Skipped on the emulator (no NCCL device). */
void test_xchg_nccl(gpu_ctx *c)
{
    if (!strncmp(c->g->name, "dskit emulator", 14)) {
        printf("xchg_nccl: skipped (the emulator is no NCCL device)\n");
        return;
    }
    enum { TP = 2 };
    dsk_rng r = fresh_rng(0x9cc1);
    xchg_mem m;
    must(xchg_mem_alloc(&m, CAP, TP), "the gather region");
    must(xchg_desc_write(&m, NULL, TP, 1, c->g->dev, 1.0), "a descriptor without peers");
    size_t most = (size_t)CAP;
    float *all = xmalloc(most * TP * 4), *got = xmalloc(most * TP * 4), *want = xmalloc(most * TP * 4);
    CUdeviceptr dout = dev_alloc(most * TP * 4);
    struct {
        int mode, rows, cols;
    } xs[] = {{2, 1, 5120}, {2, 16, 5120}, {2, 7, 999}, {3, 1, 64640}, {3, 16, 64640}, {3, 3, 5}};
    int bad = 0, nx = (int)(sizeof xs / sizeof xs[0]);
    for (int i = 0; i < nx; i++) {
        int64_t n = (int64_t)xs[i].rows * xs[i].cols;
        fill_f32(&r, all, (size_t)n * TP);
        dev_upload_to(m.region, all, (size_t)n * TP * 4);
        const float *const parts[TP] = {all, all + n};
        int rc = xs[i].mode == 2 ? op_xchg_combine(c->k, c->s, xchg_desc_ptr(&m), CAP, m.region, dout, n)
                                 : op_xchg_place(c->k, c->s, xchg_desc_ptr(&m), CAP, m.region, dout, xs[i].rows,
                                                 xs[i].cols);
        must(rc, "a combining launch");
        cu_ok(cu.cuStreamSynchronize(c->s), "a combining launch on the device");
        if (xs[i].mode == 2)
            ref_xchg_sum(parts, TP, n, want);
        else
            ref_xchg_gather(parts, TP, xs[i].rows, xs[i].cols, want);
        size_t outn = (size_t)n * (xs[i].mode == 3 ? TP : 1);
        dev_download(got, dout, outn * 4);
        bad += memcmp(got, want, outn * 4) != 0;
    }
    check(c, bad == 0, "xchg_nccl", "modes 2 and 3 (2 ranks' gathered parts)",
          "%d of %d combinations differ from the reference (sums of 1 to 16 rows of 5120, places of up to 16 rows of "
          "64640)",
          bad, nx);
    xchg_mem_free(&m);

    if (dsk_nccl_open()) {
        check(c, 0, "xchg_nccl", "NCCL", "%s", dsk_err_msg());
        goto out;
    }
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    ncclResult_t nr = nccl.ncclGetUniqueId(&id);
    must(nr != ncclSuccess ? dsk_nccl_fail(nr, NULL, "ncclGetUniqueId") : 0, "NCCL's unique id");
    double t0 = dsk_now();
    must(dsk_nccl_comm_init(&comm, 1, &id, 0, 30.0), "a one-rank NCCL communicator");
    printf("xchg_nccl: NCCL %d joined a one-rank communicator in %.2f s\n", nccl.version, dsk_now() - t0);
    must(xchg_mem_alloc(&m, CAP, 1), "the gather region");
    must(xchg_desc_write(&m, NULL, 1, 0, c->g->dev, 1.0), "a one-rank descriptor");
    int64_t n = 16 * 5120;
    CUdeviceptr dpart = dev_alloc((size_t)n * 4), deager = dev_alloc((size_t)n * 4);
    fill_f32(&r, all, (size_t)n);
    dev_upload_to(dpart, all, (size_t)n * 4);
    /* eager, then the same in a graph (an all-gather then a combine, as the engine queues them) */
    nr = nccl.ncclAllGather((const void *)(uintptr_t)dpart, (void *)(uintptr_t)m.region, (size_t)n, ncclFloat32, comm,
                            c->s);
    must(dsk_nccl_settle(comm, nr, 10.0, "ncclAllGather"), "an eager all-gather");
    must(op_xchg_combine(c->k, c->s, xchg_desc_ptr(&m), CAP, m.region, deager, n), "an eager combine");
    cu_ok(cu.cuStreamSynchronize(c->s), "the eager exchange");
    CUgraph gr;
    CUgraphExec ge;
    cu_ok(cu.cuMemsetD32Async(dout, 0, (size_t)n, c->s), "clearing the output");
    cu_ok(cu.cuStreamBeginCapture(c->s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
    nr = nccl.ncclAllGather((const void *)(uintptr_t)dpart, (void *)(uintptr_t)m.region, (size_t)n, ncclFloat32, comm,
                            c->s);
    int crc = dsk_nccl_settle(comm, nr, 10.0, "ncclAllGather in a capture");
    if (!crc)
        crc = op_xchg_combine(c->k, c->s, xchg_desc_ptr(&m), CAP, m.region, dout, n);
    CUresult er = cu.cuStreamEndCapture(c->s, &gr);
    must(crc, "capturing the exchange");
    cu_ok(er, "cuStreamEndCapture");
    cu_ok(cu.cuGraphInstantiateWithFlags(&ge, gr, 0), "cuGraphInstantiateWithFlags");
    for (int k = 0; k < 3; k++)
        cu_ok(cu.cuGraphLaunch(ge, c->s), "cuGraphLaunch");
    cu_ok(cu.cuStreamSynchronize(c->s), "the replayed exchanges");
    ncclResult_t async = ncclSuccess;
    nccl.ncclCommGetAsyncError(comm, &async);
    dev_download(got, dout, (size_t)n * 4);
    dev_download(want, deager, (size_t)n * 4);
    int graph_same = !memcmp(got, want, (size_t)n * 4), ref_same = !memcmp(want, all, (size_t)n * 4);
    check(c, graph_same && ref_same && async == ncclSuccess, "xchg_nccl", "one rank: eager and graph",
          "16 rows of 5120 through ncclAllGather + combine: graph %s eager, eager %s the part; async %s",
          graph_same ? "==" : "!=", ref_same ? "==" : "!=", nccl.ncclGetErrorString(async));
    cu.cuGraphExecDestroy(ge);
    cu.cuGraphDestroy(gr);
    nccl.ncclCommDestroy(comm);
    xchg_mem_free(&m);
    dev_free(dpart);
    dev_free(deager);
    /* a second rank that never joins: the bounded init gives up */
    nr = nccl.ncclGetUniqueId(&id);
    must(nr != ncclSuccess ? dsk_nccl_fail(nr, NULL, "ncclGetUniqueId") : 0, "NCCL's unique id");
    t0 = dsk_now();
    int lone = dsk_nccl_comm_init(&comm, 2, &id, 0, 2.0);
    double dt = dsk_now() - t0;
    check(c, lone != 0 && comm == NULL && dt < 10.0, "xchg_nccl", "a rank that never joins",
          "refused after %.2f s (bound 2 s): %s", dt, lone ? dsk_err_msg() : "it joined");
out:
    dev_free(dout);
    free(all);
    free(got);
    free(want);
}
