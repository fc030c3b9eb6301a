/* Host launcher of the xchg family (kit/src/xchg.cu; reference runtime/ref/xchg.h): one exchange of the
 * ranks' fp32 parts through peer memory, described by an xchg_desc in device memory (kit/src/xchg_abi.cuh;
 * runtime/gpu/gpu_xchg.c sets it up). Every rank must make the same calls in the same order. */
#ifndef DSK_LAUNCH_XCHG_H
#define DSK_LAUNCH_XCHG_H

#include "runtime/driver/kit.h"

#include <stdint.h>

/* A rank's exchange memory: its receive region (for each parity and sending rank, cap words of {value,
 * exchange number}: 16·tp·cap bytes), which the other ranks write, and its own block (the descriptor, the
 * exchange counter, the status word). */
typedef struct {
    CUdeviceptr region, local;
    int64_t cap;
    int tp;
    size_t region_bytes;
} xchg_mem;

/* Allocate both for tp ranks, zero (it waits for that); cap (floats per exchange launch) rounded up to even. */
int xchg_mem_alloc(xchg_mem *m, int64_t cap, int tp);
void xchg_mem_free(xchg_mem *m);
/* Write rank `rank` of tp's descriptor into m->local: regions[r] is rank r's region as this process
 * addresses it (m->region for rank; NULL: none, for modes 2 and 3 only), a wait's bound timeout_s seconds of
 * device dev's SM clock. */
int xchg_desc_write(const xchg_mem *m, const CUdeviceptr *regions, int tp, int rank, CUdevice dev, double timeout_s);
/* The descriptor (what the ops take) and the status word (0; 1 + the rank a wait gave up on). */
CUdeviceptr xchg_desc_ptr(const xchg_mem *m);
CUdeviceptr xchg_status_ptr(const xchg_mem *m);

/* out [n] = Σ over ranks of their mine [n], in rank order. n <= the descriptor's slot capacity. */
int op_xchg_sum(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr mine, CUdeviceptr out, int64_t n);
/* out [rows][tp·cols] = every rank's mine [rows][cols] side by side; rows·cols <= the capacity. */
int op_xchg_gather(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr mine, CUdeviceptr out,
                   int rows, int cols);
/* The same two of parts already gathered by another transport (NCCL): all [tp][n], rank r's part at r·n
 * (not in place: out and all are apart). n <= the capacity. */
int op_xchg_combine(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr all, CUdeviceptr out, int64_t n);
int op_xchg_place(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr all, CUdeviceptr out, int rows,
                  int cols);

#endif
