#include "runtime/gpu/gpu_time.h"
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
