// Streaming read of a large buffer with 16-byte loads: the card's attainable read bandwidth, the roofline
// every other benchmark divides by. Each block folds what it read into one word so nothing is elided.
#include "dskit_kernel.cuh"

DSK_KERNEL void __launch_bounds__(P_BLOCK) DSK_SYMBOL(const uint4 *__restrict__ src, u64 n16, u32 *__restrict__ out)
{
    u32 acc = 0;
    u64 stride = (u64)gridDim.x * P_BLOCK;
    u64 i = (u64)blockIdx.x * P_BLOCK + threadIdx.x;
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride), c = __ldcs(src + i + 2 * stride),
              d = __ldcs(src + i + 3 * stride);
        acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n16; i += stride) {
        uint4 a = __ldcs(src + i);
        acc ^= a.x ^ a.y ^ a.z ^ a.w;
    }
    for (int o = 16; o > 0; o >>= 1)
        acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    __shared__ u32 part[P_BLOCK / 32];
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        u32 r = 0;
        for (int w = 0; w < P_BLOCK / 32; w++)
            r ^= part[w];
        out[blockIdx.x] = r;
    }
}
