// EXL3 input transform for many rows (exl3.md §3 steps 1-2): x' = fp16(Hadamard128(fp16(x·suh))) of bf16
// rows, written in the fragment order exl3_mm reads with EXL3_F_XF: [row group][k/16 chunk][lane][4 fp16].
// The same device code as exl3_mm's fused transform, so the same bits. Rows past `rows` (up to the
// padded count the grid covers) are written as zeros. Grid (k/128, padded rows/8, matrices); warp w of
// the CTA transforms row 8·blockIdx.y + w with matrix blockIdx.z's suh (flags EXL3_F_BLOCKDIAG: d0 is the
// matrices' descriptor array and matrix m's input is x's columns [m·k, (m+1)·k)).
#include "exl3_util.cuh"

DSK_KERNEL void __launch_bounds__(256) DSK_SYMBOL(const exl3_desc *d0, const exl3_desc *d1, const exl3_desc *d2,
                                                  const exl3_desc *d3, const u16 *x, int ldx, int rows, u32 *xf,
                                                  i64 xf_stride, int flags)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int kb = blockIdx.x, rg = blockIdx.y, m = blockIdx.z;
    const int bd = (flags & EXL3_F_BLOCKDIAG) != 0;
    const exl3_desc *d = bd ? d0 + m : m == 0 ? d0 : m == 1 ? d1 : m == 2 ? d2 : d3;
    if (bd)
        x += (i64)m * d->k;
    int kc = d->k / 16, r = rg * 8 + warp;
    uint2 o = make_uint2(0, 0);
    if (r < rows) {
        uint2 s4 = *(const uint2 *)((const u16 *)d->suh + kb * 128 + 4 * lane);
        uint2 x4 = *(const uint2 *)(x + (i64)r * ldx + kb * 128 + 4 * lane);
        o = exl3_transform4(x4, s4, lane);
    }
    u32 *dst = xf + (i64)m * xf_stride / 2 + ((i64)rg * kc + kb * 8) * 64;
    int i = exl3_xf_index(warp, lane);
    dst[i] = o.x;
    dst[i + 2] = o.y;
}
