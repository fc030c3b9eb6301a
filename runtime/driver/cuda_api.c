#include "runtime/driver/cuda_api.h"
#include "runtime/common/error.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dsk_cu_api cu;

static pthread_once_t open_once = PTHREAD_ONCE_INIT;
static int open_rc;
static char open_msg[512];

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void open_driver(void)
{
    /* Every kernel is resolved at start anyway (kit_load), so lazy loading only defers work; eager
     * loading measured faster to a resolved kit on the H200 (dskit bench kit: 0.37 s against 0.42 s
     * for the whole process). A user's own CUDA_MODULE_LOADING is kept. */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(open_msg, sizeof open_msg, "no CUDA device: cannot load the driver library libcuda.so.1 (%s)",
                 dlerror());
        open_rc = -1;
        return;
    }
    init_fn init = (init_fn)dlsym(lib, "cuInit");
    getproc_fn getproc = (getproc_fn)dlsym(lib, "cuGetProcAddress_v2");
    if (!init || !getproc) {
        snprintf(open_msg, sizeof open_msg, "no CUDA device: libcuda.so.1 lacks cuInit/cuGetProcAddress_v2 "
                 "(driver too old for CUDA %d.%d)", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
        open_rc = -1;
        return;
    }
    CUresult r = init(0);
    if (r != CUDA_SUCCESS) {
        snprintf(open_msg, sizeof open_msg, "no CUDA device: cuInit failed with error %d%s", (int)r,
                 r == CUDA_ERROR_NO_DEVICE ? " (CUDA_ERROR_NO_DEVICE)"
                 : r == CUDA_ERROR_STUB_LIBRARY ? " (the stub libcuda: no driver installed)"
                 : r == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ? " (driver and kernel module versions differ)"
                                                       : "");
        open_rc = -1;
        return;
    }
#define DSK_CU_RESOLVE(f, version)                                                                          \
    {                                                                                              \
        CUdriverProcAddressQueryResult st;                                                         \
        void *p = NULL;                                                                            \
        if (getproc(#f, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || !p) { \
            snprintf(open_msg, sizeof open_msg,                                                    \
                     "no CUDA device: the driver has no %s (needs a driver for CUDA %d.%d)", #f,   \
                     CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);                               \
            open_rc = -1;                                                                          \
            return;                                                                                \
        }                                                                                          \
        memcpy(&cu.f, &p, sizeof p);                                                               \
    }
    DSK_CU_FUNCS(DSK_CU_RESOLVE)
#undef DSK_CU_RESOLVE
    open_rc = 0;
}

int dsk_cuda_open(void)
{
    pthread_once(&open_once, open_driver);
    if (open_rc)
        return dsk_err("%s", open_msg);
    return 0;
}

int dsk_cu_fail(CUresult r, const char *what)
{
    const char *name = NULL, *text = NULL;
    if (cu.cuGetErrorName)
        cu.cuGetErrorName(r, &name);
    if (cu.cuGetErrorString)
        cu.cuGetErrorString(r, &text);
    return dsk_err("%s: %s (%s)", what, name ? name : "CUDA error", text ? text : "no description");
}

int dsk_gpu_open(int ordinal, dsk_gpu *g)
{
    memset(g, 0, sizeof *g);
    if (dsk_cuda_open())
        return -1;
    int count = 0;
    CU_TRY(cu.cuDeviceGetCount(&count));
    if (ordinal < 0 || ordinal >= count)
        return dsk_err("no CUDA device %d (this machine has %d)", ordinal, count);
    g->ordinal = ordinal;
    CU_TRY(cu.cuDeviceGet(&g->dev, ordinal));
    CU_TRY(cu.cuDeviceGetName(g->name, sizeof g->name, g->dev));
    CU_TRY(cu.cuDeviceGetAttribute(&g->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g->dev));
    CU_TRY(cu.cuDeviceGetAttribute(&g->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g->dev));
    CU_TRY(cu.cuDeviceGetAttribute(&g->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g->dev));
    CU_TRY(cu.cuDeviceGetAttribute(&g->smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, g->dev));
    CU_TRY(cu.cuDeviceTotalMem(&g->total_mem, g->dev));
    CU_TRY(cu.cuDevicePrimaryCtxRetain(&g->ctx, g->dev));
    CUresult r = cu.cuCtxSetCurrent(g->ctx);
    if (r != CUDA_SUCCESS) {
        cu.cuDevicePrimaryCtxRelease(g->dev);
        g->ctx = NULL;
        return dsk_cu_fail(r, "cuCtxSetCurrent");
    }
    return 0;
}

void dsk_gpu_close(dsk_gpu *g)
{
    if (g->ctx)
        cu.cuDevicePrimaryCtxRelease(g->dev);
    g->ctx = NULL;
}
