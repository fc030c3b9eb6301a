/* NCCL, opened at run time with dlopen (libnccl.so.2), as the driver is: dskit starts and serves without
 * it, and only a rank group that exchanges through NCCL (ranks on different hosts, or DSKIT_XCHG=nccl)
 * needs it. Communicators are non-blocking, so that every wait on one has a bound. Call as
 * nccl.ncclAllGather(...). */
#ifndef DSK_NCCL_API_H
#define DSK_NCCL_API_H

/* nccl.h declares a few functions with () (not a prototype in C) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define DSK_NCCL_FUNCS(X) \
    X(ncclGetVersion) \
    X(ncclGetUniqueId) \
    X(ncclCommInitRankConfig) \
    X(ncclCommDestroy) \
    X(ncclCommAbort) \
    X(ncclCommGetAsyncError) \
    X(ncclAllGather) \
    X(ncclGetErrorString) \
    X(ncclGetLastError)

typedef struct {
#define DSK_NCCL_FIELD(f) __typeof__(f) *f;
    DSK_NCCL_FUNCS(DSK_NCCL_FIELD)
#undef DSK_NCCL_FIELD
    int version; /* ncclGetVersion's: 22800 for 2.28.0 */
} dsk_nccl_api;

extern dsk_nccl_api nccl;

/* Open libnccl.so.2 and resolve every function. On failure: -1 with "NCCL is not available: <why>".
 * Idempotent. */
int dsk_nccl_open(void);
/* Set the error message for a failed NCCL call ("<what>: <NCCL's text>; <its last error>"); returns -1. */
int dsk_nccl_fail(ncclResult_t r, ncclComm_t comm, const char *what);
/* Rank `rank` of nranks joins the communicator of id on the current CUDA context's device: -1 with a
 * message when it fails or has not completed within timeout_s seconds (then it is aborted). */
int dsk_nccl_comm_init(ncclComm_t *comm, int nranks, const ncclUniqueId *id, int rank, double timeout_s);
/* After a call on a non-blocking communicator: wait (at most timeout_s) until it is no longer in
 * progress; r is the call's result. 0, or -1 with a message naming what. */
int dsk_nccl_settle(ncclComm_t comm, ncclResult_t r, double timeout_s, const char *what);

#endif
