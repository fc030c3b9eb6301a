// vec_glue: per row of `heads` bf16 vectors of `width`, in the CPU forward's order: optional RMSNorm with a
// bf16 weight, optional RoPE of the last R dims at the row's position (or its conjugate), optional KV
// quantise-dequantise (P_Q, runtime/common/kv_quant.h: 0 none, 1 FP8 e4m3 /32, 2 FP4 e2m1 /16 with an e4m3
// scale, 3 FP4 e2m1 /32 with an e8m0 scale), in place or to another buffer. Tuned for the decode and
// prompt shapes of q_norm (1280), window keys and latents (512), index keys and queries (128): one warp
// per vector, the vector held in registers (P_C 16-byte chunks per lane, width <= 256·P_C) from its one
// load to its one store; an in-place RoPE alone touches only the rotated chunks.
//
// Sum order (the only reduction, RMSNorm's Σx²): lane l adds x² of its chunks l, l+32, l+64, ... in that
// order, a chunk's 8 values in index order (fused multiply-add), then the warp's butterfly (warp_sum);
// fixed by the width alone, so a vector's bits never depend on the other rows or the launch.
// Everything else is elementwise with explicit _rn intrinsics (NVRTC would contract a*b+c into an FMA;
// the CPU has none), the same operations in the same order as runtime/ref (rmsnorm, rope, kvquant):
// RoPE's angle is fp32(pos)·θ′_j in fp32, cos and sin are taken in double and rounded to float, which is
// ref_rope_table's entry; the QDQ block maximum is exact in any order, scales and codes are integer
// rules. So only the norm's Σx² can differ from the CPU (by its order).
#include "dskit_kernel.cuh"
#include "vec_glue_abi.cuh"

__device__ __forceinline__ float bf_lo(u32 p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float bf_hi(u32 p) { return __uint_as_float(p & 0xffff0000u); }
__device__ __forceinline__ u32 bf_pack(float lo, float hi)
{
    return (u32)f32_to_bf16_bits(lo) | (u32)f32_to_bf16_bits(hi) << 16;
}

// REF's power-of-two scale: f's exponent, plus one if any mantissa bit is set (kvq_pow2_ceil).
__device__ __forceinline__ float pow2_ceil(float f)
{
    u32 u = __float_as_uint(f);
    u32 e = (u >> 23) & 0xffu;
    if (u & 0x7fffffu)
        e++;
    return __uint_as_float(e << 23);
}

// fp32 -> e4m3 code as runtime/common/numerics.c f32_to_e4m3 (RNE, subnormals kept, saturating at 448).
__device__ __forceinline__ u32 e4m3_encode(float f)
{
    if (f != f)
        return 0x7fu;
    u32 u = __float_as_uint(f), sign = (u >> 24) & 0x80u, au = u & 0x7fffffffu;
    float a = __uint_as_float(au);
    if (a >= 448.0f)
        return sign | 0x7eu;
    if (a < 0x1p-6f) // subnormal grid: multiples of 2^-9 (8 is the smallest normal, code 0x08)
        return sign | (u32)rintf(__fmul_rn(a, 512.0f));
    int e = (int)(au >> 23) - 127;
    u32 m = au & 0x7fffffu, q = m >> 20, rem = m & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (q & 1u)))
        q++;
    if (q == 8u) {
        q = 0;
        e++;
    }
    u32 code = (u32)((e + 7) << 3) | q;
    return sign | (code > 0x7eu ? 0x7eu : code);
}

// e4m3 code -> fp32 (exact); 0x7f / 0xff are NaN.
__device__ __forceinline__ float e4m3_decode(u32 b)
{
    u32 sign = (b & 0x80u) << 24, exp = (b >> 3) & 0xfu, mant = b & 7u;
    if (exp == 0xfu && mant == 7u)
        return __uint_as_float(0x7fc00000u);
    if (exp == 0)
        return __uint_as_float(sign | __float_as_uint(__fmul_rn((float)mant, 0x1p-9f)));
    return __uint_as_float(sign | ((exp + 120u) << 23) | (mant << 20));
}

// The e2m1 grid value nearest |q| (ties to the even code: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2,
// 3.5->4, 5->4), saturating at 6, with the sign of x (the quotient's sign, also for a NaN): the value
// f32_to_e2m1 + e2m1_to_f32 give after the CPU's clamp to ±6.
__device__ __forceinline__ float e2m1_round(float q, u32 x_bits)
{
    float a = fabsf(q);
    float m = a <= 0.25f ? 0.0f : a < 0.75f ? 0.5f : a <= 1.25f ? 1.0f : a < 1.75f ? 1.5f
            : a <= 2.5f ? 2.0f : a < 3.5f ? 3.0f : a <= 5.0f ? 4.0f : 6.0f;
    return __uint_as_float(__float_as_uint(m) | (x_bits & 0x80000000u));
}

// x / s: for the power-of-two scales (Q 1, 3) x times 1/s (exact: both are the exact quotient rounded
// once, subnormal and overflowing results included), else the IEEE division.
template <int Q> __device__ __forceinline__ float qdq_quot(float x, float s, float inv)
{
    return Q == 2 ? __fdiv_rn(x, s) : __fmul_rn(x, inv);
}

// One value of a QDQ block with scale s (inv = 1/s, exact for Q 1 and 3): bf16(round(clamp(x / s)) · s).
template <int Q> __device__ __forceinline__ u16 qdq_value(float x, float s, float inv)
{
    if (Q == 1) {
        float q = qdq_quot<Q>(x, s, inv);
        q = q > 448.0f ? 448.0f : q < -448.0f ? -448.0f : q;
        u32 code = e4m3_encode(q);
        if ((code & 0x7fu) == 0x7fu) // a NaN input: the CPU's NaN constant times s, rounded
            return 0x7fc0;
        return f32_to_bf16_bits(__fmul_rn(e4m3_decode(code), s));
    }
    return f32_to_bf16_bits(__fmul_rn(e2m1_round(qdq_quot<Q>(x, s, inv), __float_as_uint(x)), s));
}

// A 16-byte chunk's 8 values quantised and dequantised with scale s. Not inlined: one body per kind,
// called per chunk, so a launch fetches its code once instead of once per value of every chunk (the
// unrolled form was 0.34-0.76 MB of code per mixed variant, and a decode launch runs it cold).
template <int Q> __device__ __noinline__ uint4 qdq_chunk(uint4 c, float s)
{
    u32 w[4] = {c.x, c.y, c.z, c.w};
    const float inv = Q == 2 ? 0.0f : __frcp_rn(s); // s a power of two: 1/s exact
#pragma unroll
    for (int j = 0; j < 4; j++)
        w[j] = (u32)qdq_value<Q>(bf_lo(w[j]), s, inv) | (u32)qdq_value<Q>(bf_hi(w[j]), s, inv) << 16;
    return make_uint4(w[0], w[1], w[2], w[3]);
}

// The block's scale from its amax (already floored).
template <int Q> __device__ __forceinline__ float qdq_scale(float amax)
{
    if (Q == 1)
        return pow2_ceil(__fmul_rn(amax, __fdiv_rn(1.0f, 448.0f)));
    if (Q == 2)
        return e4m3_decode(e4m3_encode(__fdiv_rn(amax, 6.0f)));
    return pow2_ceil(__fmul_rn(amax, __fdiv_rn(1.0f, 6.0f)));
}

// One op of the launch, QDQ kind Q, on this block's VG_WARPS vectors.
template <int Q>
__device__ __forceinline__ void glue(const u16 *x, u16 *y, const int *__restrict__ yi, const u16 *__restrict__ w,
                                     const float *__restrict__ freqs,
                                     const int *__restrict__ pos, int rows, int heads, int width, int x_stride,
                                     int y_stride, int rope_dim, int flags, float eps)
{
    flags &= VG_NORM | VG_ROPE | VG_INVERSE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const i64 nvec = (i64)rows * heads;
    const i64 vec = (i64)blockIdx.x * VG_WARPS + warp;
    const int nch = width >> 3;                  // 16-byte chunks of a vector
    const int c0 = (width - rope_dim) >> 3;      // first rotated chunk
    const int half = rope_dim >> 1;
    // The warps of a block share one row when heads is a multiple of VG_WARPS: its angles are computed
    // once for the block (uniform over the launch; no warp leaves early then, nvec being a multiple too).
    const bool share = (flags & VG_ROPE) && heads % VG_WARPS == 0;
    // An in-place RoPE alone reads and writes only the rotated chunks.
    const bool only_rot = flags == VG_ROPE || flags == (VG_ROPE | VG_INVERSE);
    const bool touch_all = !(Q == 0 && only_rot && x == y && x_stride == y_stride);
    __shared__ float2 cs_shared[32];
    if (!share && vec >= nvec)
        return;
    const int row = (int)(vec / heads), head = (int)(vec % heads);
    // with yi, the row's result goes to y row yi[row], and nowhere when that is < 0 (the vector is then
    // not computed: in a block that shares one row's angles, every warp skips alike)
    const int yrow = vec < nvec && yi ? yi[row] : row;
    const bool live = vec < nvec && yrow >= 0;
    const uint4 *xv = (const uint4 *)(x + (i64)row * x_stride + (i64)head * width);
    uint4 *yv = (uint4 *)(y + (i64)yrow * y_stride + (i64)head * width);

    u32 v[P_C][4];
#pragma unroll
    for (int k = 0; k < P_C; k++) {
        int c = lane + 32 * k;
        uint4 t = make_uint4(0, 0, 0, 0);
        if (live && c < nch && (touch_all || c >= c0))
            t = xv[c];
        v[k][0] = t.x, v[k][1] = t.y, v[k][2] = t.z, v[k][3] = t.w;
    }

    // cos/sin of pair `lane` (lanes < half), computed while the loads are in flight
    float cs = 0.0f, sn = 0.0f;
    if (flags & VG_ROPE) {
        if ((!share || warp == 0) && lane < half && live) {
            float angle = __fmul_rn((float)pos[row], freqs[lane]);
            double sd, cd;
            sincos((double)angle, &sd, &cd);
            cs = (float)cd;
            sn = (float)sd;
            if (flags & VG_INVERSE)
                sn = -sn;
            if (share)
                cs_shared[lane] = make_float2(cs, sn);
        }
        if (share) {
            __syncthreads();
            if (lane < half) {
                float2 t = cs_shared[lane];
                cs = t.x, sn = t.y;
            }
        }
    }
    if (!live)
        return;

    if (flags & VG_NORM) {
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < P_C; k++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float a = bf_lo(v[k][j]), b = bf_hi(v[k][j]);
                ss = __fmaf_rn(a, a, ss);
                ss = __fmaf_rn(b, b, ss);
            }
        ss = warp_sum(ss);
        const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)width), eps)));
        const uint4 *wv = (const uint4 *)w;
#pragma unroll
        for (int k = 0; k < P_C; k++) {
            int c = lane + 32 * k;
            if (c >= nch)
                continue;
            uint4 g = wv[c];
            u32 q[4] = {g.x, g.y, g.z, g.w};
#pragma unroll
            for (int j = 0; j < 4; j++)
                v[k][j] = bf_pack(__fmul_rn(__fmul_rn(bf_lo(v[k][j]), inv), bf_lo(q[j])),
                                  __fmul_rn(__fmul_rn(bf_hi(v[k][j]), inv), bf_hi(q[j])));
        }
    }

    if (flags & VG_ROPE) {
#pragma unroll
        for (int k = 0; k < P_C; k++) {
            if (32 * k + 31 < c0 || 32 * k >= nch) // no lane of this step holds a rotated chunk (uniform)
                continue;
            int c = lane + 32 * k, p0 = (c - c0) * 4; // pair index of the chunk's first pair
            bool rot = c >= c0 && c < nch;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float cj = __shfl_sync(0xffffffffu, cs, (p0 + j) & 31);
                float sj = __shfl_sync(0xffffffffu, sn, (p0 + j) & 31);
                if (rot) {
                    float a = bf_lo(v[k][j]), b = bf_hi(v[k][j]);
                    float re = __fsub_rn(__fmul_rn(a, cj), __fmul_rn(b, sj));
                    float im = __fadd_rn(__fmul_rn(a, sj), __fmul_rn(b, cj));
                    v[k][j] = bf_pack(re, im);
                }
            }
        }
    }

    if (Q != 0) {
        // Blocks of 32 values are 4 consecutive chunks (lanes 4m..4m+3 of one step), blocks of 16 are 2;
        // the launcher requires width to be a multiple of the block, so no block spans lanes that hold none.
        const float floor_amax = Q == 2 ? 6.0f * 0x1p-9f : Q == 1 ? 1e-4f : 6.0f * 0x1p-126f;
#pragma unroll
        for (int k = 0; k < P_C; k++) {
            if (32 * k >= nch)
                continue;
            float amax = floor_amax;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float a = fabsf(bf_lo(v[k][j])), b = fabsf(bf_hi(v[k][j]));
                amax = a > amax ? a : amax;
                amax = b > amax ? b : amax;
            }
            float o = __shfl_xor_sync(0xffffffffu, amax, 1);
            amax = o > amax ? o : amax;
            if (Q != 2) {
                o = __shfl_xor_sync(0xffffffffu, amax, 2);
                amax = o > amax ? o : amax;
            }
            const float s = qdq_scale<Q>(amax);
            const uint4 qd = qdq_chunk<Q>(make_uint4(v[k][0], v[k][1], v[k][2], v[k][3]), s);
            v[k][0] = qd.x, v[k][1] = qd.y, v[k][2] = qd.z, v[k][3] = qd.w;
        }
    }

#pragma unroll
    for (int k = 0; k < P_C; k++) {
        int c = lane + 32 * k;
        if (c < nch && (touch_all || c >= c0))
            yv[c] = make_uint4(v[k][0], v[k][1], v[k][2], v[k][3]);
    }
}

// Up to VG_MAX_OPS independent ops in one launch, op blockIdx.y (grid x: the most blocks any op needs;
// the blocks past an op's vectors do nothing). P_Q 0..3: every op has that QDQ kind; VG_MIXED: each its
// own (flags bits VG_Q_SHIFT..+1), a uniform branch per block.
#define VG_OP_PARAMS(i)                                                                                          \
    const u16 *x##i, u16 *y##i, const int *yi##i, const u16 *w##i, const float *f##i, const int *p##i, int h##i, \
        int wd##i, int xs##i, int ys##i, int rd##i, int fl##i, float e##i

DSK_KERNEL void __launch_bounds__(VG_WARPS * 32)
    DSK_SYMBOL(int rows, VG_OP_PARAMS(0), VG_OP_PARAMS(1), VG_OP_PARAMS(2))
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    // this block's op: its arguments picked first, so one copy of the op's code serves the three slots
    // (the blocks of different ops share the lines they fetch)
    const int o = blockIdx.y;
#define VG_PICK(n) (o == 0 ? n##0 : o == 1 ? n##1 : n##2)
    const u16 *x = VG_PICK(x), *w = VG_PICK(w);
    u16 *y = VG_PICK(y);
    const int *yi = VG_PICK(yi), *p = VG_PICK(p);
    const float *f = VG_PICK(f);
    const int h = VG_PICK(h), wd = VG_PICK(wd), xs = VG_PICK(xs), ys = VG_PICK(ys), rd = VG_PICK(rd);
    const int fl = VG_PICK(fl);
    const float e = VG_PICK(e);
#undef VG_PICK
#if P_Q == VG_MIXED
    const int q = (fl >> VG_Q_SHIFT) & 3;
    if (q == 0)
        glue<0>(x, y, yi, w, f, p, rows, h, wd, xs, ys, rd, fl, e);
    else if (q == 1)
        glue<1>(x, y, yi, w, f, p, rows, h, wd, xs, ys, rd, fl, e);
    else if (q == 2)
        glue<2>(x, y, yi, w, f, p, rows, h, wd, xs, ys, rd, fl, e);
    else
        glue<3>(x, y, yi, w, f, p, rows, h, wd, xs, ys, rd, fl, e);
#else
    glue<P_Q>(x, y, yi, w, f, p, rows, h, wd, xs, ys, rd, fl, e);
#endif
}
