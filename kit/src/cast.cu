// Elementwise casts the forward needs between families, exact (the CPU's f32_to_bf16): MODE 0 rounds fp32
// to bf16 (a summed partial into the bf16 the next family reads); MODE 1 keeps fp32 holding bf16 values,
// y = bf16(bf16(x) · scale) (the indexer's head weights, model.md §3.5). One thread per 4 elements.
#include "dskit_kernel.cuh"

__device__ __forceinline__ float bf16_round_f(float x) { return bf16_bits_to_f32(f32_to_bf16_bits(x)); }

DSK_KERNEL void __launch_bounds__(256) DSK_SYMBOL(const float *__restrict__ x, void *__restrict__ y, long long n,
                                                  float scale)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * 4;
    if (i >= n)
        return;
    int m = n - i < 4 ? (int)(n - i) : 4;
    for (int j = 0; j < m; j++) {
#if P_MODE == 0
        ((u16 *)y)[i + j] = f32_to_bf16_bits(x[i + j]);
#else
        ((float *)y)[i + j] = bf16_round_f(__fmul_rn(bf16_round_f(x[i + j]), scale));
#endif
    }
}
