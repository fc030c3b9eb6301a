// Candidate-block scores (model.md §3.5, candidate source) of each row: bs[k] = the max of the row's
// index scores over block k's reachable keys (the CPU's loop: keys in order, NaN never taken, the first
// of equal values kept), −∞ for blocks past the row's reach, the newest reachable block (reach − 1) / B
// pinned to +∞ (none for reach 0). One thread per block score, grid (blocks / T, rows): exact, and a
// row's scores never depend on the other rows. Memory-bound (a read of the scores, B floats per thread).
#include "dskit_kernel.cuh"

//
// With bitmap (the row's blocks fit the cap: every block is kept), the kept set too, as cand_mask makes it
// from bs: bit b of word b / 32 set when block b's score is above −∞; a warp's 32 threads are one word
// (a ballot), and the grid covers all ldw words of the row (those past NB get 0).
DSK_KERNEL void __launch_bounds__(P_T) DSK_SYMBOL(const float *__restrict__ scores, i64 lds,
                                                const int *__restrict__ reach, int N, int B, float *__restrict__ bs,
                                                i64 ldb, int NB, u32 *__restrict__ bitmap, int ldw)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int row = blockIdx.y;
    const i64 k = (i64)blockIdx.x * P_T + threadIdx.x;
    const float ninf = __uint_as_float(0xff800000u);
    float mx = ninf;
    if (k < NB) {
        i64 rc = reach[row];
        rc = rc < 0 ? 0 : rc > N ? N : rc;
        const float *s = scores + row * lds;
        const i64 j1 = (k + 1) * B < rc ? (k + 1) * B : rc;
        for (i64 j = k * B; j < j1; j++)
            mx = s[j] > mx ? s[j] : mx;
        if (rc > 0 && k == (rc - 1) / B)
            mx = __uint_as_float(0x7f800000u); /* +inf */
        bs[row * ldb + k] = mx;
    }
    if (bitmap) {
        const u32 m = __ballot_sync(0xffffffffu, k < NB && mx > ninf);
        if ((threadIdx.x & 31) == 0 && k / 32 < ldw)
            bitmap[(i64)row * ldw + k / 32] = m;
    }
}
