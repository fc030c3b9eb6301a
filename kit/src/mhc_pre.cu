// hc_pre of model.md §3.4 (reference hc_pre in runtime/ref/mhc.c), one block of T threads per row:
// y = bf16(Σ_i w_i·X[r][i]) per element, streams added in order with the CPU's roundings (no FMA), w read
// at w + r·w_stride (π, or a coefficient row's pre): bit-equal to the reference. With a norm weight g,
// out = RMSNorm(y)·g with rmsnorm.cu's arithmetic and reduction order (thread t takes the 8-element
// vectors t, t+T, ...; per-thread fma sum of squares in element order, warp butterfly, warps added in
// order; T = the rmsnorm rule's for d), so the fused result equals op_rmsnorm on y bit for bit; y itself
// goes to y_raw when given (else only the normed row is written). Memory-bound: reads hc·d bf16 per row.
#define HC P_HC
#include "mhc_pre.cuh"

DSK_KERNEL void __launch_bounds__(P_T)
    DSK_SYMBOL(const u16 *__restrict__ x, const float *__restrict__ w, int w_stride, const u16 *__restrict__ g,
               float eps, u16 *__restrict__ out, u16 *__restrict__ y_raw, int rows, int d)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    __shared__ uint4 ybuf[MHC_PRE_MAX_D / 8];
    if ((int)blockIdx.x >= rows)
        return;
    pre_row<P_T>(x, w, w_stride, g, eps, out, y_raw, (int)blockIdx.x, d, ybuf);
}
