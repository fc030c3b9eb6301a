// The emulator's own test kernels (a test-only source, never in the kit): tests/emu/build_emu.py compiles
// it once per kernel with -DEMU_TEST_<name> and DSK_SYMBOL = emutest_<name>; tests/emu/emu_selftest.c
// launches them through the driver API and checks the results against the CUDA semantics.
#include "kit/src/dsk_mma.cuh"
#include "kit/src/dskit_kernel.cuh"

#define FULL 0xffffffffu

#if defined(EMU_TEST_barrier)
// Block reversal through shared memory (wrong without the barrier: the threads run in order), and the
// barrier reductions. counts[3b..3b+2] = count(odd), and(>= 0), or(== 7) over block b.
DSK_KERNEL void __launch_bounds__(1024) DSK_SYMBOL(const int *in, int *out, int *counts)
{
    __shared__ int buf[1024];
    int t = threadIdx.x, n = blockDim.x, i = blockIdx.x * n + t;
    buf[t] = in[i];
    __syncthreads();
    out[i] = buf[n - 1 - t];
    int c = __syncthreads_count(in[i] & 1), a = __syncthreads_and(in[i] >= 0), o = __syncthreads_or(in[i] == 7);
    if (t == 0) {
        counts[3 * blockIdx.x] = c;
        counts[3 * blockIdx.x + 1] = a;
        counts[3 * blockIdx.x + 2] = o;
    }
}
#elif defined(EMU_TEST_warp)
// Every warp operation, 16 results per thread.
DSK_KERNEL void DSK_SYMBOL(const int *in, int *out)
{
    int t = threadIdx.x, v = in[t];
    int *o = out + 16 * t;
    o[0] = __shfl_sync(FULL, v, 5);
    o[1] = __shfl_up_sync(FULL, v, 3);
    o[2] = __shfl_down_sync(FULL, v, 3);
    o[3] = __shfl_xor_sync(FULL, v, 9);
    o[4] = __shfl_xor_sync(FULL, v, 2, 8);
    o[5] = __shfl_down_sync(FULL, v, 3, 8);
    o[6] = (int)__ballot_sync(FULL, v & 1);
    o[7] = __any_sync(FULL, v == 42);
    o[8] = __all_sync(FULL, v >= 0);
    o[9] = (int)__match_any_sync(FULL, v % 3);
    o[10] = (int)__reduce_add_sync(FULL, (unsigned)v);
    o[11] = __reduce_min_sync(FULL, v - 50);
    o[12] = (int)__reduce_max_sync(FULL, (unsigned)v);
    o[13] = (int)__activemask();
    if ((t & 31) < 16) // two half-warp groups at once
        o[14] = __shfl_xor_sync(0x0000ffffu, v, 1);
    else
        o[14] = __shfl_xor_sync(0xffff0000u, v, 1);
    __syncwarp();
    u64 w = (u64)v << 33 | 5u;
    o[15] = (int)(__shfl_sync(FULL, w, 31) >> 33);
}
#elif defined(EMU_TEST_atomics)
// i[0] += 1, i[1] = max, i[2] = min, i[3] = CAS-loop += 3, i[4] = exch; u[0] += 2, u[1] |= bit, u[2] &= ~bit,
// u[3] = max, u[4] = min; f[0] += 0.5; l[0] += 2^33, l[1] = CAS-loop += 5.
DSK_KERNEL void DSK_SYMBOL(int *i, unsigned *u, float *f, u64 *l)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&i[0], 1);
    atomicMax(&i[1], (t * 37) % 1001 - 500);
    atomicMin(&i[2], (t * 37) % 1001 - 500);
    int old;
    do
        old = i[3];
    while (atomicCAS(&i[3], old, old + 3) != old);
    atomicExch(&i[4], t);
    atomicAdd(&u[0], 2u);
    atomicOr(&u[1], 1u << (t & 31));
    atomicAnd(&u[2], ~(1u << (t % 17)));
    atomicMax(&u[3], (unsigned)t * 2654435761u);
    atomicMin(&u[4], (unsigned)t * 2654435761u + 1u);
    atomicAdd(&f[0], 0.5f);
    atomicAdd(&l[0], 1ull << 33);
    u64 o;
    do
        o = l[1];
    while (atomicCAS(&l[1], o, o + 5) != o);
}
#elif defined(EMU_TEST_deadlock)
// Threads past the first warp leave; the first warp waits at a barrier nobody else reaches.
DSK_KERNEL void DSK_SYMBOL(int *out)
{
    if (threadIdx.x >= 32)
        return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
#elif defined(EMU_TEST_mismatch)
// The two halves of the block wait at different barriers.
DSK_KERNEL void DSK_SYMBOL(int *out)
{
    if (threadIdx.x < 32)
        __syncthreads();
    else
        __syncthreads();
    out[threadIdx.x] = 1;
}
#elif defined(EMU_TEST_warp_mismatch)
// Half a warp shuffles while the other half votes.
DSK_KERNEL void DSK_SYMBOL(int *out)
{
    int t = threadIdx.x;
    out[t] = (t & 31) < 16 ? __shfl_sync(FULL, t, 0) : (int)__ballot_sync(FULL, 1);
}
#elif defined(EMU_TEST_fault)
// Thread 3 of each block writes through the pointer it is given (a null one: a segmentation fault).
DSK_KERNEL void DSK_SYMBOL(int *p)
{
    if (threadIdx.x == 3)
        p[blockIdx.x] = 1;
}
#elif defined(EMU_TEST_axpy)
// y = a·x + y over n elements (for capture and replay).
DSK_KERNEL void __launch_bounds__(256) DSK_SYMBOL(float a, const float *x, float *y, int n)
{
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n)
        y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]);
}
#elif defined(EMU_TEST_mma)
// One m16n8k16 of each kind: A 16x16 and B 16x8 given row-major (u16 bits), C = 0; D row-major 16x8.
// Lanes load their fragments as the layout in dsk_mma.cuh says.
DSK_KERNEL void DSK_SYMBOL(const u16 *A, const u16 *B, float *D, int bf16)
{
    int l = threadIdx.x, g = l / 4, t = l % 4;
    u32 a[4], b[2];
    for (int j = 0; j < 4; j++) {
        int r = g + 8 * (j & 1), c = 2 * t + 8 * (j >> 1);
        a[j] = (u32)A[r * 16 + c] | (u32)A[r * 16 + c + 1] << 16;
    }
    for (int j = 0; j < 2; j++) {
        int r = 2 * t + 8 * j;
        b[j] = (u32)B[r * 8 + g] | (u32)B[(r + 1) * 8 + g] << 16;
    }
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (bf16)
        dsk_mma_16816_bf16(d, a[0], a[1], a[2], a[3], b[0], b[1]);
    else
        dsk_mma_16816_f16(d, a[0], a[1], a[2], a[3], b[0], b[1]);
    for (int i = 0; i < 4; i++)
        D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = d[i];
}
#elif defined(EMU_TEST_cp_async)
// Each thread copies 16 bytes into dynamic shared memory with cp.async; before[] gets what the thread
// sees before the wait (still the poison), after[] what the block sees after wait + barrier.
DSK_KERNEL void DSK_SYMBOL(const uint4 *src, uint4 *before, uint4 *after, int n16)
{
    DSK_DYNAMIC_SMEM(smem);
    uint4 *s = (uint4 *)smem;
    for (int i = threadIdx.x; i < n16; i += blockDim.x)
        dsk_cp_async16(dsk_smem_addr(s + i), src + i);
    dsk_cp_async_commit();
    before[threadIdx.x] = s[threadIdx.x];
    dsk_cp_async_wait<0>();
    __syncthreads();
    for (int i = threadIdx.x; i < n16; i += blockDim.x)
        after[i] = s[n16 - 1 - i];
}
#elif defined(EMU_TEST_intrinsics)
// Conversions and bit tricks with known answers (one thread).
DSK_KERNEL void DSK_SYMBOL(int *o, float *f)
{
    o[0] = __float2int_rn(2.5f);
    o[1] = __float2int_rn(3.5f);
    o[2] = __float2int_rd(-1.5f);
    o[3] = __float2int_rn(3e9f);
    o[4] = __float2int_rn(__int_as_float(0x7fc00000));
    o[5] = (int)__byte_perm(0x33221100u, 0x77665544u, 0x5140u);
    o[6] = (int)__funnelshift_l(0x80000001u, 0x00000003u, 4);
    o[7] = __popc(0xf0f0f0f0u);
    o[8] = __ffs(0x50);
    o[9] = __clz(1);
    o[10] = (int)__brev(1u);
    o[11] = min(-3, 7) + max(2, 9);
    o[12] = (int)__half_as_ushort(__float2half_rn(1.0f / 3.0f));
    o[13] = (int)__bfloat16_as_ushort(__float2bfloat16_rn(1.0f / 3.0f));
    o[14] = __dp4a((int)0xff020304, 0x01010101, 10);
    long long c0 = clock64(), c1 = clock64();
    o[15] = c0 < c1;
    f[0] = __saturatef(1.5f);
    f[1] = __saturatef(-0.5f);
    f[2] = __half2float(__ushort_as_half(0x3c00));
    f[3] = __bfloat162float(__ushort_as_bfloat16(0x4049));
    f[4] = __fsqrt_rn(2.0f);
    f[5] = __frsqrt_rn(4.0f);
    f[6] = fmaxf(1.0f, __int_as_float(0x7fc00000));
    f[7] = __fdiv_rn(1.0f, 3.0f);
}
#else
#error "emu_selftest.cu: define EMU_TEST_<name>"
#endif
