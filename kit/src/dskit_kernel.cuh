// Shared by every kernel source of the kit. The builder compiles each variant with its parameters as
// -D definitions (axis NAME as the macro P_NAME), DSK_SYMBOL = the variant's exported name and DSK_SM = the target's SM number.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

// Every variant exports one extern "C" entry point named after its parameters.
#define DSK_KERNEL extern "C" __global__

__device__ __forceinline__ float bf16_bits_to_f32(u16 h) { return __uint_as_float((u32)h << 16); }

// fp32 -> bf16 bits, round to nearest even (NaN kept quiet), the same as the CPU's f32_to_bf16.
__device__ __forceinline__ u16 f32_to_bf16_bits(float f)
{
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (u16)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

// Instructions a kernel can only reach through inline PTX go through the helpers below (and dsk_mma.cuh).
// Under DSK_EMU (the CPU emulator, tests/emu, docs/emulator.md) each helper has a twin calling the
// emulator; a kernel with its own asm does not build there.
#ifndef DSK_EMU
// The kernel's dynamic shared memory (16-byte aligned).
#define DSK_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

// Programmatic dependent launch (the family is marked "pdl"): wait until the grid before this one has
// finished and its writes are visible; let the grid after this one start its own prologue. Without
// the launch attribute both return at once.
__device__ __forceinline__ void dsk_pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void dsk_pdl_launch_next() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

// 16-byte loads as volatile asm, so the compiler keeps them where they are written (ahead of the work
// that uses them) instead of sinking each next to its use: streaming (evict first) and read-only.
__device__ __forceinline__ uint4 dsk_ld_stream16(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 dsk_ld_nc16(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// 16-byte volatile store and load (one access each, past L1: other GPUs' and ranks' words).
__device__ __forceinline__ void dsk_st_volatile16(void *p, uint4 v)
{
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ uint4 dsk_ld_volatile16(const void *p)
{
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p)
                 : "memory");
    return v;
}

// The shared-memory address of a generic pointer into shared memory (what cp.async takes).
__device__ __forceinline__ u32 dsk_smem_addr(const void *p) { return (u32)__cvta_generic_to_shared(p); }

// 16-byte global -> shared copy that bypasses L1 (both addresses 16-byte aligned); it lands once a
// dsk_cp_async_wait<N> leaves at most N committed groups of this thread in flight.
__device__ __forceinline__ void dsk_cp_async16(u32 saddr, const void *g)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr), "l"(g) : "memory");
}
// An L2 policy that marks what it is given to as the first to go (data read once, so the rest stays).
__device__ __forceinline__ u64 dsk_l2_evict_first()
{
    u64 p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
// dsk_cp_async16 with an L2 policy from dsk_l2_evict_first.
__device__ __forceinline__ void dsk_cp_async16_once(u32 saddr, const void *g, u64 pol)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(saddr), "l"(g), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ void dsk_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void dsk_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// 2^x on the special-function unit: ex2.approx.ftz (about 2 ulp; subnormal results flush to zero,
// 2^-inf = +0). exp2f would add a subnormal fix-up around the same instruction.
__device__ __forceinline__ float dsk_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#else
#define DSK_DYNAMIC_SMEM(name) unsigned char *name = emu_dynamic_smem()
__device__ __forceinline__ void dsk_pdl_wait() {}        // grids run one at a time
__device__ __forceinline__ void dsk_pdl_launch_next() {}
__device__ __forceinline__ uint4 dsk_ld_stream16(const uint4 *p) { return *p; }
__device__ __forceinline__ uint4 dsk_ld_nc16(const uint4 *p) { return *p; }
__device__ __forceinline__ void dsk_st_volatile16(void *p, uint4 v)
{
    volatile unsigned *q = (volatile unsigned *)p;
    q[0] = v.x, q[1] = v.y, q[2] = v.z, q[3] = v.w;
}
__device__ __forceinline__ uint4 dsk_ld_volatile16(const void *p)
{
    const volatile unsigned *q = (const volatile unsigned *)p;
    return uint4{q[0], q[1], q[2], q[3]};
}
__device__ __forceinline__ u32 dsk_smem_addr(const void *p) { return emu_smem_addr(p); }
__device__ __forceinline__ void dsk_cp_async16(u32 saddr, const void *g) { emu_cp_async16(saddr, g); }
__device__ __forceinline__ u64 dsk_l2_evict_first() { return 0; }
__device__ __forceinline__ void dsk_cp_async16_once(u32 saddr, const void *g, u64) { emu_cp_async16(saddr, g); }
__device__ __forceinline__ void dsk_cp_async_commit() { emu_cp_async_commit(); }
template <int N> __device__ __forceinline__ void dsk_cp_async_wait() { emu_cp_async_wait(N); }
__device__ __forceinline__ float dsk_ex2(float x) { return exp2f(x); }
#endif

// Warp-wide sum with a fixed butterfly order: every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
