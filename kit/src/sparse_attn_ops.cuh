// The asm-backed primitives of the sparse_attn kernels, each a small function: the bf16 tensor-core mma,
// the transposing shared-memory fragment load, and 16-byte cp.async. Under DSK_EMU (the CPU emulator)
// each has a twin with the same semantics.
#pragma once
#include "dskit_kernel.cuh"

#ifndef DSK_DYNAMIC_SMEM
// The kernel's dynamic shared memory.
#define DSK_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

#ifndef DSK_EMU
// D += A·B, mma.m16n8k16 bf16 inputs, fp32 accumulate, the PTX ISA fragment layouts: a[0..3] = A rows
// g, g+8 at k 2q..2q+1 and 2q+8..2q+9 (g = lane/4, q = lane%4); b0, b1 = B column g at the same k.
__device__ __forceinline__ void sa_mma_bf16(float *d, const u32 *a, u32 b0, u32 b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ldmatrix.x4.trans: lane L gives the address of row L%8 of 8x8 bf16 matrix L/8 (16 contiguous bytes);
// r[i] receives matrix i's elements [2q][g] and [2q+1][g] (low half first): the B fragment of a k x n
// tile stored k-major.
__device__ __forceinline__ void sa_ldsm_x4_trans(u32 *r, const void *row)
{
    u32 a = (u32)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// 16-byte global -> shared copy (both addresses 16-byte aligned), landing by sa_cp_wait.
__device__ __forceinline__ void sa_cp16(void *smem, const void *g)
{
    u32 a = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(g) : "memory");
}
__device__ __forceinline__ void sa_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's committed copy groups are still in flight.
template <int N> __device__ __forceinline__ void sa_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
#else
// Under the emulator (tests/emu, docs/emulator.md): the kit's own twins of the mma and of cp.async, and
// the transposing load built from shuffles (the emulator has no ldmatrix): matrix i's rows 2q and 2q+1
// are the addresses lanes 8i+2q and 8i+2q+1 gave; this lane takes column g of both.
#include "dsk_mma.cuh"
__device__ __forceinline__ void sa_mma_bf16(float *d, const u32 *a, u32 b0, u32 b1)
{
    dsk_mma_16816_bf16(d, a[0], a[1], a[2], a[3], b0, b1);
}
__device__ __forceinline__ void sa_cp16(void *smem, const void *g) { dsk_cp_async16(dsk_smem_addr(smem), g); }
__device__ __forceinline__ void sa_cp_commit() { dsk_cp_async_commit(); }
template <int N> __device__ __forceinline__ void sa_cp_wait() { dsk_cp_async_wait<N>(); }
__device__ __forceinline__ void sa_ldsm_x4_trans(u32 *r, const void *row)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    unsigned long long mine = (unsigned long long)row;
    for (int i = 0; i < 4; i++) {
        const u16 *r0 = (const u16 *)__shfl_sync(0xffffffffu, mine, 8 * i + 2 * q);
        const u16 *r1 = (const u16 *)__shfl_sync(0xffffffffu, mine, 8 * i + 2 * q + 1);
        r[i] = (u32)r0[g] | (u32)r1[g] << 16;
    }
}
#endif
