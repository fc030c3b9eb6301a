/* The CUDA driver API, opened at run time with dlopen so that dskit runs (CPU paths, verify, tokenize)
 * on machines without a GPU and says "no CUDA device" clearly when one is needed. Functions are
 * resolved through cuGetProcAddress at the API version of the cuda.h we compile against, so the
 * versioned entry points (_v2, ...) match their prototypes. Call as cu.cuMemAlloc(...). */
#ifndef DSK_CUDA_API_H
#define DSK_CUDA_API_H

#include <cuda.h>

#define DSK_CU_FUNCS(X)                                                                            \
    X(cuDriverGetVersion)                                                                          \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGetName)                                                                             \
    X(cuDeviceGetAttribute)                                                                        \
    X(cuDeviceTotalMem)                                                                            \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuDevicePrimaryCtxRelease)                                                                   \
    X(cuCtxSetCurrent)                                                                             \
    X(cuCtxSynchronize)                                                                            \
    X(cuCtxSetLimit)                                                                               \
    X(cuModuleLoadData)                                                                            \
    X(cuModuleUnload)                                                                              \
    X(cuModuleGetFunction)                                                                         \
    X(cuModuleGetLoadingMode)                                                                      \
    X(cuFuncSetAttribute)                                                                          \
    X(cuFuncGetAttribute)                                                                          \
    X(cuFuncLoad)                                                                                  \
    X(cuLaunchKernel)                                                                              \
    X(cuLaunchKernelEx)                                                                            \
    X(cuMemAlloc)                                                                                  \
    X(cuMemFree)                                                                                   \
    X(cuMemGetInfo)                                                                                \
    X(cuMemAllocHost)                                                                              \
    X(cuMemFreeHost)                                                                               \
    X(cuMemcpyHtoD)                                                                                \
    X(cuMemcpyDtoH)                                                                                \
    X(cuMemcpyDtoD)                                                                                \
    X(cuMemcpyHtoDAsync)                                                                           \
    X(cuMemcpyDtoHAsync)                                                                           \
    X(cuMemsetD8)                                                                                  \
    X(cuMemsetD32)                                                                                 \
    X(cuStreamCreate)                                                                              \
    X(cuStreamDestroy)                                                                             \
    X(cuStreamSynchronize)                                                                         \
    X(cuEventCreate)                                                                               \
    X(cuEventDestroy)                                                                              \
    X(cuEventRecord)                                                                               \
    X(cuEventSynchronize)                                                                          \
    X(cuEventElapsedTime)                                                                          \
    X(cuGetErrorName)                                                                              \
    X(cuGetErrorString)

typedef struct {
#define DSK_CU_FIELD(f) __typeof__(f) *f;
    DSK_CU_FUNCS(DSK_CU_FIELD)
#undef DSK_CU_FIELD
} dsk_cu_api;

extern dsk_cu_api cu;

/* Open libcuda.so.1 and cuInit. On failure: -1 with "no CUDA device: <why>". Idempotent. */
int dsk_cuda_open(void);
/* Set the error message for a failed driver call ("<what>: CUDA_ERROR_X: <text>"); returns -1. */
int dsk_cu_fail(CUresult r, const char *what);

#define CU_TRY(call)                                                                               \
    do {                                                                                           \
        CUresult cu_r_ = (call);                                                                   \
        if (cu_r_ != CUDA_SUCCESS)                                                                 \
            return dsk_cu_fail(cu_r_, #call);                                                      \
    } while (0)

/* One GPU: its context made current on the calling thread. */
typedef struct {
    int ordinal;
    CUdevice dev;
    CUcontext ctx;
    char name[128];
    int cc_major, cc_minor;
    int sms;
    int smem_optin;   /* max dynamic shared memory per block with opt-in */
    size_t total_mem;
} dsk_gpu;

int dsk_gpu_open(int ordinal, dsk_gpu *g);
void dsk_gpu_close(dsk_gpu *g);

#endif
