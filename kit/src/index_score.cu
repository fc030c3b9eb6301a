// Indexer scores (model.md §3.5) of query rows over their sequence's index keys, REF's rounding points:
// I_j = bf16(Σ_h bf16(relu(bf16(q_h · k_j)) · w_h)), −∞ for j ≥ reach and, with a candidate bitmap,
// outside the row's kept blocks. Tuned to stream the keys at bandwidth (1M keys per row at ratio 1): one
// pass over the keys, nothing staged through shared memory but the per-key head sum.
//
// Grid: x = row, y = slices of the row's keys (any number: a key's score never depends on which block
// computes it). A warp scores tiles of 32 keys; the keys are the M dimension of mma.m16n8k16 (two
// m-tiles), the row's heads its N dimension (P_NH / 8 n-tiles, q held in registers), head_dim 128 its K.
// Sum orders, fixed by the shape: each dot q_h · k_j over 8 k-steps of 16 in ascending order through the
// tensor-core accumulator (fp32); lane (g, t) loads 16 contiguous bytes of each 32-wide block of k for
// key rows g, g + 8 and head g, the same permutation of k on both operands (rowmm.cu); the 32 bf16 terms
// of a key are then added in head order 0..NH-1 by one thread in fp32. Rows of other sequences, other
// rows of the same sequence, the grid and the slice count change nothing in a row's bits.
// Tiles beyond reach, and (candidate bitmap) tiles with no kept block, load nothing.
#include "dskit_kernel.cuh"

#define HD 128                      // index head dim
#define WARPS 4                     // warps per block
#define NT ((P_NH + 7) / 8)         // n-tiles of 8 heads
#define PAIRS (P_NH / 2)            // bf16 head pairs per key
#define ROWW (PAIRS % 4 ? PAIRS + 1 : PAIRS + 4) // words per key row of the transpose (bank-conflict free)
#define NEG_INF __uint_as_float(0xff800000u)

#ifndef DSK_EMU
// D += A·B, mma.m16n8k16 bf16 inputs, fp32 accumulate (PTX fragment layouts; dsk_mma.cuh's form).
__device__ __forceinline__ void idx_mma_bf16(float d[4], const u32 a[4], u32 b0, u32 b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#else
__device__ __forceinline__ void idx_mma_bf16(float d[4], const u32 a[4], u32 b0, u32 b1)
{
    emu_mma_16816(EMU_MMA_BF16, d, a, b0, b1);
}
#endif

__device__ __forceinline__ u32 bf2_bits(__nv_bfloat162 v)
{
    return (u32)__bfloat16_as_ushort(v.x) | (u32)__bfloat16_as_ushort(v.y) << 16;
}
__device__ __forceinline__ __nv_bfloat162 bits_bf2(u32 u)
{
    return __halves2bfloat162(__ushort_as_bfloat16((u16)(u & 0xffff)), __ushort_as_bfloat16((u16)(u >> 16)));
}

// Whether any block of keys [j0, j1) is set in the row's candidate bitmap.
__device__ __forceinline__ int any_candidate(const u32 *bm, int block, int j0, int j1)
{
    int b0 = j0 / block, b1 = (j1 - 1) / block;
    for (int w = b0 >> 5; w <= (b1 >> 5); w++) {
        u32 m = bm[w];
        int lo = w == (b0 >> 5) ? (b0 & 31) : 0, hi = w == (b1 >> 5) ? (b1 & 31) : 31;
        m &= (hi == 31 ? 0xffffffffu : ((1u << (hi + 1)) - 1u)) & (0xffffffffu << lo);
        if (m)
            return 1;
    }
    return 0;
}

DSK_KERNEL void __launch_bounds__(WARPS * 32)
    DSK_SYMBOL(const u16 *__restrict__ q, const float *__restrict__ w, const u16 *__restrict__ keys,
               const int *__restrict__ key_base, const int *__restrict__ reach, const u32 *__restrict__ cand,
               int ldc, int cand_block, int N, float *__restrict__ out, i64 lds)
{
    const int row = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    __shared__ __align__(16) u32 xpose[WARPS][32 * ROWW];
    u32 *xp = xpose[warp];

    int rc = reach[row];
    rc = rc < 0 ? 0 : rc > N ? N : rc;
    const u16 *kb = keys + (i64)key_base[row] * HD;
    const u32 *bm = cand ? cand + (i64)row * ldc : nullptr;
    float *o = out + (i64)row * lds;

    // B fragments: head 8·nt + g, k block b, this lane's 8 contiguous dims; w pairs of heads 8·nt + 2t, +1
    uint4 bq[NT][4];
    u32 wp[NT];
    const u16 *qr = q + (i64)row * P_NH * HD;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        int h = 8 * nt + g;
#pragma unroll
        for (int b = 0; b < 4; b++)
            bq[nt][b] = h < P_NH ? *(const uint4 *)(qr + h * HD + 32 * b + 8 * t) : make_uint4(0, 0, 0, 0);
        int h2 = 8 * nt + 2 * t;
        float w0 = h2 < P_NH ? w[(i64)row * P_NH + h2] : 0.0f, w1 = h2 + 1 < P_NH ? w[(i64)row * P_NH + h2 + 1] : 0.0f;
        wp[nt] = (u32)f32_to_bf16_bits(w0) | (u32)f32_to_bf16_bits(w1) << 16;
    }

    const int tiles = (N + 31) / 32;
    for (int tile = blockIdx.y * WARPS + warp; tile < tiles; tile += gridDim.y * WARPS) {
        const int j0 = tile * 32, jk = j0 + lane; // the key whose score this lane writes
        int active = j0 < rc;
        if (active && bm)
            active = any_candidate(bm, cand_block, j0, min(j0 + 32, rc));
        float score = NEG_INF;
        if (active) {
            // A fragments: key rows 16·mt + 8·hf + g (clamped into reach), 16 bytes of each 32-wide k block
            uint4 ka[2][2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    int j = min(j0 + 16 * mt + 8 * hf + g, rc - 1);
                    const uint4 *p = (const uint4 *)(kb + (i64)j * HD + 8 * t);
#pragma unroll
                    for (int b = 0; b < 4; b++)
                        ka[mt][hf][b] = p[4 * b];
                }
            float acc[2][NT][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        acc[mt][nt][i] = 0.0f;
#pragma unroll
                    for (int b = 0; b < 4; b++) {
                        const uint4 a0 = ka[mt][0][b], a1 = ka[mt][1][b], bb = bq[nt][b];
                        const u32 lo[4] = {a0.x, a1.x, a0.y, a1.y}, hi[4] = {a0.z, a1.z, a0.w, a1.w};
                        idx_mma_bf16(acc[mt][nt], lo, bb.x, bb.y);
                        idx_mma_bf16(acc[mt][nt], hi, bb.z, bb.w);
                    }
                }
            // terms bf16(relu(bf16(dot)) · w_h), two heads per word, into the warp's [key][head pair] rows
            const __nv_bfloat162 zero = __floats2bfloat162_rn(0.0f, 0.0f);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    int c = 4 * nt + t;
                    if (c < PAIRS) {
                        __nv_bfloat162 wv = bits_bf2(wp[nt]);
                        __nv_bfloat162 d0 = __floats2bfloat162_rn(acc[mt][nt][0], acc[mt][nt][1]);
                        __nv_bfloat162 d1 = __floats2bfloat162_rn(acc[mt][nt][2], acc[mt][nt][3]);
                        xp[(16 * mt + g) * ROWW + c] = bf2_bits(__hmul2(__hmax2(d0, zero), wv));
                        xp[(16 * mt + 8 + g) * ROWW + c] = bf2_bits(__hmul2(__hmax2(d1, zero), wv));
                    }
                }
            __syncwarp();
            // lane L adds the terms of key L (tile row L) in head order
            const int kl = lane;
            float sum = 0.0f;
#if PAIRS % 4 == 0
#pragma unroll
            for (int c4 = 0; c4 < PAIRS / 4; c4++) {
                uint4 v = *(const uint4 *)&xp[kl * ROWW + 4 * c4];
                u32 pr[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    sum = __fadd_rn(sum, __uint_as_float(pr[i] << 16));
                    sum = __fadd_rn(sum, __uint_as_float(pr[i] & 0xffff0000u));
                }
            }
#else
#pragma unroll
            for (int c = 0; c < PAIRS; c++) {
                u32 pr = xp[kl * ROWW + c];
                sum = __fadd_rn(sum, __uint_as_float(pr << 16));
                sum = __fadd_rn(sum, __uint_as_float(pr & 0xffff0000u));
            }
#endif
            score = bf16_bits_to_f32(f32_to_bf16_bits(sum));
            __syncwarp();
        }
        if (jk < N) {
            int keep = jk < rc;
            if (keep && bm) {
                int b = jk / cand_block;
                keep = bm[b >> 5] >> (b & 31) & 1u;
            }
            o[jk] = keep ? score : NEG_INF;
        }
    }
}
