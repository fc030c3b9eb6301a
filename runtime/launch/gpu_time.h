/* Timing GPU work with events: a batch of launches between two events, repeated, median taken. */
#ifndef DSK_LAUNCH_GPU_TIME_H
#define DSK_LAUNCH_GPU_TIME_H

#include "runtime/driver/cuda_api.h"

typedef int (*gpu_launch_fn)(void *ctx);

/* Median over `repeats` batches of the mean time of one call of launch() in a batch of `batch` calls,
 * in microseconds, after one warm-up batch. Returns a negative value on failure (message set). */
double gpu_time_us(CUstream s, int batch, int repeats, gpu_launch_fn launch, void *ctx);
/* The same, with the batch captured once into a CUDA graph and replayed: the GPU's own time for the
 * launches, as decode rounds run them, free of the host's per-launch cost. Negative on failure. */
double gpu_time_graph_us(CUstream s, int batch, int repeats, gpu_launch_fn launch, void *ctx);

#endif
