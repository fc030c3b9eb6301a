/* Host launcher of the xchg family (kit/src/xchg.cu; reference runtime/ref/xchg.h): one exchange of the
 * ranks' fp32 parts through peer memory, described by an xchg_desc in device memory (kit/src/xchg_abi.cuh;
 * runtime/gpu/gpu_xchg.c sets it up). Every rank must make the same calls in the same order. */
#ifndef DSK_LAUNCH_XCHG_H
#define DSK_LAUNCH_XCHG_H

#include "runtime/driver/kit.h"

#include <stdint.h>

/* out [n] = Σ over ranks of their mine [n], in rank order. n <= the descriptor's slot capacity. */
int op_xchg_sum(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr mine, CUdeviceptr out, int64_t n);
/* out [rows][tp·cols] = every rank's mine [rows][cols] side by side; rows·cols <= the capacity. */
int op_xchg_gather(const kit *k, CUstream s, CUdeviceptr desc, int64_t cap, CUdeviceptr mine, CUdeviceptr out,
                   int rows, int cols);

#endif
