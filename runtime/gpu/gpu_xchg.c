/* The GPU backend's exchanges between ranks (docs/ranks.md). Three transports, the same bits:
 *   - peer memory (ranks on one host, on different GPUs): each rank's receive region is shared with the
 *     others through CUDA IPC (ranks in one process, the tests' threads, use the pointers themselves); one
 *     xchg launch per exchange pushes this rank's part into every other rank's region, each value beside
 *     the exchange's number, waits (bounded) until the others' words carry it and sums them in rank order
 *     (kit/src/xchg.cu). Nothing waits on the host, so rounds replay CUDA graphs as with one rank.
 *   - NCCL (ranks on different hosts, or DSKIT_XCHG=nccl): an all-gather of the parts into this rank's
 *     region, then the xchg kernel's modes 2 and 3 sum them in rank order or place them, as peer memory
 *     does; both in the round's graph. NCCL refuses two ranks on one GPU.
 *   - the host: a rank's part comes down into pinned memory, the rank_xchg transport (host shared memory
 *     on one host, TCP across hosts) sums every rank's in rank order, the sum goes back up. Each exchange
 *     synchronises the stream, so rounds run eagerly. Used where the ranks share one GPU (faster there:
 *     docs/ranks.md), where the others cannot be set up (the emulator has no CUDA IPC, a host without
 *     NCCL), or with DSKIT_XCHG=host.
 * The ranks agree on the transport at their first round: every rank says where it runs and what it can
 * do, each then picks the same one from the same records. */
#include "runtime/gpu/gpu_engine.h"
#include "runtime/gpu/gpu_xchg.h"
#include "kit/src/xchg_abi.cuh"
#include "runtime/common/error.h"
#include "runtime/driver/nccl_api.h"
#include "runtime/launch/xchg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Floats per piece of a host sum (4 MiB): larger exchanges go in pieces. */
#define XCHG_PIECE ((size_t)1 << 20)
/* Rows per piece of a gather through the host; through peer memory, rows per launch at most. */
#define XCHG_GATHER_ROWS 16
#define XCHG_PEER_GATHER_ROWS 16
/* A peer-memory wait's bound: a rank that does not arrive within it fails the round naming it (a rank
 * that is gone is seen sooner, by the group's watchdog: docs/ranks.md). */
#define XCHG_TIMEOUT_S 30

/* Then, for peer memory: whether its region is ready, the region (its pointer for ranks in the same
 * process, its IPC handle for the others). */
typedef struct {
    int32_t ok, pad;
    uint64_t ptr;
    CUipcMemHandle h;
} xchg_rec;

static int host_init(gpu_backend *b)
{
    size_t V = (size_t)b->cfg->vocab_size, vl = V / (size_t)b->xchg->tp;
    size_t sum = XCHG_PIECE * sizeof(float);
    size_t mine = XCHG_GATHER_ROWS * vl * sizeof(float), all = XCHG_GATHER_ROWS * V * sizeof(float);
    b->xs_bytes = sum > mine ? sum : mine;
    b->xs_all_bytes = all;
    if (cu.cuMemAllocHost(&b->xs_host, b->xs_bytes + 2 * all) != CUDA_SUCCESS) {
        b->xs_host = NULL;
        return dsk_err("allocating %.1f MiB of pinned memory for the ranks' exchanges failed",
                       (b->xs_bytes + 2 * all) / 1048576.0);
    }
    return 0;
}

static void peer_free(gpu_backend *b)
{
    for (int r = 0; r < XCHG_MAX_RANKS; r++)
        if (b->xpeer[r])
            cu.cuIpcCloseMemHandle(b->xpeer[r]);
    memset(b->xpeer, 0, sizeof b->xpeer);
    xchg_mem_free(&b->xm);
}

/* Floats per exchange launch: up to 64 rows of a partial or XCHG_PEER_GATHER_ROWS of logits; a prompt
 * chunk's exchanges loop (peer memory's region is 16·tp bytes per float of capacity, NCCL's uses 4·tp). */
static int64_t xchg_cap(const gpu_backend *b)
{
    size_t R = (size_t)(b->max_rows < 64 ? b->max_rows : 64), vl = (size_t)(b->w.split.v1 - b->w.split.v0);
    size_t cap = R * (size_t)b->cfg->dim;
    if (XCHG_PEER_GATHER_ROWS * vl > cap)
        cap = XCHG_PEER_GATHER_ROWS * vl;
    return (int64_t)cap;
}

/* This rank's exchange memory, zeroed, and its IPC handle: 0, or -1 with a message (then the ranks use the
 * host). */
static int peer_alloc(gpu_backend *b, xchg_rec *me)
{
    TRY(xchg_mem_alloc(&b->xm, xchg_cap(b), b->xchg->tp));
    CU_TRY(cu.cuIpcGetMemHandle(&me->h, b->xm.region));
    me->ptr = (uint64_t)b->xm.region;
    return 0;
}

/* Every rank's region mapped here and the descriptor written: 0, or -1 with a message. */
static int peer_open(gpu_backend *b, const xchg_rec *all, const gpu_xchg_where *w)
{
    rank_xchg *x = b->xchg;
    CUdeviceptr regions[XCHG_MAX_RANKS];
    for (int r = 0; r < x->tp; r++) {
        regions[r] = b->xm.region;
        if (r != x->rank && w[r].pid == w[x->rank].pid)
            regions[r] = (CUdeviceptr)all[r].ptr; /* the same process (and context): the pointer itself */
        else if (r != x->rank) {
            CUresult cr = cu.cuIpcOpenMemHandle(&b->xpeer[r], all[r].h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
            if (cr != CUDA_SUCCESS) {
                b->xpeer[r] = 0;
                return dsk_cu_fail(cr, "cuIpcOpenMemHandle"), dsk_err_ctx("rank %d's exchange region", r);
            }
            regions[r] = b->xpeer[r];
        }
    }
    return xchg_desc_write(&b->xm, regions, x->tp, x->rank, b->g.dev, XCHG_TIMEOUT_S);
}

/* Every rank's flag, gathered: 1 when all are set. */
static int all_agree(rank_xchg *x, int mine, int *all_ok)
{
    int32_t v[XCHG_MAX_RANKS], m = mine;
    if (x->allgather(x, &m, sizeof m, v))
        return dsk_err_ctx("rank %d: agreeing on the exchange transport", x->rank);
    *all_ok = 1;
    for (int r = 0; r < x->tp; r++)
        *all_ok &= v[r] != 0;
    return 0;
}

/* This rank's record. */
static int where_init(gpu_backend *b, gpu_xchg_where *me)
{
    memset(me, 0, sizeof *me);
    me->pid = (int32_t)getpid();
    CU_TRY(cu.cuDeviceGetAttribute(&me->pci[0], CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, b->g.dev));
    CU_TRY(cu.cuDeviceGetAttribute(&me->pci[1], CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, b->g.dev));
    CU_TRY(cu.cuDeviceGetAttribute(&me->pci[2], CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, b->g.dev));
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f || !fgets(me->host, sizeof me->host, f))
        gethostname(me->host, sizeof me->host - 1);
    if (f)
        fclose(f);
    me->host[strcspn(me->host, "\n")] = 0;
    return 0;
}

/* Peer memory: every rank's region allocated, shared and mapped. *ok 1 when every rank has it, 0 (why
 * set) when one has not; -1 when the ranks could not agree. */
static int peer_setup(gpu_backend *b, const gpu_xchg_where *w, char *why, size_t why_n, int *ok)
{
    rank_xchg *x = b->xchg;
    xchg_rec all[XCHG_MAX_RANKS], me;
    memset(&me, 0, sizeof me);
    me.ok = !peer_alloc(b, &me);
    if (!me.ok)
        snprintf(why, why_n, "%s", dsk_err_msg());
    if (x->allgather(x, &me, sizeof me, all))
        return dsk_err_ctx("rank %d: sharing the exchange regions", x->rank);
    *ok = 1;
    for (int r = 0; r < x->tp; r++)
        if (!all[r].ok) {
            *ok = 0;
            if (r != x->rank && me.ok)
                snprintf(why, why_n, "rank %d has no CUDA IPC", r);
        }
    if (!*ok)
        return 0;
    int opened = !peer_open(b, all, w);
    if (!opened)
        snprintf(why, why_n, "%s", dsk_err_msg());
    return all_agree(x, opened, ok);
}

/* NCCL: rank 0's unique id to every rank, the communicator joined (bounded), the region that receives the
 * all-gather and a descriptor for the combining launches. *ok and the result as peer_setup's. */
static int nccl_setup(gpu_backend *b, char *why, size_t why_n, int *ok)
{
    rank_xchg *x = b->xchg;
    ncclUniqueId ids[XCHG_MAX_RANKS], mine;
    memset(&mine, 0, sizeof mine);
    /* every rank loads NCCL (only now: ranks on one host never need it) and prepares its region */
    int32_t ready = !dsk_nccl_open(), all_ready[XCHG_MAX_RANKS];
    if (ready && x->rank == 0) {
        ncclResult_t r = nccl.ncclGetUniqueId(&mine);
        if (r != ncclSuccess)
            ready = (dsk_nccl_fail(r, NULL, "ncclGetUniqueId"), 0);
    }
    if (ready && (xchg_mem_alloc(&b->xm, xchg_cap(b), x->tp) ||
                  xchg_desc_write(&b->xm, NULL, x->tp, x->rank, b->g.dev, XCHG_TIMEOUT_S)))
        ready = 0;
    char mine_why[256];
    snprintf(mine_why, sizeof mine_why, "%s", ready ? "" : dsk_err_msg());
    if (x->allgather(x, &ready, sizeof ready, all_ready) || x->allgather(x, &mine, sizeof mine, ids))
        return dsk_err_ctx("rank %d: sharing NCCL's unique id", x->rank);
    *ok = 1;
    for (int r = 0; r < x->tp && *ok; r++)
        if (!all_ready[r]) {
            *ok = 0;
            snprintf(why, why_n, "rank %d could not set up NCCL%s%s", r, r == x->rank ? ": " : "",
                     r == x->rank ? mine_why : "");
        }
    if (!*ok)
        return 0;
    int joined = !dsk_nccl_comm_init(&b->ncomm, x->tp, &ids[0], x->rank, XCHG_TIMEOUT_S);
    if (!joined)
        snprintf(why, why_n, "%s", dsk_err_msg());
    if (all_agree(x, joined, ok))
        return -1;
    if (!*ok && joined)
        snprintf(why, why_n, "a rank could not join the NCCL communicator");
    return 0;
}

static void nccl_free(gpu_backend *b)
{
    if (b->ncomm)
        nccl.ncclCommAbort(b->ncomm); /* every exchange has ended (the round synchronised); never waits for a peer */
    b->ncomm = NULL;
}

int gpu_xchg_pick(const gpu_xchg_where *w, int tp, const char *want, char *why, size_t why_n)
{
    if (want && strcmp(want, "host") && strcmp(want, "peer") && strcmp(want, "nccl"))
        return dsk_err("DSKIT_XCHG=%s: host, peer or nccl expected", want);
    int want_host = want && !strcmp(want, "host"), want_peer = want && !strcmp(want, "peer");
    int want_nccl = want && !strcmp(want, "nccl");
    int one_host = 1, one_gpu = 1;
    for (int r = 0; r < tp; r++) {
        one_host &= !strcmp(w[r].host, w[0].host);
        one_gpu &= one_host && !memcmp(w[r].pci, w[0].pci, sizeof w[0].pci);
    }
    if (want_host) {
        snprintf(why, why_n, "DSKIT_XCHG=host");
        return GPU_XCHG_HOST;
    }
    if (want_nccl || (!want_peer && !one_host)) {
        if (one_gpu) {
            snprintf(why, why_n, "NCCL refuses two ranks on one GPU");
            return GPU_XCHG_HOST;
        }
        return GPU_XCHG_NCCL;
    }
    if (!one_host) {
        snprintf(why, why_n, "peer memory needs the ranks on one host");
        return GPU_XCHG_HOST;
    }
    if (one_gpu && !want_peer) {
        /* ranks sharing one GPU time-slice it, and a rank's exchange kernel waits out the other's slice:
         * there the host is faster (docs/ranks.md, measured); DSKIT_XCHG=peer asks for peer memory */
        snprintf(why, why_n, "the ranks share one GPU; DSKIT_XCHG=peer to use peer memory there");
        return GPU_XCHG_HOST;
    }
    return GPU_XCHG_PEER;
}

int gpu_xchg_init(gpu_backend *b)
{
    rank_xchg *x = b->xchg;
    if (x->tp == 1 || b->xready)
        return 0;
    b->xready = 1;
    b->xkind = GPU_XCHG_HOST;
    if (x->tp > XCHG_MAX_RANKS)
        return dsk_err("%d ranks: the GPU exchanges take at most %d", x->tp, XCHG_MAX_RANKS);
    const char *want = getenv("DSKIT_XCHG");
    gpu_xchg_where w[XCHG_MAX_RANKS], me;
    char why[320];
    TRY(where_init(b, &me));
    if (x->allgather(x, &me, sizeof me, w))
        return dsk_err_ctx("rank %d: agreeing on the exchange transport", x->rank);
    /* the same choice on every rank: the same records, and a launcher gives every rank the same DSKIT_XCHG */
    int kind = gpu_xchg_pick(w, x->tp, want, why, sizeof why);
    if (kind < 0)
        return dsk_err_ctx("rank %d", x->rank);
    int ok = 0;
    if (kind == GPU_XCHG_PEER && peer_setup(b, w, why, sizeof why, &ok))
        return -1;
    if (kind == GPU_XCHG_NCCL && nccl_setup(b, why, sizeof why, &ok))
        return -1;
    if (ok) {
        b->xkind = kind;
        if (x->rank == 0)
            fprintf(stderr, "gpu: the ranks exchange through %s\n",
                    kind == GPU_XCHG_PEER ? "peer memory (CUDA IPC)" : "NCCL, in the rounds' graphs");
        return 0;
    }
    nccl_free(b);
    peer_free(b);
    b->use_graphs = 0; /* each exchange through the host synchronises the stream */
    if (x->rank == 0)
        fprintf(stderr, "gpu: the ranks exchange through the host, rounds without CUDA graphs (%s)\n", why);
    return host_init(b);
}

void gpu_xchg_free(gpu_backend *b)
{
    if (b->xs_host)
        cu.cuMemFreeHost(b->xs_host);
    b->xs_host = NULL;
    nccl_free(b);
    peer_free(b);
}

int gpu_xchg_check(gpu_backend *b)
{
    if (b->xkind == GPU_XCHG_NCCL) {
        ncclResult_t r = ncclSuccess, e = nccl.ncclCommGetAsyncError(b->ncomm, &r);
        if (e != ncclSuccess || (r != ncclSuccess && r != ncclInProgress))
            return dsk_nccl_fail(e != ncclSuccess ? e : r, b->ncomm, "NCCL"),
                   dsk_err_ctx("rank %d: an exchange", b->xchg->rank);
        return 0;
    }
    if (b->xkind != GPU_XCHG_PEER)
        return 0;
    unsigned st = 0;
    /* on the round's stream: a copy on the context's default stream could wait for another rank's next
     * exchange where ranks share a context (the tests' threads) */
    CU_TRY(cu.cuMemcpyDtoHAsync(&st, xchg_status_ptr(&b->xm), sizeof st, b->s));
    CU_TRY(cu.cuStreamSynchronize(b->s));
    if (st)
        return dsk_err("rank %d: an exchange waited %d s (the bound) for rank %u", b->xchg->rank, XCHG_TIMEOUT_S,
                       st - 1);
    return 0;
}

static int host_sum(gpu_backend *b, CUdeviceptr buf, int64_t n)
{
    rank_xchg *x = b->xchg;
    float *h = b->xs_host;
    for (int64_t at = 0; at < n; at += (int64_t)XCHG_PIECE) {
        size_t m = (size_t)(n - at) < XCHG_PIECE ? (size_t)(n - at) : XCHG_PIECE;
        CUdeviceptr d = buf + (CUdeviceptr)at * 4;
        CU_TRY(cu.cuMemcpyDtoHAsync(h, d, m * 4, b->s));
        CU_TRY(cu.cuStreamSynchronize(b->s));
        if (x->allgather_sum(x, h, m))
            return dsk_err_ctx("rank %d: the exchange of %zu floats", x->rank, m);
        /* the copy up reads h before the next piece's copy down writes it (one stream) */
        CU_TRY(cu.cuMemcpyHtoDAsync(d, h, m * 4, b->s));
    }
    CU_TRY(cu.cuStreamSynchronize(b->s));
    return 0;
}

/* NCCL: src [n] of every rank all-gathered into the region ([tp][n], rank r's at r·n). */
static int nccl_allgather(gpu_backend *b, CUdeviceptr src, int64_t n)
{
    ncclResult_t r = nccl.ncclAllGather((const void *)(uintptr_t)src, (void *)(uintptr_t)b->xm.region, (size_t)n,
                                        ncclFloat32, b->ncomm, b->s);
    if (dsk_nccl_settle(b->ncomm, r, XCHG_TIMEOUT_S, "ncclAllGather"))
        return dsk_err_ctx("rank %d: the exchange of %lld floats", b->xchg->rank, (long long)n);
    return 0;
}

int gpu_xchg_sum(gpu_backend *b, CUdeviceptr buf, int64_t n)
{
    if (b->xchg->tp == 1)
        return 0;
    if (b->xkind == GPU_XCHG_HOST)
        return host_sum(b, buf, n);
    /* in place: a block reads its part of buf before it writes the sum there (NCCL: the sum of the
     * gathered parts in rank order back into buf) */
    int64_t cap = b->xm.cap;
    for (int64_t at = 0; at < n; at += cap) {
        int64_t m = n - at < cap ? n - at : cap;
        CUdeviceptr d = buf + (CUdeviceptr)at * 4;
        if (b->xkind == GPU_XCHG_NCCL) {
            TRY(nccl_allgather(b, d, m));
            TRY(op_xchg_combine(b->k, b->s, xchg_desc_ptr(&b->xm), cap, b->xm.region, d, m));
        } else
            TRY(op_xchg_sum(b->k, b->s, xchg_desc_ptr(&b->xm), cap, d, d, m));
    }
    return 0;
}

static int host_gather(gpu_backend *b, CUdeviceptr part, CUdeviceptr full, int rows, int cols)
{
    rank_xchg *x = b->xchg;
    int tp = x->tp;
    float *mine = b->xs_host, *all = (float *)((char *)b->xs_host + b->xs_bytes);
    float *out = (float *)((char *)all + b->xs_all_bytes);
    size_t row = (size_t)cols * 4;
    for (int r0 = 0; r0 < rows; r0 += XCHG_GATHER_ROWS) {
        int m = rows - r0 < XCHG_GATHER_ROWS ? rows - r0 : XCHG_GATHER_ROWS;
        CU_TRY(cu.cuMemcpyDtoHAsync(mine, part + (CUdeviceptr)r0 * row, (size_t)m * row, b->s));
        CU_TRY(cu.cuStreamSynchronize(b->s));
        if (x->allgather(x, mine, (size_t)m * row, all))
            return dsk_err_ctx("rank %d: the gather of %d rows of %d floats", x->rank, m, cols);
        /* all [tp][m][cols] -> out [m][tp·cols]: rank r's columns at r·cols */
        for (int r = 0; r < tp; r++)
            for (int i = 0; i < m; i++)
                memcpy(out + ((size_t)i * tp + r) * cols, all + ((size_t)r * m + i) * cols, row);
        CU_TRY(cu.cuMemcpyHtoDAsync(full + (CUdeviceptr)r0 * tp * row, out, (size_t)m * tp * row, b->s));
        CU_TRY(cu.cuStreamSynchronize(b->s));
    }
    return 0;
}

int gpu_xchg_gather_cols(gpu_backend *b, CUdeviceptr part, CUdeviceptr full, int rows, int cols)
{
    if (b->xkind == GPU_XCHG_HOST)
        return host_gather(b, part, full, rows, cols);
    int per = (int)(b->xm.cap / cols), tp = b->xchg->tp;
    per = per < XCHG_PEER_GATHER_ROWS ? per : XCHG_PEER_GATHER_ROWS;
    for (int r0 = 0; r0 < rows; r0 += per) {
        int m = rows - r0 < per ? rows - r0 : per;
        CUdeviceptr src = part + (CUdeviceptr)r0 * cols * 4, dst = full + (CUdeviceptr)r0 * tp * cols * 4;
        if (b->xkind == GPU_XCHG_NCCL) {
            TRY(nccl_allgather(b, src, (int64_t)m * cols));
            TRY(op_xchg_place(b->k, b->s, xchg_desc_ptr(&b->xm), b->xm.cap, b->xm.region, dst, m, cols));
        } else
            TRY(op_xchg_gather(b->k, b->s, xchg_desc_ptr(&b->xm), b->xm.cap, src, dst, m, cols));
    }
    return 0;
}
