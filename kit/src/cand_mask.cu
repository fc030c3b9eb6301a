// The candidate set of each row as a bitmap over blocks (bit b of word b / 32), what index_score reads
// on the Reindex layers: the blocks whose score is above −∞ (so not NaN), taken from the top-k's output
// (sel_idx ascending, sel_val their scores: the row has more blocks than the cap) or, with sel_idx 0,
// from every block score of bs (the cap keeps them all). One thread per word, no atomics: exact.
#include "dskit_kernel.cuh"

DSK_KERNEL void __launch_bounds__(P_T) DSK_SYMBOL(const float *__restrict__ bs, i64 ldb, int NB,
                                                const int *__restrict__ sel_idx, const float *__restrict__ sel_val,
                                                int k, u32 *__restrict__ bitmap, int ldw)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int row = blockIdx.y, wd = blockIdx.x * P_T + threadIdx.x;
    if (wd >= ldw)
        return;
    const float ninf = __uint_as_float(0xff800000u);
    const int b0 = 32 * wd;
    u32 m = 0;
    if (!sel_idx) {
        const float *r = bs + row * ldb;
        for (int b = 0; b < 32 && b0 + b < NB; b++)
            m |= (u32)(r[b0 + b] > ninf) << b;
    } else {
        const int *id = sel_idx + (i64)row * k;
        const float *val = sel_val + (i64)row * k;
        int lo = 0, hi = k; /* the first entry >= b0 */
        while (lo < hi) {
            int mid = (lo + hi) >> 1;
            if (id[mid] < b0)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (int i = lo; i < k && id[i] < b0 + 32; i++)
            m |= (u32)(val[i] > ninf) << (id[i] - b0);
    }
    bitmap[(i64)row * ldw + wd] = m;
}
