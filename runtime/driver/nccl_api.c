#include "runtime/driver/nccl_api.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

dsk_nccl_api nccl;

static pthread_once_t open_once = PTHREAD_ONCE_INIT;
static int open_rc;
static char open_msg[512];

static void open_lib(void)
{
    void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(open_msg, sizeof open_msg, "NCCL is not available: cannot load libnccl.so.2 (%s)", dlerror());
        open_rc = -1;
        return;
    }
#define DSK_NCCL_RESOLVE(f)                                                                               \
    {                                                                                                     \
        void *p = dlsym(lib, #f);                                                                         \
        if (!p) {                                                                                         \
            snprintf(open_msg, sizeof open_msg, "NCCL is not available: libnccl.so.2 has no %s (NCCL %d.%d " \
                     "or newer is needed)", #f, NCCL_MAJOR, NCCL_MINOR);                                  \
            open_rc = -1;                                                                                 \
            return;                                                                                       \
        }                                                                                                 \
        memcpy(&nccl.f, &p, sizeof p);                                                                    \
    }
    DSK_NCCL_FUNCS(DSK_NCCL_RESOLVE)
#undef DSK_NCCL_RESOLVE
    ncclResult_t r = nccl.ncclGetVersion(&nccl.version);
    if (r != ncclSuccess) {
        snprintf(open_msg, sizeof open_msg, "NCCL is not available: ncclGetVersion failed (%d)", (int)r);
        open_rc = -1;
    }
}

int dsk_nccl_open(void)
{
    pthread_once(&open_once, open_lib);
    if (open_rc)
        return dsk_err("%s", open_msg);
    return 0;
}

int dsk_nccl_fail(ncclResult_t r, ncclComm_t comm, const char *what)
{
    const char *last = nccl.ncclGetLastError ? nccl.ncclGetLastError(comm) : NULL;
    return dsk_err("%s: %s%s%s", what, nccl.ncclGetErrorString ? nccl.ncclGetErrorString(r) : "NCCL error",
                   last && *last ? "; " : "", last && *last ? last : "");
}

int dsk_nccl_settle(ncclComm_t comm, ncclResult_t r, double timeout_s, const char *what)
{
    double t0 = dsk_now();
    while (r == ncclInProgress) {
        if (dsk_now() - t0 > timeout_s)
            return dsk_err("%s: still in progress after %.0f s (the bound)", what, timeout_s);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        ncclResult_t e = nccl.ncclCommGetAsyncError(comm, &r);
        if (e != ncclSuccess)
            return dsk_nccl_fail(e, comm, "ncclCommGetAsyncError");
    }
    return r == ncclSuccess ? 0 : dsk_nccl_fail(r, comm, what);
}

int dsk_nccl_comm_init(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank, double timeout_s)
{
    *comm = NULL;
    if (dsk_nccl_open())
        return -1;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    ncclResult_t r = nccl.ncclCommInitRankConfig(&c, nranks, *id, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        dsk_nccl_fail(r, c, "ncclCommInitRankConfig");
        if (c)
            nccl.ncclCommAbort(c);
        return dsk_err_ctx("rank %d of %d joining the NCCL communicator", rank, nranks);
    }
    if (dsk_nccl_settle(c, r, timeout_s, "ncclCommInitRankConfig")) {
        nccl.ncclCommAbort(c);
        return dsk_err_ctx("rank %d of %d joining the NCCL communicator", rank, nranks);
    }
    *comm = c;
    return 0;
}
