// engram_rows: the Engram table rows of a round dequantised to bf16 (model.md §3.3; runtime/ref/
// engram_rows.h): out[p][col·w + i] = bf16(e4m3(value_i) · e8m0(scale_{i/32})) for positions p < n and
// columns col < cols, row by row. P_SRC 0: the rows are records the host uploaded (w e4m3 bytes, then
// w/32 e8m0 scales, record p·cols + col); 1: a device-resident table (values [rows][w], scales
// [rows][w/32]) read at the i64 row indices idx[p][col]. Exact: the product of an e4m3 value and a power of
// two is one rounding in fp32, then bf16's (a NaN code or scale gives the CPU's NaN, 0x7fc0). Tuned for
// 1-64 positions × 24 rows of 256: one thread per 8 values (one 8-byte load where records are
// 8-byte aligned, i.e. w a multiple of 256, else byte loads; one 16-byte store).
#include "dskit_kernel.cuh"

#define ER_T 256 // threads per block

__device__ __forceinline__ u16 engram_value(u32 code, u32 scale)
{
    if ((code & 0x7fu) == 0x7fu || scale == 0xffu)
        return 0x7fc0;
    u32 sign = (code & 0x80u) << 24, exp = (code >> 3) & 0xfu, mant = code & 7u;
    float v = exp == 0 ? __uint_as_float(sign | __float_as_uint(__fmul_rn((float)mant, 0x1p-9f)))
                       : __uint_as_float(sign | ((exp + 120u) << 23) | (mant << 20));
    float s = __uint_as_float(scale == 0 ? 0x00400000u : scale << 23); // 2^(scale - 127); 2^-127 is subnormal
    return f32_to_bf16_bits(__fmul_rn(v, s));
}

DSK_KERNEL void __launch_bounds__(ER_T) DSK_SYMBOL(const u8 *__restrict__ rec, const u8 *__restrict__ values,
                                                  const u8 *__restrict__ scales, const i64 *__restrict__ idx,
                                                  u16 *__restrict__ out, i64 out_stride, int n, int cols, int w)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int per_row = w >> 3;
    const i64 t = (i64)blockIdx.x * ER_T + threadIdx.x;
    if (t >= (i64)n * cols * per_row)
        return;
    const i64 r = t / per_row; // record / lookup p·cols + col
    const int j = (int)(t % per_row), p = (int)(r / cols), col = (int)(r % cols);
    const u8 *val, *sc;
#if P_SRC == 0
    const i64 rb = w + w / 32;
    val = rec + r * rb;
    sc = val + w;
#else
    const i64 row = idx[r];
    val = values + row * w;
    sc = scales + row * (w / 32);
#endif
    u32 b[8];
    if (((unsigned long long)val & 7) == 0) {
        unsigned long long q = *(const unsigned long long *)(val + 8 * j);
#pragma unroll
        for (int e = 0; e < 8; e++)
            b[e] = (u32)(q >> (8 * e)) & 0xffu;
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++)
            b[e] = val[8 * j + e];
    }
    const u32 s = sc[j >> 2]; // 8 values of one 32-block
    u32 o[4];
#pragma unroll
    for (int e = 0; e < 4; e++)
        o[e] = (u32)engram_value(b[2 * e], s) | (u32)engram_value(b[2 * e + 1], s) << 16;
    ((uint4 *)(out + (i64)p * out_stride + (i64)col * w))[j] = make_uint4(o[0], o[1], o[2], o[3]);
}
