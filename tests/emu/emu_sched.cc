// The emulator's runtime: the fiber scheduler behind emu.h, the mma of the PTX ISA fragment layouts,
// deferred cp.async copies, and a stand-in CUDA driver (host memory, synchronous launches that run the
// registered kernel variants, CTAs in a shuffled order).
#include "tests/emu/emu.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <map>
#include <string>
#include <vector>

emu_thread *emu_cur;
emu_dim emu_block, emu_grid;
unsigned char *emu_smem;

namespace {

const size_t STACK = 256 << 10;

struct fiber {
    emu_thread t;
    ucontext_t ctx;
    char *stack = nullptr;
    int done = 0;
    int wait_scope = -1; /* -1 runnable, 0 warp barrier, 1 CTA barrier */
    unsigned wait_gen = 0;
    std::vector<std::vector<std::pair<unsigned, const void *>>> groups; /* committed cp.async groups */
    std::vector<std::pair<unsigned, const void *>> open;                /* not yet committed */
};

struct warp_state {
    int arrived = 0;
    unsigned gen = 0;
    unsigned long long slot[32];
    unsigned mma[32][10];
    float acc[32][4];
};

std::vector<fiber> fibers;
std::vector<warp_state> warps;
int cta_arrived;
unsigned cta_gen;
int nthreads;
ucontext_t sched;
emu_entry cur_entry;
void **cur_args;
const char *cur_name;

std::map<std::string, emu_entry> &registry()
{
    static std::map<std::string, emu_entry> r;
    return r;
}

void die(const char *what)
{
    fprintf(stderr, "emulator: %s in %s, block (%u,%u,%u)\n", what, cur_name, emu_block.x, emu_block.y, emu_block.z);
    exit(3);
}

fiber &me()
{
    return *(fiber *)emu_cur;
}

void yield_wait(int scope, unsigned gen)
{
    fiber &f = me();
    f.wait_scope = scope;
    f.wait_gen = gen;
    swapcontext(&f.ctx, &sched);
}

void run_fiber()
{
    cur_entry(cur_args);
    me().done = 1;
    swapcontext(&me().ctx, &sched);
}

int runnable(const fiber &f)
{
    if (f.done)
        return 0;
    if (f.wait_scope < 0)
        return 1;
    unsigned gen = f.wait_scope == 0 ? warps[f.t.tid.x / 32].gen : cta_gen;
    return gen != f.wait_gen;
}

} // namespace

emu_reg::emu_reg(const char *symbol, emu_entry fn)
{
    registry()[symbol] = fn;
}

void emu_syncthreads()
{
    unsigned gen = cta_gen;
    if (++cta_arrived == nthreads) {
        cta_arrived = 0;
        cta_gen++;
        return;
    }
    yield_wait(1, gen);
    me().wait_scope = -1;
}

void emu_syncwarp()
{
    warp_state &w = warps[threadIdx.x / 32];
    int size = nthreads - (int)(threadIdx.x / 32) * 32 < 32 ? nthreads % 32 : 32;
    unsigned gen = w.gen;
    if (++w.arrived == size) {
        w.arrived = 0;
        w.gen++;
        return;
    }
    yield_wait(0, gen);
    me().wait_scope = -1;
}

unsigned long long emu_exchange(unsigned long long mine, int src)
{
    warp_state &w = warps[threadIdx.x / 32];
    w.slot[threadIdx.x & 31] = mine;
    emu_syncwarp();
    unsigned long long r = w.slot[src];
    emu_syncwarp();
    return r;
}

/* PTX ISA mma.m16n8k16, .f16 A/B, .f32 C/D; g = lane/4, t = lane%4:
 *   A register j of lane l: A[g + 8(j&1)][2t + 8(j>>1) + h], h = 0 low half, 1 high half
 *   B register j of lane l: B[2t + 8j + h][g]
 *   C/D element i of lane l: D[g + 8(i>>1)][2t + (i&1)]
 * Each output is the exact sum of its 16 products plus c, rounded once to fp32. */
void emu_mma(float *d, const unsigned *a, unsigned b0, unsigned b1)
{
    warp_state &w = warps[threadIdx.x / 32];
    int lane = threadIdx.x & 31;
    for (int j = 0; j < 4; j++)
        w.mma[lane][j] = a[j];
    w.mma[lane][4] = b0;
    w.mma[lane][5] = b1;
    emu_syncwarp();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        int g = l / 4, t = l % 4;
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++)
                A[g + 8 * (j & 1)][2 * t + 8 * (j >> 1) + h] = f16_to_f32((uint16_t)(w.mma[l][j] >> (16 * h)));
        for (int j = 0; j < 2; j++)
            for (int h = 0; h < 2; h++)
                B[2 * t + 8 * j + h][g] = f16_to_f32((uint16_t)(w.mma[l][4 + j] >> (16 * h)));
    }
    int g = lane / 4, t = lane % 4;
    float out[4];
    for (int i = 0; i < 4; i++) {
        int r = g + 8 * (i >> 1), c = 2 * t + (i & 1);
        double s = d[i];
        for (int k = 0; k < 16; k++)
            s += (double)A[r][k] * (double)B[k][c];
        out[i] = (float)s;
    }
    emu_syncwarp();
    for (int i = 0; i < 4; i++)
        d[i] = out[i];
}

void emu_cp16(unsigned saddr, const void *g)
{
    if (((uintptr_t)g & 15) || (saddr & 15))
        die("cp.async with an address not 16-byte aligned");
    me().open.push_back({saddr, g});
}

void emu_cp_commit()
{
    fiber &f = me();
    f.groups.push_back(f.open);
    f.open.clear();
}

void emu_cp_wait(int n)
{
    fiber &f = me();
    while ((int)f.groups.size() > n) {
        for (auto &c : f.groups.front())
            memcpy(emu_smem + c.first, c.second, 16);
        f.groups.erase(f.groups.begin());
    }
}

/* ---- the stand-in driver ---- */

static CUresult CUDAAPI fake_alloc(CUdeviceptr *p, size_t n)
{
    void *m = aligned_alloc(256, (n + 255) & ~(size_t)255);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(m, 0xA5, n); /* not zero: code that relies on fresh memory being zero shows */
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_free(CUdeviceptr p)
{
    free((void *)(uintptr_t)p);
    return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_htod(CUdeviceptr d, const void *h, size_t n)
{
    memcpy((void *)(uintptr_t)d, h, n);
    return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_dtoh(void *h, CUdeviceptr d, size_t n)
{
    memcpy(h, (const void *)(uintptr_t)d, n);
    return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_memset32(CUdeviceptr d, unsigned v, size_t n)
{
    unsigned *p = (unsigned *)(uintptr_t)d;
    for (size_t i = 0; i < n; i++)
        p[i] = v;
    return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_sync(CUstream)
{
    return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_ctx_sync(void)
{
    return CUDA_SUCCESS;
}

static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;
static unsigned rnd(unsigned n)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

struct emu_kernel_handle {
    emu_entry fn;
    std::string name;
};

static CUresult CUDAAPI fake_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                    unsigned bz, unsigned smem, CUstream, void **args, void **)
{
    emu_kernel_handle *k = (emu_kernel_handle *)f;
    if (by != 1 || bz != 1 || bx == 0 || bx > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    std::vector<unsigned> order((size_t)gx * gy * gz);
    for (size_t i = 0; i < order.size(); i++)
        order[i] = (unsigned)i;
    for (size_t i = order.size(); i > 1; i--)
        std::swap(order[i - 1], order[rnd((unsigned)i)]);
    std::vector<unsigned char> dyn(smem + 16);
    emu_smem = dyn.data();
    nthreads = (int)bx;
    fibers.assign(bx, fiber());
    warps.assign((bx + 31) / 32, warp_state());
    cur_entry = k->fn;
    cur_args = args;
    cur_name = k->name.c_str();
    emu_grid = {gx, gy, gz};
    for (unsigned o : order) {
        emu_block = {o % gx, (o / gx) % gy, o / (gx * gy)};
        memset(dyn.data(), 0xCD, dyn.size()); /* shared memory starts as garbage */
        cta_arrived = 0;
        for (auto &w : warps)
            w.arrived = 0;
        for (unsigned t = 0; t < bx; t++) {
            fiber &fb = fibers[t];
            fb.t.tid = {t, 0, 0};
            fb.done = 0;
            fb.wait_scope = -1;
            fb.groups.clear();
            fb.open.clear();
            if (!fb.stack)
                fb.stack = (char *)malloc(STACK);
            getcontext(&fb.ctx);
            fb.ctx.uc_stack.ss_sp = fb.stack;
            fb.ctx.uc_stack.ss_size = STACK;
            fb.ctx.uc_link = &sched;
            makecontext(&fb.ctx, run_fiber, 0);
        }
        for (;;) {
            int any = 0, alive = 0;
            for (unsigned t = 0; t < bx; t++) {
                fiber &fb = fibers[t];
                alive += !fb.done;
                if (!runnable(fb))
                    continue;
                any = 1;
                emu_cur = &fb.t;
                swapcontext(&sched, &fb.ctx);
            }
            if (!alive)
                break;
            if (!any)
                die("deadlock: threads wait at a barrier that the others never reach (or they exited)");
        }
    }
    for (auto &fb : fibers)
        free(fb.stack);
    fibers.clear();
    return CUDA_SUCCESS;
}

/* grids run one at a time here, so a programmatic dependent launch is a plain one */
static CUresult CUDAAPI fake_launch_ex(const CUlaunchConfig *c, CUfunction f, void **args, void **extra)
{
    return fake_launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                       c->sharedMemBytes, c->hStream, args, extra);
}

extern "C" {
#include "runtime/driver/cuda_api.h"
#include "runtime/driver/kit.h"
}

/* Install the stand-in driver and point every kit kernel with an emulated variant at it. Returns the
 * number of kernels without one. */
extern "C" int emu_install(kit *k)
{
    cu.cuMemAlloc = fake_alloc;
    cu.cuMemFree = fake_free;
    cu.cuMemcpyHtoD = fake_htod;
    cu.cuMemcpyDtoH = fake_dtoh;
    cu.cuMemsetD32 = fake_memset32;
    cu.cuStreamSynchronize = fake_sync;
    cu.cuCtxSynchronize = fake_ctx_sync;
    cu.cuLaunchKernel = fake_launch;
    cu.cuLaunchKernelEx = fake_launch_ex;
    int missing = 0;
    for (int i = 0; i < kit_nkernels(k); i++) {
        kit_kernel *kk = (kit_kernel *)kit_kernel_at(k, i);
        auto it = registry().find(kk->meta->symbol);
        if (it == registry().end()) {
            missing++;
            continue;
        }
        kk->fn = (CUfunction) new emu_kernel_handle{it->second, kk->meta->symbol};
    }
    return missing;
}
