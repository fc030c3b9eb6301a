// Embedding and stream expansion (model.md §3.1; reference ref_embed in runtime/ref/embed.c): X[r][c] =
// embed[id[r]] for every stream c, π[r] = one-hot(0). Ids are validated by the host; an id outside
// [0, vocab) is never read and gives zero streams (π still one-hot), as in the reference. One thread per
// 8 elements of a row (16-byte copies); memory-bound: reads d, writes hc·d bf16 per row.
#include "dskit_kernel.cuh"

#define HC P_HC
#define THREADS 256

DSK_KERNEL void __launch_bounds__(THREADS)
    DSK_SYMBOL(const u16 *__restrict__ table, const int *__restrict__ ids, u16 *__restrict__ x, float *__restrict__ pi,
               int rows, int d, int vocab)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int nvec = d / 8;
    const i64 t = (i64)blockIdx.x * THREADS + threadIdx.x;
    if (t >= (i64)rows * nvec)
        return;
    const i64 row = t / nvec;
    const int v = (int)(t - row * nvec);
    const int id = ids[row];
    const uint4 e = id >= 0 && id < vocab ? ((const uint4 *)(table + (i64)id * d))[v] : make_uint4(0, 0, 0, 0);
    uint4 *xr = (uint4 *)(x + row * HC * d);
#pragma unroll
    for (int c = 0; c < HC; c++)
        xr[(i64)c * nvec + v] = e;
    if (v == 0)
#pragma unroll
        for (int c = 0; c < HC; c++)
            pi[row * HC + c] = c == 0 ? 1.0f : 0.0f;
}
