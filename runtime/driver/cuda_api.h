/* The CUDA driver API, opened at run time with dlopen so that dskit runs (CPU paths, verify, tokenize)
 * on machines without a GPU and says "no CUDA device" clearly when one is needed. Functions are
 * resolved through cuGetProcAddress, each at the version of the prototype cuda.h declares for it, so
 * the versioned entry points (_v2, ...) match their prototypes. Call as cu.cuMemAlloc(...). */
#ifndef DSK_CUDA_API_H
#define DSK_CUDA_API_H

#include <cuda.h>

/* Each entry: the function and the CUDA version of the prototype cuda.h gives it. cuGetProcAddress
 * returns the newest version at or below the one asked for, and a newer version may take other
 * arguments (CUDA 13 added cuCtxSynchronize(CUcontext) under the same name as cuCtxSynchronize(void)),
 * so each is asked for at the version its prototype belongs to. */
#define DSK_CU_FUNCS(X) \
    X(cuDriverGetVersion, CUDA_VERSION) \
    X(cuDeviceGet, CUDA_VERSION) \
    X(cuDeviceGetCount, CUDA_VERSION) \
    X(cuDeviceGetName, CUDA_VERSION) \
    X(cuDeviceGetAttribute, CUDA_VERSION) \
    X(cuDeviceTotalMem, CUDA_VERSION) \
    X(cuDevicePrimaryCtxRetain, CUDA_VERSION) \
    X(cuDevicePrimaryCtxRelease, CUDA_VERSION) \
    X(cuCtxSetCurrent, CUDA_VERSION) \
    X(cuCtxSynchronize, 2000) \
    X(cuCtxSetLimit, CUDA_VERSION) \
    X(cuModuleLoadData, CUDA_VERSION) \
    X(cuModuleUnload, CUDA_VERSION) \
    X(cuModuleGetFunction, CUDA_VERSION) \
    X(cuModuleGetLoadingMode, CUDA_VERSION) \
    X(cuFuncSetAttribute, CUDA_VERSION) \
    X(cuFuncGetAttribute, CUDA_VERSION) \
    X(cuFuncLoad, CUDA_VERSION) \
    X(cuLaunchKernel, CUDA_VERSION) \
    X(cuLaunchKernelEx, CUDA_VERSION) \
    X(cuMemAlloc, CUDA_VERSION) \
    X(cuMemFree, CUDA_VERSION) \
    X(cuMemGetInfo, CUDA_VERSION) \
    X(cuMemAllocHost, CUDA_VERSION) \
    X(cuMemFreeHost, CUDA_VERSION) \
    X(cuMemcpyHtoD, CUDA_VERSION) \
    X(cuMemcpyDtoH, CUDA_VERSION) \
    X(cuMemcpyDtoD, CUDA_VERSION) \
    X(cuMemcpyHtoDAsync, CUDA_VERSION) \
    X(cuMemcpyDtoHAsync, CUDA_VERSION) \
    X(cuMemcpyDtoDAsync, CUDA_VERSION) \
    X(cuMemsetD8, CUDA_VERSION) \
    X(cuMemsetD32, CUDA_VERSION) \
    X(cuMemsetD32Async, CUDA_VERSION) \
    X(cuStreamCreate, CUDA_VERSION) \
    X(cuStreamDestroy, CUDA_VERSION) \
    X(cuStreamSynchronize, CUDA_VERSION) \
    X(cuStreamWaitEvent, CUDA_VERSION) \
    X(cuEventCreate, CUDA_VERSION) \
    X(cuEventDestroy, CUDA_VERSION) \
    X(cuEventRecord, CUDA_VERSION) \
    X(cuEventSynchronize, CUDA_VERSION) \
    X(cuEventElapsedTime, CUDA_VERSION) \
    X(cuStreamBeginCapture, CUDA_VERSION) \
    X(cuStreamEndCapture, CUDA_VERSION) \
    X(cuGraphInstantiateWithFlags, CUDA_VERSION) \
    X(cuGraphLaunch, CUDA_VERSION) \
    X(cuGraphExecDestroy, CUDA_VERSION) \
    X(cuGraphDestroy, CUDA_VERSION) \
    X(cuIpcGetMemHandle, CUDA_VERSION) \
    X(cuIpcOpenMemHandle, CUDA_VERSION) \
    X(cuIpcCloseMemHandle, CUDA_VERSION) \
    X(cuGetErrorName, CUDA_VERSION) \
    X(cuGetErrorString, CUDA_VERSION)

typedef struct {
#define DSK_CU_FIELD(f, version) __typeof__(f) *f;
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
