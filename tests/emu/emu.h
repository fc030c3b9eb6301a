// The CPU emulator's device side (docs/emulator.md): what kit kernels use of CUDA, for kernel sources
// compiled as C++ by tests/emu/emu_kernel.cc. Every CUDA thread is a fiber of a cooperative scheduler
// (emu_sched.cc); __syncthreads and every warp operation (shuffles, votes, matches, reductions,
// __syncwarp, the mma) are scheduler points, so threads of a block interleave only there. Grids run
// one at a time, their blocks one after another, so atomics are plain read-modify-writes.
#ifndef DSK_EMU_H
#define DSK_EMU_H /* not #pragma once: the header is precompiled (build_emu.py) */
#define DSK_EMU 1

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_functions.h>
#include <vector_types.h>

// The host versions of the EXL3 decode primitives (kit/src/exl3_dq.cuh takes them from here outside
// NVRTC; test_exl3_dq.c uses the same file).
extern "C" {
#include "tests/exl3gpu/exl3_host_prims.h"
}

#define EMU_API __attribute__((visibility("hidden")))

// Where a scheduler point was called from: default arguments of the CUDA functions below, so a
// report names the kernel's line, not this header's.
#define EMU_HERE const char *emu_file = __builtin_FILE(), int emu_line = __builtin_LINE()
#define EMU_AT emu_file, emu_line

// ---- thread identity ----
struct emu_ids {
    uint3 tid;
    unsigned linear, lane, warp;
};
EMU_API extern emu_ids *emu_cur; // the running fiber
EMU_API extern uint3 emu_block_idx;
EMU_API extern dim3 emu_block_dim, emu_grid_dim;

#define threadIdx (emu_cur->tid)
#define blockIdx emu_block_idx
#define blockDim emu_block_dim
#define gridDim emu_grid_dim
#define warpSize 32

// ---- CUDA qualifiers (host_defines.h leaves most of them empty for a host compiler) ----
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __constant__
#define __constant__ static
#undef __noinline__
#define __noinline__ __attribute__((noinline))
// __shared__ becomes static storage (emu_kernel.cc puts it in the variant's own section, which the
// scheduler poisons before every block).
#undef __shared__

// ---- the scheduler (emu_sched.cc) ----
enum emu_warp_op_kind {
    EMU_OP_SYNCWARP,
    EMU_OP_SHFL,
    EMU_OP_BALLOT,
    EMU_OP_MATCH_ANY,
    EMU_OP_MATCH_ALL,
    EMU_OP_REDUCE_ADD,
    EMU_OP_REDUCE_MIN_U,
    EMU_OP_REDUCE_MAX_U,
    EMU_OP_REDUCE_MIN_I,
    EMU_OP_REDUCE_MAX_I,
    EMU_OP_REDUCE_AND,
    EMU_OP_REDUCE_OR,
    EMU_OP_REDUCE_XOR,
};
enum { EMU_MMA_F16, EMU_MMA_BF16 };
enum { EMU_BAR_PLAIN, EMU_BAR_COUNT, EMU_BAR_AND, EMU_BAR_OR };

// A block barrier; op EMU_BAR_COUNT/AND/OR reduces pred over the block.
EMU_API int emu_barrier(int op, int pred, const char *file, int line);
// A warp operation over the lanes of mask (a lane outside the block is dropped from it). Every lane of
// mask must reach one with the same kind and mask; value is the lane's operand, src the lane a shuffle
// reads (its own value when src is outside mask). Returns the lane's result.
EMU_API unsigned long long emu_warp_op(int kind, unsigned mask, unsigned long long value, int src, const char *what,
                                      const char *file, int line);
// The lanes of this warp that have not exited.
EMU_API unsigned emu_active_mask();
// Let the other threads of the block run (__nanosleep).
EMU_API void emu_yield();
// Stop the grid with a message naming the kernel, block and thread.
[[noreturn]] EMU_API void emu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
EMU_API unsigned long long emu_clock();

// Twins of the kit's asm helpers (kit/src/dskit_kernel.cuh, dsk_mma.cuh).
EMU_API unsigned char *emu_dynamic_smem();
EMU_API unsigned emu_smem_addr(const void *p);
EMU_API void emu_cp_async16(unsigned saddr, const void *g);
EMU_API void emu_cp_async_commit();
EMU_API void emu_cp_async_wait(int n);
EMU_API void emu_mma_16816(int kind, float d[4], const unsigned a[4], unsigned b0, unsigned b1);

// ---- barriers, warp operations ----
static inline void __syncthreads(EMU_HERE) { emu_barrier(EMU_BAR_PLAIN, 0, EMU_AT); }
static inline int __syncthreads_count(int p, EMU_HERE) { return emu_barrier(EMU_BAR_COUNT, p, EMU_AT); }
static inline int __syncthreads_and(int p, EMU_HERE) { return emu_barrier(EMU_BAR_AND, p, EMU_AT); }
static inline int __syncthreads_or(int p, EMU_HERE) { return emu_barrier(EMU_BAR_OR, p, EMU_AT); }
static inline void __syncwarp(unsigned mask = 0xffffffffu, EMU_HERE)
{
    emu_warp_op(EMU_OP_SYNCWARP, mask, 0, 0, "__syncwarp", EMU_AT);
}
static inline unsigned __activemask() { return emu_active_mask(); }
static inline void __threadfence() {}
static inline void __threadfence_block() {}
static inline void __threadfence_system() {}
static inline void __nanosleep(unsigned) { emu_yield(); }
[[noreturn]] static inline void __trap() { emu_fail("__trap()"); }
static inline long long clock64() { return (long long)emu_clock(); }
static inline int clock() { return (int)emu_clock(); }

template <class T> static inline unsigned long long emu_bits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp operations move up to 8 bytes");
    unsigned long long u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <class T> static inline T emu_from_bits(unsigned long long u)
{
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
static inline int emu_lane() { return (int)emu_cur->lane; }

// Shuffles: width splits the warp into segments of that many lanes (a power of two up to 32).
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, EMU_HERE)
{
    int lane = emu_lane(), s = (lane & ~(width - 1)) + (src & (width - 1));
    return emu_from_bits<T>(emu_warp_op(EMU_OP_SHFL, mask, emu_bits(v), s, "__shfl_sync", EMU_AT));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32, EMU_HERE)
{
    int lane = emu_lane(), s = (lane & (width - 1)) >= (int)d ? lane - (int)d : lane;
    return emu_from_bits<T>(emu_warp_op(EMU_OP_SHFL, mask, emu_bits(v), s, "__shfl_up_sync", EMU_AT));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32, EMU_HERE)
{
    int lane = emu_lane(), s = (lane & (width - 1)) + (int)d < width ? lane + (int)d : lane;
    return emu_from_bits<T>(emu_warp_op(EMU_OP_SHFL, mask, emu_bits(v), s, "__shfl_down_sync", EMU_AT));
}
// A lane in a later segment than the caller's gives the caller its own value (CUDA's rule).
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m, int width = 32, EMU_HERE)
{
    int lane = emu_lane(), s = lane ^ (m & 31);
    if ((s & ~(width - 1)) > (lane & ~(width - 1)))
        s = lane;
    return emu_from_bits<T>(emu_warp_op(EMU_OP_SHFL, mask, emu_bits(v), s, "__shfl_xor_sync", EMU_AT));
}
static inline unsigned __ballot_sync(unsigned mask, int pred, EMU_HERE)
{
    return (unsigned)emu_warp_op(EMU_OP_BALLOT, mask, pred != 0, 0, "__ballot_sync", EMU_AT);
}
static inline int __any_sync(unsigned mask, int pred, EMU_HERE)
{
    return emu_warp_op(EMU_OP_BALLOT, mask, pred != 0, 0, "__any_sync", EMU_AT) != 0;
}
static inline int __all_sync(unsigned mask, int pred, EMU_HERE)
{
    unsigned m = mask & emu_active_mask();
    return (unsigned)emu_warp_op(EMU_OP_BALLOT, mask, pred != 0, 0, "__all_sync", EMU_AT) == m;
}
static inline int __uni_sync(unsigned mask, int pred, EMU_HERE)
{
    unsigned m = mask & emu_active_mask(), b = (unsigned)emu_warp_op(EMU_OP_BALLOT, mask, pred != 0, 0, "__uni_sync", EMU_AT);
    return b == 0 || b == m;
}
template <class T> static inline unsigned __match_any_sync(unsigned mask, T v, EMU_HERE)
{
    return (unsigned)emu_warp_op(EMU_OP_MATCH_ANY, mask, emu_bits(v), 0, "__match_any_sync", EMU_AT);
}
template <class T> static inline unsigned __match_all_sync(unsigned mask, T v, int *pred, EMU_HERE)
{
    unsigned long long r = emu_warp_op(EMU_OP_MATCH_ALL, mask, emu_bits(v), 0, "__match_all_sync", EMU_AT);
    *pred = (int)(r >> 32);
    return (unsigned)r;
}
#define EMU_REDUCE(name, T, kind)                                                                                 \
    static inline T name(unsigned mask, T v, EMU_HERE)                                                             \
    {                                                                                                              \
        return (T)(unsigned)emu_warp_op(kind, mask, (unsigned)v, 0, #name, EMU_AT);                               \
    }
EMU_REDUCE(__reduce_add_sync, unsigned, EMU_OP_REDUCE_ADD)
EMU_REDUCE(__reduce_add_sync, int, EMU_OP_REDUCE_ADD)
EMU_REDUCE(__reduce_min_sync, unsigned, EMU_OP_REDUCE_MIN_U)
EMU_REDUCE(__reduce_max_sync, unsigned, EMU_OP_REDUCE_MAX_U)
EMU_REDUCE(__reduce_min_sync, int, EMU_OP_REDUCE_MIN_I)
EMU_REDUCE(__reduce_max_sync, int, EMU_OP_REDUCE_MAX_I)
EMU_REDUCE(__reduce_and_sync, unsigned, EMU_OP_REDUCE_AND)
EMU_REDUCE(__reduce_or_sync, unsigned, EMU_OP_REDUCE_OR)
EMU_REDUCE(__reduce_xor_sync, unsigned, EMU_OP_REDUCE_XOR)
#undef EMU_REDUCE

// ---- atomics: one grid, one block, one thread runs at a time ----
template <class T> static inline T emu_rmw_add(T *p, T v)
{
    T old = *p;
    *p = (T)(old + v);
    return old;
}
static inline int atomicAdd(int *p, int v) { return (int)emu_rmw_add((unsigned *)p, (unsigned)v); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return emu_rmw_add(p, v); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) { return emu_rmw_add(p, v); }
static inline float atomicAdd(float *p, float v) { return emu_rmw_add(p, v); }
static inline double atomicAdd(double *p, double v) { return emu_rmw_add(p, v); }
static inline int atomicSub(int *p, int v) { return (int)emu_rmw_add((unsigned *)p, 0u - (unsigned)v); }
static inline unsigned atomicSub(unsigned *p, unsigned v) { return emu_rmw_add(p, 0u - v); }
template <class T> static inline T emu_exch(T *p, T v)
{
    T old = *p;
    *p = v;
    return old;
}
static inline int atomicExch(int *p, int v) { return emu_exch(p, v); }
static inline unsigned atomicExch(unsigned *p, unsigned v) { return emu_exch(p, v); }
static inline unsigned long long atomicExch(unsigned long long *p, unsigned long long v) { return emu_exch(p, v); }
static inline float atomicExch(float *p, float v) { return emu_exch(p, v); }
template <class T> static inline T emu_cas(T *p, T cmp, T v)
{
    T old = *p;
    if (old == cmp)
        *p = v;
    return old;
}
static inline int atomicCAS(int *p, int c, int v) { return emu_cas(p, c, v); }
static inline unsigned atomicCAS(unsigned *p, unsigned c, unsigned v) { return emu_cas(p, c, v); }
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long c, unsigned long long v)
{
    return emu_cas(p, c, v);
}
static inline unsigned short atomicCAS(unsigned short *p, unsigned short c, unsigned short v) { return emu_cas(p, c, v); }
#define EMU_ATOMIC_OP(name, T, expr)                                                                               \
    static inline T name(T *p, T v)                                                                                \
    {                                                                                                              \
        T old = *p;                                                                                                \
        *p = (expr);                                                                                               \
        return old;                                                                                                \
    }
EMU_ATOMIC_OP(atomicMax, int, old > v ? old : v)
EMU_ATOMIC_OP(atomicMax, unsigned, old > v ? old : v)
EMU_ATOMIC_OP(atomicMax, long long, old > v ? old : v)
EMU_ATOMIC_OP(atomicMax, unsigned long long, old > v ? old : v)
EMU_ATOMIC_OP(atomicMin, int, old < v ? old : v)
EMU_ATOMIC_OP(atomicMin, unsigned, old < v ? old : v)
EMU_ATOMIC_OP(atomicMin, long long, old < v ? old : v)
EMU_ATOMIC_OP(atomicMin, unsigned long long, old < v ? old : v)
EMU_ATOMIC_OP(atomicAnd, int, old & v)
EMU_ATOMIC_OP(atomicAnd, unsigned, old & v)
EMU_ATOMIC_OP(atomicAnd, unsigned long long, old & v)
EMU_ATOMIC_OP(atomicOr, int, old | v)
EMU_ATOMIC_OP(atomicOr, unsigned, old | v)
EMU_ATOMIC_OP(atomicOr, unsigned long long, old | v)
EMU_ATOMIC_OP(atomicXor, int, old ^ v)
EMU_ATOMIC_OP(atomicXor, unsigned, old ^ v)
EMU_ATOMIC_OP(atomicXor, unsigned long long, old ^ v)
EMU_ATOMIC_OP(atomicInc, unsigned, old >= v ? 0u : old + 1u)
EMU_ATOMIC_OP(atomicDec, unsigned, (old == 0u || old > v) ? v : old - 1u)
#undef EMU_ATOMIC_OP

// ---- loads and stores with cache hints: plain accesses ----
template <class T> static inline T __ldg(const T *p) { return *p; }
template <class T> static inline T __ldcg(const T *p) { return *p; }
template <class T> static inline T __ldca(const T *p) { return *p; }
template <class T> static inline T __ldcs(const T *p) { return *p; }
template <class T> static inline T __ldlu(const T *p) { return *p; }
template <class T> static inline T __ldcv(const T *p) { return *p; }
template <class T> static inline void __stcg(T *p, T v) { *p = v; }
template <class T> static inline void __stcs(T *p, T v) { *p = v; }
template <class T> static inline void __stwb(T *p, T v) { *p = v; }
template <class T> static inline void __stwt(T *p, T v) { *p = v; }
static inline size_t __cvta_generic_to_shared(const void *p) { return emu_smem_addr(p); }

// ---- float intrinsics. The _rn forms are exact IEEE operations (this file is compiled with
// -ffp-contract=off, so a*b+c is never fused). The approximate ones (__expf, __logf, __fdividef,
// rsqrtf, __sinf...) are the correctly rounded function of the formula the GPU approximates: the GPU's
// bits can differ by a few ulp. ----
static inline float __int_as_float(int i) { return emu_from_bits<float>((unsigned)i); }
static inline int __float_as_int(float f) { return (int)(unsigned)emu_bits(f); }
static inline float __uint_as_float(unsigned u) { return emu_from_bits<float>(u); }
static inline unsigned __float_as_uint(float f) { return (unsigned)emu_bits(f); }
static inline double __longlong_as_double(long long i) { return emu_from_bits<double>((unsigned long long)i); }
static inline long long __double_as_longlong(double d) { return (long long)emu_bits(d); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __frsqrt_rn(float a) { return (float)(1.0 / sqrt((double)a)); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float rsqrtf(float a) { return (float)(1.0 / sqrt((double)a)); }
// glibc declares __expf and friends itself: the CUDA names are macros for the emulator's versions.
static inline float emu_expf(float a) { return exp2f(a * 1.4426950408889634f); }
static inline float emu_exp10f(float a) { return exp2f(a * 3.3219280948873622f); }
static inline float emu_logf(float a) { return log2f(a) * 0.69314718055994531f; }
static inline float emu_log2f(float a) { return log2f(a); }
static inline float emu_log10f(float a) { return log2f(a) * 0.30102999566398120f; }
static inline float emu_powf(float a, float b) { return exp2f(b * log2f(a)); }
static inline float emu_sinf(float a) { return sinf(a); }
static inline float emu_cosf(float a) { return cosf(a); }
static inline float emu_tanf(float a) { return tanf(a); }
static inline void emu_sincosf(float a, float *s, float *c) { *s = sinf(a), *c = cosf(a); }
#define __expf emu_expf
#define __exp10f emu_exp10f
#define __logf emu_logf
#define __log2f emu_log2f
#define __log10f emu_log10f
#define __powf emu_powf
#define __sinf emu_sinf
#define __cosf emu_cosf
#define __tanf emu_tanf
#define __sincosf emu_sincosf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float fdividef(float a, float b) { return a / b; }
static inline float __saturatef(float a) { return a > 0.0f ? (a < 1.0f ? a : 1.0f) : 0.0f; } // NaN -> 0
// float -> int conversions saturate and send NaN to 0, as cvt does.
static inline int emu_f2i(double r)
{
    return r != r ? 0 : r >= 2147483647.0 ? INT_MAX : r <= -2147483648.0 ? INT_MIN : (int)r;
}
static inline unsigned emu_f2u(double r)
{
    return r != r ? 0u : r >= 4294967295.0 ? UINT_MAX : r <= 0.0 ? 0u : (unsigned)r;
}
static inline int __float2int_rn(float a) { return emu_f2i(nearbyint((double)a)); }
static inline int __float2int_rd(float a) { return emu_f2i(floor((double)a)); }
static inline int __float2int_ru(float a) { return emu_f2i(ceil((double)a)); }
static inline int __float2int_rz(float a) { return emu_f2i(trunc((double)a)); }
static inline unsigned __float2uint_rn(float a) { return emu_f2u(nearbyint((double)a)); }
static inline unsigned __float2uint_rd(float a) { return emu_f2u(floor((double)a)); }
static inline unsigned __float2uint_ru(float a) { return emu_f2u(ceil((double)a)); }
static inline unsigned __float2uint_rz(float a) { return emu_f2u(trunc((double)a)); }
static inline float __int2float_rn(int i) { return (float)i; }
static inline float __uint2float_rn(unsigned u) { return (float)u; }

// ---- integer intrinsics ----
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x)
{
    unsigned r = 0;
    for (int i = 0; i < 32; i++)
        r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
static inline unsigned long long __brevll(unsigned long long x)
{
    return (unsigned long long)__brev((unsigned)x) << 32 | __brev((unsigned)(x >> 32));
}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int n = 0; n < 4; n++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
    return r;
}
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s)
{
    return (unsigned)((((unsigned long long)hi << 32 | lo) << (s & 31)) >> 32);
}
static inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s)
{
    return s >= 32 ? lo : __funnelshift_l(lo, hi, s);
}
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s)
{
    return (unsigned)(((unsigned long long)hi << 32 | lo) >> (s & 31));
}
static inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s)
{
    return s >= 32 ? hi : __funnelshift_r(lo, hi, s);
}
static inline unsigned __dp4a(unsigned a, unsigned b, unsigned c)
{
    for (int n = 0; n < 4; n++)
        c += ((a >> (8 * n)) & 0xff) * ((b >> (8 * n)) & 0xff);
    return c;
}
static inline int __dp4a(int a, int b, int c)
{
    for (int n = 0; n < 4; n++)
        c += (int)(signed char)(a >> (8 * n)) * (int)(signed char)(b >> (8 * n));
    return c;
}
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b)
{
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
static inline unsigned __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }
static inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
static inline int __hadd(int a, int b) { return (int)(((long long)a + b) >> 1); }
static inline int __rhadd(int a, int b) { return (int)(((long long)a + b + 1) >> 1); }
static inline unsigned __uhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b) >> 1); }
static inline unsigned __urhadd(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a + b + 1) >> 1); }

// min and max as CUDA overloads them (mixed signedness goes unsigned).
#define EMU_MINMAX(A, B, R)                                                                                        \
    static inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; }                                          \
    static inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
EMU_MINMAX(int, int, int)
EMU_MINMAX(unsigned, unsigned, unsigned)
EMU_MINMAX(int, unsigned, unsigned)
EMU_MINMAX(unsigned, int, unsigned)
EMU_MINMAX(long, long, long)
EMU_MINMAX(unsigned long, unsigned long, unsigned long)
EMU_MINMAX(long long, long long, long long)
EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
EMU_MINMAX(long long, unsigned long long, unsigned long long)
EMU_MINMAX(unsigned long long, long long, unsigned long long)
#undef EMU_MINMAX
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long llmin(long long a, long long b) { return a < b ? a : b; }
static inline long long llmax(long long a, long long b) { return a > b ? a : b; }

#endif
