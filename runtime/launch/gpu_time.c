#include "runtime/launch/gpu_time.h"
#include "runtime/common/error.h"

#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_batch(CUstream s, CUevent a, CUevent b, int batch, gpu_launch_fn launch, void *ctx, double *us)
{
    CU_TRY(cu.cuEventRecord(a, s));
    for (int i = 0; i < batch; i++)
        if (launch(ctx))
            return -1;
    CU_TRY(cu.cuEventRecord(b, s));
    CU_TRY(cu.cuEventSynchronize(b));
    float ms;
    CU_TRY(cu.cuEventElapsedTime(&ms, a, b));
    *us = 1000.0 * ms / batch;
    return 0;
}

double gpu_time_us(CUstream s, int batch, int repeats, gpu_launch_fn launch, void *ctx)
{
    CUevent a = NULL, b = NULL;
    double *t = calloc((size_t)repeats + 1, sizeof(double));
    double result = -1;
    if (!t || cu.cuEventCreate(&a, CU_EVENT_DEFAULT) != CUDA_SUCCESS ||
        cu.cuEventCreate(&b, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        dsk_err("cannot create timing events");
        goto out;
    }
    double warm;
    if (run_batch(s, a, b, batch, launch, ctx, &warm))
        goto out;
    for (int r = 0; r < repeats; r++)
        if (run_batch(s, a, b, batch, launch, ctx, &t[r]))
            goto out;
    qsort(t, (size_t)repeats, sizeof(double), cmp_double);
    result = t[repeats / 2];
out:
    if (a)
        cu.cuEventDestroy(a);
    if (b)
        cu.cuEventDestroy(b);
    free(t);
    return result;
}

double gpu_time_graph_us(CUstream s, int batch, int repeats, gpu_launch_fn launch, void *ctx)
{
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUevent a = NULL, b = NULL;
    double *t = calloc((size_t)repeats + 1, sizeof(double)), result = -1;
    CUresult r = cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    if (!t || r != CUDA_SUCCESS) {
        dsk_cu_fail(r, "cuStreamBeginCapture");
        goto out;
    }
    int failed = 0;
    for (int i = 0; i < batch && !failed; i++)
        failed = launch(ctx);
    r = cu.cuStreamEndCapture(s, &graph);
    if (failed)
        goto out;
    if (r != CUDA_SUCCESS || (r = cu.cuGraphInstantiateWithFlags(&exec, graph, 0)) != CUDA_SUCCESS ||
        (r = cu.cuEventCreate(&a, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
        (r = cu.cuEventCreate(&b, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
        (r = cu.cuGraphLaunch(exec, s)) != CUDA_SUCCESS || (r = cu.cuStreamSynchronize(s)) != CUDA_SUCCESS) {
        dsk_cu_fail(r, "capturing the launches in a graph");
        goto out;
    }
    for (int i = 0; i < repeats; i++) {
        float ms;
        if ((r = cu.cuEventRecord(a, s)) != CUDA_SUCCESS || (r = cu.cuGraphLaunch(exec, s)) != CUDA_SUCCESS ||
            (r = cu.cuEventRecord(b, s)) != CUDA_SUCCESS || (r = cu.cuEventSynchronize(b)) != CUDA_SUCCESS ||
            (r = cu.cuEventElapsedTime(&ms, a, b)) != CUDA_SUCCESS) {
            dsk_cu_fail(r, "replaying the graph");
            goto out;
        }
        t[i] = 1000.0 * ms / batch;
    }
    qsort(t, (size_t)repeats, sizeof(double), cmp_double);
    result = t[repeats / 2];
out:
    if (exec)
        cu.cuGraphExecDestroy(exec);
    if (graph)
        cu.cuGraphDestroy(graph);
    if (a)
        cu.cuEventDestroy(a);
    if (b)
        cu.cuEventDestroy(b);
    free(t);
    return result;
}
