// A CPU emulator of the CUDA features the EXL3 kernels use, so kit/src/exl3_*.cu run unchanged on a
// machine without a GPU (a development tool: tests/emu, docs/exl3-kernels.md).
// Every CUDA thread is a fiber; warp operations (shuffles, mma, __syncwarp) and __syncthreads are
// barriers of a cooperative scheduler, which reports a deadlock when a barrier cannot complete.
// cp.async copies land at cp.async.wait_group, not before, so a read that skips the wait sees stale
// data. The mma follows the PTX ISA fragment layouts of mma.m16n8k16 (written out in emu_rt.cc).
#pragma once
#define EXL3_EMU 1

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_functions.h>
#include <vector_types.h>

extern "C" {
#include "tests/exl3gpu/exl3_host_prims.h"
}

#undef __shared__
#define __shared__ static
#define __launch_bounds__(...)

struct emu_dim {
    unsigned x, y, z;
};
struct emu_thread {
    emu_dim tid;
};
extern emu_thread *emu_cur;
extern emu_dim emu_block, emu_grid;
extern unsigned char *emu_smem;

#define threadIdx (emu_cur->tid)
#define blockIdx emu_block
#define gridDim emu_grid
#define EXL3_DYNAMIC_SMEM(name) unsigned char *name = emu_smem

// scheduler points
void emu_syncthreads();
void emu_syncwarp();
// lane exchange: every lane of the warp publishes 8 bytes, then reads lane `src`'s
unsigned long long emu_exchange(unsigned long long mine, int src);
void emu_mma(float *d, const unsigned *a, unsigned b0, unsigned b1);
void emu_cp16(unsigned saddr, const void *g);
void emu_cp_commit();
void emu_cp_wait(int n);

static inline void __syncthreads() { emu_syncthreads(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_syncwarp(); }
static inline void __threadfence() {}

template <class T> static inline T emu_shfl(T v, int src)
{
    unsigned long long m = 0, r;
    memcpy(&m, &v, sizeof v);
    r = emu_exchange(m, src);
    T out;
    memcpy(&out, &r, sizeof out);
    return out;
}
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int mask) { return emu_shfl(v, (int)(threadIdx.x & 31) ^ mask); }
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return emu_shfl(v, src & 31); }
template <class T> static inline T __shfl_up_sync(unsigned, T v, unsigned d)
{
    int lane = (int)(threadIdx.x & 31);
    T r = emu_shfl(v, lane >= (int)d ? lane - (int)d : lane);
    return r;
}

template <class T> static inline T __ldcg(const T *p)
{
    T v;
    memcpy(&v, p, sizeof v);
    return v;
}
template <class T> static inline void __stcg(T *p, T v) { memcpy(p, &v, sizeof v); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

// the kernels' asm-backed helpers (exl3_util.cuh leaves them out under EXL3_EMU)
typedef unsigned int u32;
static inline void exl3_mma(float *d, const u32 *a, u32 b0, u32 b1) { emu_mma(d, a, b0, b1); }
static inline u32 exl3_smem_addr(const void *p) { return (u32)((const unsigned char *)p - emu_smem); }
static inline void exl3_cp16(u32 saddr, const void *g) { emu_cp16(saddr, g); }
static inline void exl3_cp_commit() { emu_cp_commit(); }
template <int N> static inline void exl3_cp_wait() { emu_cp_wait(N); }
// one grid at a time: nothing to wait for, nobody to start early
static inline void exl3_pdl_wait() {}
static inline void exl3_pdl_launch_next() {}

// kernel registry: each variant's translation unit registers its launch adapter under its kit symbol
typedef void (*emu_entry)(void **args);
struct emu_reg {
    emu_reg(const char *symbol, emu_entry fn);
};
