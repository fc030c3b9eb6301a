// The emulator's stand-in CUDA driver. The emulator is a shared library named libcuda.so.1 that exports
// cuInit and cuGetProcAddress_v2, so the runtime's own dsk_cuda_open (runtime/driver/cuda_api.c) fills
// its `cu` table from here and nothing else in the runtime changes. Every entry of DSK_CU_FUNCS is
// implemented (a new entry without one does not compile). Device memory is host memory (a device pointer
// is a host address), work runs at once on the calling thread, one grid at a time; streams carry capture
// state and the first error; graphs replay captured launches (with their arguments copied at capture),
// copies, memsets and event records in order. Launches are checked as the hardware checks them.
#include "tests/emu/emu_launch.h"

#include <cuda.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "manifest/manifest.h"
#include "runtime/driver/cuda_api.h"
}

#define EMU_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const char *const DEVICE_NAME = "dskit emulator (CPU)";
const int SMEM_OPTIN = 227 * 1024; /* sm_90's opt-in limit per block */
const int SMEM_DEFAULT = 48 * 1024;

std::recursive_mutex mu;
#define LOCKED std::lock_guard<std::recursive_mutex> lock_(mu)

struct config {
    int sm = 90, sms = 132, devices = 1, quiet = 0;
    size_t mem = (size_t)16384 << 20;
} cfg;

int env_int(const char *name, int dflt)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

void read_config()
{
    cfg.sm = env_int("DSKIT_EMU_SM", 90);
    cfg.sms = env_int("DSKIT_EMU_SMS", 132);
    cfg.devices = env_int("DSKIT_EMU_DEVICES", 1);
    cfg.quiet = env_int("DSKIT_EMU_QUIET", 0);
    cfg.mem = (size_t)env_int("DSKIT_EMU_MEM_MB", 16384) << 20;
}

void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void note(const char *fmt, ...)
{
    if (cfg.quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dskit-emu: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

const char *err_name(CUresult r);

/* report a refused call and return its code */
CUresult refuse(CUresult r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
CUresult refuse(CUresult r, const char *fmt, ...)
{
    if (cfg.quiet)
        return r;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dskit-emu: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, ": %s\n", err_name(r));
    va_end(ap);
    return r;
}

double now_ms()
{
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/* ---- objects behind the handles; a handle is valid while it is in its set ---- */

struct module;
struct function {
    module *mod;
    std::string symbol;
    const emu_kernel_def *def; /* null: in the kit but not compiled into this emulator */
    int max_threads = 1024, regs = 0, smem_static = 0, max_dyn = SMEM_DEFAULT, carveout = -1;
};
struct module {
    std::vector<function *> fns;
    const unsigned char *image;
    size_t len; /* 0: not a CUDA ELF (any symbol resolves) */
};
struct stream;
struct event {
    unsigned flags;
    int recorded = 0;
    double t = 0;
    stream *from = nullptr; /* recorded into an open capture: by this stream, after its seq-th operation */
    size_t seq = 0;
};

enum node_kind { N_KERNEL, N_COPY, N_SET, N_EVENT };
struct node {
    node_kind kind;
    function *fn = nullptr;
    unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, smem = 0;
    std::vector<unsigned char> params; /* the kernel's arguments, copied at capture */
    std::vector<size_t> offsets;
    void *dst = nullptr;
    const void *src = nullptr;
    size_t bytes = 0;
    unsigned value = 0;
    int elem = 1;
    event *ev = nullptr;
};
struct graph {
    std::vector<node> nodes;
};
struct stream {
    unsigned flags = 0;
    int capturing = 0, invalid = 0;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    pthread_t thread;
    graph *g = nullptr;
    CUresult pending = CUDA_SUCCESS; /* the first error of work on it, returned by the next synchronize */
    /* a stream that joined another's capture (it waited for an event recorded there): that stream, whose
     * graph it records into; its operations since and how many of them the capture has waited for */
    stream *origin = nullptr;
    size_t ops = 0, joined = 0;
};

std::set<void *> modules, functions, events, streams, graphs, execs;
stream legacy; /* the NULL stream, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD */
std::map<uintptr_t, size_t> device_allocs;
std::set<void *> host_allocs;
size_t allocated;
int initialized, ctx_refs;
CUresult ctx_pending = CUDA_SUCCESS;

template <class T> T *as(std::set<void *> &set, void *h)
{
    return set.count(h) ? (T *)h : nullptr;
}

stream *as_stream(CUstream h)
{
    if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
        return &legacy;
    return as<stream>(streams, h);
}

/* [p, p + n) inside one device allocation */
int device_range(CUdeviceptr p, size_t n)
{
    auto it = device_allocs.upper_bound((uintptr_t)p);
    if (it == device_allocs.begin())
        return 0;
    --it;
    return (uintptr_t)p >= it->first && (uintptr_t)p + n <= it->first + it->second;
}

/* ---- stream capture: what a capture records and what it forbids ---- */

const char *mode_name(CUstreamCaptureMode m)
{
    return m == CU_STREAM_CAPTURE_MODE_GLOBAL ? "global" : m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? "thread-local" : "relaxed";
}

/* An API that may synchronize implicitly, called while a capture that forbids it is open (global mode:
 * from any thread; thread-local: from the capturing thread): the driver refuses it and invalidates the
 * capture. */
int capture_forbids(const char *api)
{
    int hit = 0;
    for (void *h : streams) {
        stream *s = (stream *)h;
        if (!s->capturing || s->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
            continue;
        if (s->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && !pthread_equal(s->thread, pthread_self()))
            continue;
        if (!s->invalid)
            note("%s during a stream capture (%s mode) is not allowed: the capture is invalidated", api,
                 mode_name(s->mode));
        s->invalid = 1;
        hit = 1;
    }
    return hit;
}

/* ---- running work ---- */

void set_pending(stream *s, CUresult r)
{
    if (s->pending == CUDA_SUCCESS)
        s->pending = r;
    if (ctx_pending == CUDA_SUCCESS)
        ctx_pending = r;
}

CUresult run_kernel(stream *s, function *f, const unsigned *grid, const unsigned *block, unsigned smem, void **args)
{
    emu_grid g = {f->def, {grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, smem, args};
    static char msg[8192];
    int rc = emu_run_grid(&g, msg, sizeof msg);
    if (!rc)
        return CUDA_SUCCESS;
    fprintf(stderr, "dskit-emu: %s\n", msg);
    set_pending(s, (CUresult)rc);
    return (CUresult)rc;
}

CUresult run_node(stream *s, node &n)
{
    switch (n.kind) {
    case N_KERNEL: {
        std::vector<void *> argv(n.offsets.size() + 1);
        for (size_t i = 0; i < n.offsets.size(); i++)
            argv[i] = n.params.data() + n.offsets[i];
        return run_kernel(s, n.fn, n.grid, n.block, n.smem, argv.data());
    }
    case N_COPY: memmove(n.dst, n.src, n.bytes); return CUDA_SUCCESS;
    case N_SET:
        if (n.elem == 1)
            memset(n.dst, (int)(n.value & 0xff), n.bytes);
        else
            for (size_t i = 0; i < n.bytes / 4; i++)
                ((unsigned *)n.dst)[i] = n.value;
        return CUDA_SUCCESS;
    case N_EVENT:
        n.ev->recorded = 1;
        n.ev->t = now_ms();
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_UNKNOWN;
}

/* an operation on stream s: recorded while it captures, done now otherwise */
CUresult submit(stream *s, node &&n, const char *api)
{
    if (s->capturing) {
        if (s->invalid || (s->origin && s->origin->invalid))
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        s->g->nodes.push_back(std::move(n));
        s->ops++;
        return CUDA_SUCCESS;
    }
    if (s == &legacy && capture_forbids(api))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return run_node(s, n);
}

/* the stream whose capture s records into (s itself, or the one it joined) */
stream *capture_origin(stream *s)
{
    return s->origin ? s->origin : s;
}

/* ---- launches ---- */

CUresult launch(CUfunction hf, const unsigned grid[3], const unsigned block[3], unsigned smem, CUstream hs,
                void **params, void **extra, const char *api)
{
    function *f = as<function>(functions, hf);
    stream *s = as_stream(hs);
    if (!f)
        return refuse(CUDA_ERROR_INVALID_HANDLE, "%s: not a function handle", api);
    if (!s)
        return refuse(CUDA_ERROR_INVALID_HANDLE, "%s %s: not a stream handle", api, f->symbol.c_str());
    const char *k = f->symbol.c_str();
    if (extra)
        return refuse(CUDA_ERROR_NOT_SUPPORTED, "%s %s: arguments through `extra` are not emulated, pass kernelParams", api, k);
    unsigned long long threads = (unsigned long long)block[0] * block[1] * block[2];
    if (!grid[0] || !grid[1] || !grid[2] || grid[0] > 0x7fffffffu || grid[1] > 65535 || grid[2] > 65535)
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s %s: grid (%u,%u,%u); x must be 1..2^31-1, y and z 1..65535", api, k,
                      grid[0], grid[1], grid[2]);
    if (!threads || block[0] > 1024 || block[1] > 1024 || block[2] > 64 || threads > 1024)
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s %s: block (%u,%u,%u); at most 1024 threads (x, y <= 1024, z <= 64)",
                      api, k, block[0], block[1], block[2]);
    if ((int)threads > f->max_threads)
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s %s: %llu threads per block, its __launch_bounds__ allow %d", api, k,
                      threads, f->max_threads);
    /* registers are allocated per warp in units of 256 */
    unsigned long long warp_regs = ((unsigned long long)f->regs * 32 + 255) / 256 * 256;
    if (f->regs && (threads + 31) / 32 * warp_regs > 65536)
        return refuse(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "%s %s: %llu threads x %d registers exceed the 64K of a block",
                      api, k, threads, f->regs);
    if ((int)smem > f->max_dyn)
        return refuse(CUDA_ERROR_INVALID_VALUE,
                      "%s %s: %u bytes of dynamic shared memory, the function allows %d (more than %d needs "
                      "cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES))",
                      api, k, smem, f->max_dyn, SMEM_DEFAULT - f->smem_static);
    if ((int)smem + f->smem_static > SMEM_OPTIN)
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s %s: %u + %d bytes of shared memory, the limit is %d", api, k, smem,
                      f->smem_static, SMEM_OPTIN);
    if (!f->def)
        return refuse(CUDA_ERROR_NOT_FOUND,
                      "%s %s: this kernel is in the kit but was not compiled into the emulator (build it with "
                      "tests/emu/build_emu.py, see docs/emulator.md)",
                      api, k);
    if (f->def->nparams && !params)
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s %s: kernelParams is NULL, the kernel takes %d parameters", api, k,
                      f->def->nparams);
    node n;
    n.kind = N_KERNEL;
    n.fn = f;
    memcpy(n.grid, grid, sizeof n.grid);
    memcpy(n.block, block, sizeof n.block);
    n.smem = smem;
    if (s->capturing) {
        /* the arguments as they are now, sized by the kernel's own parameter types */
        size_t off = 0;
        for (int i = 0; i < f->def->nparams; i++) {
            size_t a = f->def->param_align[i];
            off = (off + a - 1) / a * a;
            n.offsets.push_back(off);
            off += f->def->param_size[i];
        }
        n.params.resize(off + 1);
        for (int i = 0; i < f->def->nparams; i++)
            memcpy(n.params.data() + n.offsets[i], params[i], f->def->param_size[i]);
        return submit(s, std::move(n), api);
    }
    if (s == &legacy && capture_forbids(api))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return run_kernel(s, f, grid, block, smem, params);
}

/* ---- error names ---- */

struct err_entry {
    CUresult r;
    const char *name, *text;
};
const err_entry errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation is not permitted in the current state"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not ended in the same stream as it began"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
     "capturing stream has unjoined work"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "dependency created on uncaptured work in another stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const char *err_name(CUresult r)
{
    for (const err_entry &e : errors)
        if (e.r == r)
            return e.name;
    return "CUDA_ERROR_?";
}

/* ---- the driver entry points, one per DSK_CU_FUNCS entry ---- */

CUresult emu_cuDriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGet(CUdevice *d, int ordinal)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= cfg.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetCount(int *n)
{
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = cfg.devices;
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceGetName(char *name, int len, CUdevice d)
{
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= cfg.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return CUDA_SUCCESS;
}

/* What an H200 (sm_90) reports, with the SM count, compute capability and memory configurable. */
CUresult emu_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= cfg.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = cfg.sm / 10; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = cfg.sm % 10; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = cfg.sms; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 0x7fffffff; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = SMEM_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *v = SMEM_OPTIN; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *v = 228 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *v = 6144; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 50 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: *v = 30 << 20; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *v = 2; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *v = 0x100 + d; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *v = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = 1; break;
    default:
        *v = 0;
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute(%d): attribute not modeled (add it to emu_driver.cc)",
                      (int)a);
    }
    return CUDA_SUCCESS;
}

CUresult emu_cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= cfg.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = cfg.mem;
    return CUDA_SUCCESS;
}

CUresult emu_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    static char ctx_storage[8];
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    if (d < 0 || d >= cfg.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCKED;
    ctx_refs++;
    *c = (CUcontext)(void *)(ctx_storage + d % 8);
    return CUDA_SUCCESS;
}

CUresult emu_cuDevicePrimaryCtxRelease(CUdevice d)
{
    if (d < 0 || d >= cfg.devices)
        return CUDA_ERROR_INVALID_DEVICE;
    LOCKED;
    if (ctx_refs > 0)
        ctx_refs--;
    return CUDA_SUCCESS;
}

CUresult emu_cuCtxSetCurrent(CUcontext)
{
    return CUDA_SUCCESS;
}

CUresult emu_cuCtxSynchronize(void)
{
    LOCKED;
    if (capture_forbids("cuCtxSynchronize"))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    CUresult r = ctx_pending;
    ctx_pending = CUDA_SUCCESS;
    legacy.pending = CUDA_SUCCESS;
    for (void *h : streams)
        ((stream *)h)->pending = CUDA_SUCCESS;
    return r;
}

CUresult emu_cuCtxSetLimit(CUlimit, size_t)
{
    return CUDA_SUCCESS;
}

/* The length of a CUDA ELF image (the driver gets no length either), 0 when it is not one. */
size_t elf_length(const unsigned char *p)
{
    if (memcmp(p, "\x7f" "ELF", 4) || p[4] != 2)
        return 0;
    uint64_t shoff, len;
    uint16_t shentsize, shnum;
    memcpy(&shoff, p + 0x28, 8);
    memcpy(&shentsize, p + 0x3a, 2);
    memcpy(&shnum, p + 0x3c, 2);
    len = shoff + (uint64_t)shentsize * shnum;
    for (unsigned i = 0; i < shnum; i++) {
        const unsigned char *sh = p + shoff + (uint64_t)i * shentsize;
        uint32_t type;
        uint64_t off, size;
        memcpy(&type, sh + 4, 4);
        memcpy(&off, sh + 0x18, 8);
        memcpy(&size, sh + 0x20, 8);
        if (type != 8 /* SHT_NOBITS */ && off + size > len)
            len = off + size;
    }
    return mf_cubin_sm(p, (size_t)len) >= 0 ? (size_t)len : 0;
}

CUresult emu_cuModuleLoadData(CUmodule *m, const void *image)
{
    if (!m || !image)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (capture_forbids("cuModuleLoadData"))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    module *mod = new module;
    mod->image = (const unsigned char *)image;
    mod->len = elf_length(mod->image);
    if (mod->len) {
        int sm = mf_cubin_sm(image, mod->len);
        if (sm / 10 != cfg.sm / 10 || sm % 10 > cfg.sm % 10) {
            delete mod;
            return refuse(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData: a cubin for sm_%d on an emulated sm_%d", sm, cfg.sm);
        }
    }
    modules.insert(mod);
    *m = (CUmodule)(void *)mod;
    return CUDA_SUCCESS;
}

CUresult emu_cuModuleUnload(CUmodule hm)
{
    LOCKED;
    module *m = as<module>(modules, hm);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    for (function *f : m->fns) {
        functions.erase(f);
        delete f;
    }
    modules.erase(m);
    delete m;
    return CUDA_SUCCESS;
}

CUresult emu_cuModuleGetFunction(CUfunction *out, CUmodule hm, const char *name)
{
    if (!out || !name)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    module *m = as<module>(modules, hm);
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    for (function *f : m->fns)
        if (f->symbol == name) {
            *out = (CUfunction)(void *)f;
            return CUDA_SUCCESS;
        }
    function *f = new function;
    f->mod = m;
    f->symbol = name;
    f->def = emu_find_kernel(name);
    if (m->len) {
        /* the cubin's own facts: the symbol exists, its registers, launch bounds, static shared memory */
        if (mf_cubin_resources(m->image, m->len, name, &f->regs, &f->max_threads, &f->smem_static)) {
            delete f;
            return CUDA_ERROR_NOT_FOUND;
        }
        if (!f->max_threads)
            f->max_threads = 1024;
    } else if (f->def) {
        f->smem_static = (int)(f->def->smem_end - f->def->smem_begin);
    } else {
        delete f;
        return CUDA_ERROR_NOT_FOUND;
    }
    f->max_dyn = SMEM_DEFAULT - f->smem_static;
    m->fns.push_back(f);
    functions.insert(f);
    *out = (CUfunction)(void *)f;
    return CUDA_SUCCESS;
}

CUresult emu_cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
    if (!mode)
        return CUDA_ERROR_INVALID_VALUE;
    *mode = CU_MODULE_EAGER_LOADING;
    return CUDA_SUCCESS;
}

CUresult emu_cuFuncSetAttribute(CUfunction hf, CUfunction_attribute a, int v)
{
    LOCKED;
    function *f = as<function>(functions, hf);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
        if (v < 0 || v + f->smem_static > SMEM_OPTIN)
            return refuse(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute %s: %d bytes of dynamic shared memory + %d static exceed %d",
                          f->symbol.c_str(), v, f->smem_static, SMEM_OPTIN);
        f->max_dyn = v;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
        if (v < -1 || v > 100)
            return CUDA_ERROR_INVALID_VALUE;
        f->carveout = v;
        return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: return CUDA_SUCCESS;
    default: return refuse(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute %s: attribute %d cannot be set", f->symbol.c_str(), (int)a);
    }
}

CUresult emu_cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction hf)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    function *f = as<function>(functions, hf);
    if (!f)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = f->max_threads; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = f->smem_static; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = f->regs; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *v = cfg.sm; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *v = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *v = f->max_dyn; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *v = f->carveout; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *v = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

CUresult emu_cuFuncLoad(CUfunction hf)
{
    LOCKED;
    return as<function>(functions, hf) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Not in DSK_CU_FUNCS; the driver has it since CUDA 12.4: the kernel's parameter layout (the self-test
 * checks the kit manifest's parameter kinds against it). */
CUresult emu_cuFuncGetParamInfo(CUfunction hf, size_t i, size_t *offset, size_t *size)
{
    LOCKED;
    function *f = as<function>(functions, hf);
    if (!f || !f->def)
        return CUDA_ERROR_INVALID_HANDLE;
    if (i >= (size_t)f->def->nparams)
        return CUDA_ERROR_INVALID_VALUE;
    size_t off = 0;
    for (size_t p = 0; p <= i; p++) {
        size_t a = f->def->param_align[p];
        off = (off + a - 1) / a * a;
        if (p < i)
            off += f->def->param_size[p];
    }
    if (offset)
        *offset = off;
    if (size)
        *size = f->def->param_size[i];
    return CUDA_SUCCESS;
}

CUresult emu_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                            unsigned smem, CUstream s, void **params, void **extra)
{
    LOCKED;
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    return launch(f, grid, block, smem, s, params, extra, "cuLaunchKernel");
}

/* Launch attributes: programmatic dependent launch is accepted (grids run one after another anyway). */
CUresult emu_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    for (unsigned i = 0; i < c->numAttrs; i++) {
        const CUlaunchAttribute &a = c->attrs[i];
        switch (a.id) {
        case CU_LAUNCH_ATTRIBUTE_IGNORE:
        case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        case CU_LAUNCH_ATTRIBUTE_PRIORITY:
        case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
        case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: break;
        case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
            if (a.value.clusterDim.x * a.value.clusterDim.y * a.value.clusterDim.z <= 1)
                break;
            return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernelEx: thread block clusters are not emulated");
        case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
            if (!a.value.cooperative)
                break;
            return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernelEx: cooperative launches are not emulated (blocks run one at a time)");
        default: return refuse(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernelEx: launch attribute %d is not emulated", (int)a.id);
        }
    }
    const unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ}, block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
    return launch(f, grid, block, c->sharedMemBytes, c->hStream, params, extra, "cuLaunchKernelEx");
}

/* ---- memory ---- */

CUresult emu_cuMemAlloc(CUdeviceptr *p, size_t n)
{
    if (!p || !n)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (capture_forbids("cuMemAlloc"))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (allocated + n > cfg.mem)
        return refuse(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(%zu): %zu of %zu MiB in use (DSKIT_EMU_MEM_MB)", n, allocated >> 20,
                      cfg.mem >> 20);
    size_t rounded = (n + 255) & ~(size_t)255;
    void *m = aligned_alloc(256, rounded);
    if (!m)
        return refuse(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(%zu): the host is out of memory", n);
    memset(m, 0xA5, rounded); /* not zero: code that relies on fresh memory being zero shows */
    device_allocs[(uintptr_t)m] = n;
    allocated += n;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}

CUresult emu_cuMemFree(CUdeviceptr p)
{
    LOCKED;
    if (capture_forbids("cuMemFree"))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!p)
        return CUDA_SUCCESS;
    auto it = device_allocs.find((uintptr_t)p);
    if (it == device_allocs.end())
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemFree(0x%llx): not the start of a device allocation", (unsigned long long)p);
    allocated -= it->second;
    device_allocs.erase(it);
    free((void *)(uintptr_t)p);
    return CUDA_SUCCESS;
}

CUresult emu_cuMemGetInfo(size_t *free_bytes, size_t *total)
{
    LOCKED;
    if (free_bytes)
        *free_bytes = cfg.mem - allocated;
    if (total)
        *total = cfg.mem;
    return CUDA_SUCCESS;
}

CUresult emu_cuMemAllocHost(void **p, size_t n)
{
    if (!p || !n)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    if (capture_forbids("cuMemAllocHost"))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    void *m = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    host_allocs.insert(m);
    *p = m;
    return CUDA_SUCCESS;
}

CUresult emu_cuMemFreeHost(void *p)
{
    LOCKED;
    if (capture_forbids("cuMemFreeHost"))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (!host_allocs.erase(p))
        return refuse(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost(%p): not from cuMemAllocHost", p);
    free(p);
    return CUDA_SUCCESS;
}

CUresult copy(const char *api, CUstream hs, int async, void *dst, const void *src, size_t n, int dst_dev, int src_dev)
{
    LOCKED;
    stream *s = as_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (n && ((dst_dev && !device_range((CUdeviceptr)(uintptr_t)dst, n)) || (src_dev && !device_range((CUdeviceptr)(uintptr_t)src, n))))
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s of %zu bytes from %p to %p: the device range is not inside one allocation",
                      api, n, src, dst);
    if (!async && capture_forbids(api))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    node c;
    c.kind = N_COPY;
    c.dst = dst, c.src = src, c.bytes = n;
    return submit(s, std::move(c), api);
}

CUresult emu_cuMemcpyHtoD(CUdeviceptr d, const void *h, size_t n)
{
    return copy("cuMemcpyHtoD", nullptr, 0, (void *)(uintptr_t)d, h, n, 1, 0);
}
CUresult emu_cuMemcpyDtoH(void *h, CUdeviceptr d, size_t n)
{
    return copy("cuMemcpyDtoH", nullptr, 0, h, (const void *)(uintptr_t)d, n, 0, 1);
}
CUresult emu_cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    return copy("cuMemcpyDtoD", nullptr, 0, (void *)(uintptr_t)d, (const void *)(uintptr_t)s, n, 1, 1);
}
CUresult emu_cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
    return copy("cuMemcpyHtoDAsync", s, 1, (void *)(uintptr_t)d, h, n, 1, 0);
}
CUresult emu_cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s)
{
    return copy("cuMemcpyDtoHAsync", s, 1, h, (const void *)(uintptr_t)d, n, 0, 1);
}
CUresult emu_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s)
{
    return copy("cuMemcpyDtoDAsync", s, 1, (void *)(uintptr_t)d, (const void *)(uintptr_t)src, n, 1, 1);
}

CUresult set(const char *api, CUstream hs, int async, CUdeviceptr d, unsigned v, int elem, size_t count)
{
    LOCKED;
    stream *s = as_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (elem == 4 && (d & 3))
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s(0x%llx): the address is not 4-byte aligned", api, (unsigned long long)d);
    if (count && !device_range(d, count * (size_t)elem))
        return refuse(CUDA_ERROR_INVALID_VALUE, "%s of %zu bytes at 0x%llx: not inside one allocation", api,
                      count * (size_t)elem, (unsigned long long)d);
    if (!async && capture_forbids(api))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    node n;
    n.kind = N_SET;
    n.dst = (void *)(uintptr_t)d, n.value = v, n.elem = elem, n.bytes = count * (size_t)elem;
    return submit(s, std::move(n), api);
}

CUresult emu_cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n)
{
    return set("cuMemsetD8", nullptr, 0, d, v, 1, n);
}
CUresult emu_cuMemsetD32(CUdeviceptr d, unsigned v, size_t n)
{
    return set("cuMemsetD32", nullptr, 0, d, v, 4, n);
}
CUresult emu_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s)
{
    return set("cuMemsetD32Async", s, 1, d, v, 4, n);
}

/* ---- streams and events ---- */

CUresult emu_cuStreamCreate(CUstream *out, unsigned flags)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    stream *s = new stream;
    s->flags = flags;
    streams.insert(s);
    *out = (CUstream)(void *)s;
    return CUDA_SUCCESS;
}

/* CUDA IPC: one emulated device in one process has no other process to share memory with. */
CUresult emu_cuIpcGetMemHandle(CUipcMemHandle *, CUdeviceptr)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult emu_cuIpcOpenMemHandle(CUdeviceptr *, CUipcMemHandle, unsigned)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult emu_cuIpcCloseMemHandle(CUdeviceptr)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult emu_cuStreamDestroy(CUstream hs)
{
    LOCKED;
    stream *s = as<stream>(streams, hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!s->origin)
        delete s->g;
    streams.erase(s);
    delete s;
    return CUDA_SUCCESS;
}

CUresult emu_cuStreamSynchronize(CUstream hs)
{
    LOCKED;
    stream *s = as_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing) {
        if (!s->invalid)
            note("cuStreamSynchronize of a capturing stream: the capture is invalidated");
        s->invalid = 1;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (s == &legacy && capture_forbids("cuStreamSynchronize(legacy stream)"))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    CUresult r = s->pending;
    s->pending = CUDA_SUCCESS;
    return r;
}

CUresult emu_cuEventCreate(CUevent *out, unsigned flags)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    event *e = new event;
    e->flags = flags;
    events.insert(e);
    *out = (CUevent)(void *)e;
    return CUDA_SUCCESS;
}

CUresult emu_cuEventDestroy(CUevent he)
{
    LOCKED;
    event *e = as<event>(events, he);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    events.erase(e);
    delete e;
    return CUDA_SUCCESS;
}

CUresult emu_cuEventRecord(CUevent he, CUstream hs)
{
    LOCKED;
    event *e = as<event>(events, he);
    stream *s = as_stream(hs);
    if (!e || !s)
        return CUDA_ERROR_INVALID_HANDLE;
    node n;
    n.kind = N_EVENT;
    n.ev = e;
    CUresult r = submit(s, std::move(n), "cuEventRecord");
    e->from = r == CUDA_SUCCESS && s->capturing ? s : nullptr;
    e->seq = s->ops;
    return r;
}

/* Work is run in the order it is queued, so a wait outside a capture has nothing to wait for. Inside
 * one, as the driver does: a stream that waits for an event recorded in an open capture joins that
 * capture (its work goes into the capture's graph), and a wait by the capture for a joined stream's
 * event joins that stream's work so far back (cuStreamEndCapture refuses a capture with unjoined work). */
CUresult emu_cuStreamWaitEvent(CUstream hs, CUevent he, unsigned flags)
{
    LOCKED;
    event *e = as<event>(events, he);
    stream *s = as_stream(hs);
    if (!e || !s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    stream *from = e->from && e->from->capturing ? e->from : nullptr;
    if (!from) {
        if (s->capturing)
            return refuse(CUDA_ERROR_STREAM_CAPTURE_ISOLATION,
                          "cuStreamWaitEvent: a capturing stream waits for an event recorded outside its capture");
        return CUDA_SUCCESS;
    }
    stream *o = capture_origin(from);
    if (s == &legacy)
        return refuse(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "cuStreamWaitEvent: the legacy stream cannot join a capture");
    if (s->capturing && capture_origin(s) != o)
        return refuse(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "cuStreamWaitEvent: the stream records another capture");
    if (!s->capturing) {
        s->capturing = 1;
        s->invalid = 0;
        s->origin = o;
        s->mode = o->mode;
        s->thread = o->thread;
        s->g = o->g;
        s->ops = s->joined = 0;
    }
    if (from != o && e->seq > from->joined)
        from->joined = e->seq;
    return CUDA_SUCCESS;
}

CUresult emu_cuEventSynchronize(CUevent he)
{
    LOCKED;
    return as<event>(events, he) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult emu_cuEventElapsedTime(float *ms, CUevent ha, CUevent hb)
{
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    event *a = as<event>(events, ha), *b = as<event>(events, hb);
    if (!a || !b || !a->recorded || !b->recorded || (a->flags & CU_EVENT_DISABLE_TIMING) ||
        (b->flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    double d = b->t - a->t;
    *ms = d > 0 ? (float)d : 0.0f;
    return CUDA_SUCCESS;
}

/* ---- capture and graphs ---- */

CUresult emu_cuStreamBeginCapture(CUstream hs, CUstreamCaptureMode mode)
{
    LOCKED;
    stream *s = as_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s == &legacy)
        return refuse(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture: the legacy stream cannot be captured");
    if (s->capturing)
        return refuse(CUDA_ERROR_ILLEGAL_STATE, "cuStreamBeginCapture: the stream is capturing already");
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    s->capturing = 1;
    s->invalid = 0;
    s->mode = mode;
    s->thread = pthread_self();
    s->g = new graph;
    return CUDA_SUCCESS;
}

CUresult emu_cuStreamEndCapture(CUstream hs, CUgraph *out)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    stream *s = as_stream(hs);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = nullptr;
    if (!s->capturing)
        return refuse(CUDA_ERROR_ILLEGAL_STATE, "cuStreamEndCapture: the stream is not capturing");
    if (s->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && !pthread_equal(s->thread, pthread_self()))
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (s->origin)
        return refuse(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "cuStreamEndCapture: the stream joined another's capture");
    graph *g = s->g;
    s->g = nullptr;
    s->capturing = 0;
    int unjoined = 0;
    for (void *h : streams) {
        stream *j = (stream *)h;
        if (j->origin != s)
            continue;
        unjoined |= j->ops != j->joined;
        s->invalid |= j->invalid;
        j->origin = nullptr, j->g = nullptr, j->capturing = 0, j->invalid = 0;
    }
    if (unjoined) {
        delete g;
        return refuse(CUDA_ERROR_STREAM_CAPTURE_UNJOINED,
                      "cuStreamEndCapture: a stream that joined the capture has work the capture did not wait for");
    }
    if (s->invalid) {
        delete g;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    graphs.insert(g);
    *out = (CUgraph)(void *)g;
    return CUDA_SUCCESS;
}

CUresult emu_cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph hg, unsigned long long)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    LOCKED;
    graph *g = as<graph>(graphs, hg);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    graph *e = new graph(*g); /* the executable graph is a copy: destroying the graph leaves it intact */
    execs.insert(e);
    *out = (CUgraphExec)(void *)e;
    return CUDA_SUCCESS;
}

CUresult emu_cuGraphLaunch(CUgraphExec he, CUstream hs)
{
    LOCKED;
    graph *e = as<graph>(execs, he);
    stream *s = as_stream(hs);
    if (!e || !s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->capturing) { /* a graph launched into a capture becomes part of it */
        if (s->invalid)
            return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        for (const node &n : e->nodes)
            s->g->nodes.push_back(n);
        return CUDA_SUCCESS;
    }
    if (s == &legacy && capture_forbids("cuGraphLaunch(legacy stream)"))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    for (size_t i = 0; i < e->nodes.size(); i++) {
        CUresult r = run_node(s, e->nodes[i]);
        if (r != CUDA_SUCCESS) {
            note("cuGraphLaunch: node %zu of %zu failed", i, e->nodes.size());
            return r;
        }
    }
    return CUDA_SUCCESS;
}

CUresult emu_cuGraphExecDestroy(CUgraphExec he)
{
    LOCKED;
    graph *e = as<graph>(execs, he);
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    execs.erase(e);
    delete e;
    return CUDA_SUCCESS;
}

CUresult emu_cuGraphDestroy(CUgraph hg)
{
    LOCKED;
    graph *g = as<graph>(graphs, hg);
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    graphs.erase(g);
    delete g;
    return CUDA_SUCCESS;
}

CUresult emu_cuGetErrorName(CUresult r, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    for (const err_entry &e : errors)
        if (e.r == r) {
            *s = e.name;
            return CUDA_SUCCESS;
        }
    *s = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult emu_cuGetErrorString(CUresult r, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    for (const err_entry &e : errors)
        if (e.r == r) {
            *s = e.text;
            return CUDA_SUCCESS;
        }
    *s = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
}

/* every entry of the runtime's table, type-checked against cuda.h's prototype */
struct proc {
    const char *name;
    void *fn;
};
#define EMU_PROC(f, version) {#f, (void *)static_cast<decltype(&f)>(&emu_##f)},
const proc procs[] = {DSK_CU_FUNCS(EMU_PROC) EMU_PROC(cuFuncGetParamInfo, 0)};
#undef EMU_PROC

} // namespace

EMU_EXPORT CUresult cuInit(unsigned int flags)
{
    LOCKED;
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    if (!initialized)
        read_config();
    initialized = 1;
    return CUDA_SUCCESS;
}

EMU_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int, cuuint64_t,
                                        CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    for (const proc &p : procs)
        if (!strcmp(p.name, symbol)) {
            *pfn = p.fn;
            if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = nullptr;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

/* The emulator's mark (tests/emu/emu_guard.c checks that the libcuda.so.1 it got is this one). */
EMU_EXPORT const char *dskit_emu_info(void)
{
    return "dskit CPU emulator of the CUDA driver (docs/emulator.md)";
}
