// The vision tower's glue (vision.md §3), one operation per OP, one parameter list:
//   OP 0  RMSNorm (§3.2): y[r] = bf16(w ⊙ (x[r]·(mean(x²) + 1e-6)^(-1/2))), x bf16, w fp32 multiplied last;
//         a = x, b = w, y; i0 rows, i1 width (% 8 == 0). One warp per row, 16-byte chunks, a butterfly sum.
//   OP 1  2-D RoPE (§3.3), in place on q and k of y = qkv [rows][ld] (q heads at column 0, k heads at
//         i1·i2): i0 rows, i1 heads, i2 head dim, i3 ld; b, c = cos, sin [rows][i2/2] fp32 (the host's
//         table). Rotate-half: dims k and k + i2/2 pair; products and sums rounded one by one, as the CPU.
//   OP 2  space-to-depth (§3.6): y = cells [lh·lw][r²·D] from a = grid [nh][nw][D]: element ch·r² + ki·r + kj
//         of cell (bi, bj) is grid[r·bi + ki][r·bj + kj][ch], zero past the grid; i0 nh, i1 nw, i2 D, i3 r.
#include "dskit_kernel.cuh"

DSK_KERNEL void __launch_bounds__(256) DSK_SYMBOL(const void *a, const void *b, const void *c, void *y, int i0,
                                                  int i1, int i2, int i3)
{
#if P_OP == 0
    const int lane = threadIdx.x & 31, row = blockIdx.x * 8 + (threadIdx.x >> 5), W = i1;
    if (row >= i0)
        return;
    const uint4 *xr = (const uint4 *)((const u16 *)a + (i64)row * W);
    const float *wt = (const float *)b;
    uint4 *yr = (uint4 *)((u16 *)y + (i64)row * W);
    float ss = 0.0f;
    for (int ch = lane; ch < W / 8; ch += 32) {
        uint4 v = xr[ch];
        const u32 wd[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float lo = bf16_bits_to_f32((u16)(wd[e] & 0xffffu)), hi = bf16_bits_to_f32((u16)(wd[e] >> 16));
            ss += lo * lo;
            ss += hi * hi;
        }
    }
    ss = warp_sum(ss);
    const float rs = 1.0f / sqrtf(ss / (float)W + 1e-6f);
    for (int ch = lane; ch < W / 8; ch += 32) {
        uint4 v = xr[ch];
        u32 wd[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int k = ch * 8 + 2 * e;
            float lo = bf16_bits_to_f32((u16)(wd[e] & 0xffffu)), hi = bf16_bits_to_f32((u16)(wd[e] >> 16));
            wd[e] = (u32)f32_to_bf16_bits(__fmul_rn(wt[k], __fmul_rn(lo, rs))) |
                    (u32)f32_to_bf16_bits(__fmul_rn(wt[k + 1], __fmul_rn(hi, rs))) << 16;
        }
        yr[ch] = make_uint4(wd[0], wd[1], wd[2], wd[3]);
    }
#elif P_OP == 1
    const int H = i1, hd = i2, R = hd / 2, ld = i3;
    const i64 total = (i64)i0 * 2 * H * R;
    const float *cs = (const float *)b, *sn = (const float *)c;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (i64)gridDim.x * blockDim.x) {
        int k = (int)(t % R);
        i64 rv = t / R;
        int v = (int)(rv % (2 * H));
        i64 row = rv / (2 * H);
        u16 *p = (u16 *)y + row * ld + (i64)v * hd; /* q heads 0..H-1, then k heads at column H·hd */
        float u = bf16_bits_to_f32(p[k]), w = bf16_bits_to_f32(p[k + R]);
        float co = cs[row * R + k], si = sn[row * R + k];
        p[k] = f32_to_bf16_bits(__fsub_rn(__fmul_rn(u, co), __fmul_rn(w, si)));
        p[k + R] = f32_to_bf16_bits(__fadd_rn(__fmul_rn(w, co), __fmul_rn(u, si)));
    }
#else
    const int nh = i0, nw = i1, D = i2, r = i3, lh = (nh + r - 1) / r, lw = (nw + r - 1) / r, cw = r * r * D;
    const i64 total = (i64)lh * lw * cw;
    const u16 *grid = (const u16 *)a;
    for (i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += (i64)gridDim.x * blockDim.x) {
        int e = (int)(t % cw);
        i64 cell = t / cw;
        int bi = (int)(cell / lw), bj = (int)(cell % lw), ch = e / (r * r), kk = e % (r * r);
        int gy = r * bi + kk / r, gx = r * bj + kk % r;
        ((u16 *)y)[t] = gy < nh && gx < nw ? grid[((i64)gy * nw + gx) * D + ch] : (u16)0;
    }
#endif
}
