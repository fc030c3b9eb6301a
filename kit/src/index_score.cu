// Indexer scores (model.md §3.5) of query rows over their sequence's index keys, REF's rounding points:
// I_j = bf16(Σ_h bf16(relu(bf16(q_h · k_j)) · w_h)), −∞ for j ≥ reach and, with a candidate bitmap,
// outside the row's kept blocks. Tuned to stream the keys at bandwidth (1M keys per row at ratio 1): one
// pass over the keys in registers, the rows' queries and the per-key head sums in shared memory.
//
// Grid: x = groups of `group` consecutive rows (1..QG), y = slices of the keys (any number: a key's
// score never depends on which block computes it). A warp scores tiles of 32 keys; the keys are the M
// dimension of mma.m16n8k16 (two m-tiles), a row's heads its N dimension (P_NH / 8 n-tiles), head_dim
// 128 its K. Rows of a group that share their sequence (equal key_base: a verify window, a prompt chunk)
// share each loaded key tile; other rows load their own. Sum orders, fixed by the shape: each dot
// q_h · k_j over 8 k-steps of 16 in ascending order through the tensor-core accumulator (fp32), lane
// (g, t) taking 16 contiguous bytes of each 32-wide block of k for key rows g, g + 8 and head g (the
// same permutation of k on both operands, rowmm.cu); the 32 bf16 terms of a key are then added in head
// order 0..NH-1 by one thread in fp32. The other rows, the group, the grid and the slices change
// nothing in a row's bits. Tiles beyond reach, and (candidate bitmap) tiles with no kept key, load nothing.
#include "dskit_kernel.cuh"

#define HD 128                      // index head dim
#define WARPS 4                     // warps per block
#define QG 4                        // rows per block at most
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

// The 16-byte chunk c (0..15) of head h's query in shared memory: odd heads swap the halves of each 128
// bytes, so the eight heads a B-fragment load touches fall in distinct banks.
__device__ __forceinline__ int q_chunk(int h, int c) { return h * (HD / 8) + (c ^ ((h & 1) << 2)); }

DSK_KERNEL void __launch_bounds__(WARPS * 32, 4)
    DSK_SYMBOL(const u16 *__restrict__ q, const float *__restrict__ w, const u16 *__restrict__ keys,
               const int *__restrict__ key_base, const int *__restrict__ reach, const u32 *__restrict__ cand,
               int ldc, int cand_block, int rows, int group, int N, float *__restrict__ out, i64 lds)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * group, nr = min(group, rows - row0);
    __shared__ __align__(16) uint4 qs[QG][P_NH * HD / 8];
    __shared__ u32 wps[QG][PAIRS];
    __shared__ __align__(16) u32 xpose[WARPS][32 * ROWW];
    u32 *xp = xpose[warp];

    /* the group's queries (swizzled chunks) and head-weight pairs as bf16x2 */
    for (int i = threadIdx.x; i < nr * P_NH * (HD / 8); i += WARPS * 32) {
        int r = i / (P_NH * HD / 8), h = (i / (HD / 8)) % P_NH, c = i % (HD / 8);
        qs[r][q_chunk(h, c)] = *(const uint4 *)(q + ((i64)(row0 + r) * P_NH + h) * HD + 8 * c);
    }
    for (int i = threadIdx.x; i < nr * PAIRS; i += WARPS * 32) {
        int r = i / PAIRS, c = i % PAIRS;
        const float *wr = w + (i64)(row0 + r) * P_NH;
        wps[r][c] = (u32)f32_to_bf16_bits(wr[2 * c]) | (u32)f32_to_bf16_bits(wr[2 * c + 1]) << 16;
    }
    __syncthreads();
    int rc[QG], base[QG], same = 1, rcmax = 0;
#pragma unroll
    for (int r = 0; r < QG; r++) {
        rc[r] = 0, base[r] = 0;
        if (r < nr) {
            int x = reach[row0 + r];
            rc[r] = x < 0 ? 0 : x > N ? N : x;
            base[r] = key_base[row0 + r];
            same &= base[r] == base[0];
            rcmax = max(rcmax, rc[r]);
        }
    }

    const int tiles = (N + 31) / 32;
    for (int tile = blockIdx.y * WARPS + warp; tile < tiles; tile += gridDim.y * WARPS) {
        const int j0 = tile * 32, jk = j0 + lane; // the key whose score this lane writes
        uint4 ka[2][2][4];
        int loaded = -1; /* the row whose keys ka holds (with `same`, every row's) */
#pragma unroll
        for (int r = 0; r < QG; r++) {
            if (r >= nr)
                break;
            const int row = row0 + r;
            /* whether this lane's key is kept: reachable and, with candidates, in a kept block */
            int keep = jk < rc[r];
            if (cand && keep) {
                int b = jk / cand_block;
                keep = cand[(i64)row * ldc + (b >> 5)] >> (b & 31) & 1u;
            }
            float score = NEG_INF;
            if (__any_sync(0xffffffffu, keep)) {
                if (loaded < 0 || !same) {
                    /* A fragments: key rows 16·mt + 8·hf + g (clamped into reach), 16 bytes of each 32-wide
                     * block of k */
                    const int last = (same ? rcmax : rc[r]) - 1;
                    const u16 *kb = keys + (i64)base[r] * HD + 8 * t;
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
#pragma unroll
                        for (int hf = 0; hf < 2; hf++) {
                            const uint4 *p = (const uint4 *)(kb + (i64)min(j0 + 16 * mt + 8 * hf + g, last) * HD);
#pragma unroll
                            for (int b = 0; b < 4; b++)
                                ka[mt][hf][b] = p[4 * b];
                        }
                    loaded = r;
                }
                float acc[2][NT][4];
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
#pragma unroll
                        for (int i = 0; i < 4; i++)
                            acc[mt][nt][i] = 0.0f;
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    uint4 bq[NT]; /* head 8·nt + g, k block b, this lane's 8 dims */
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        int h = 8 * nt + g;
                        bq[nt] = h < P_NH ? qs[r][q_chunk(h, 4 * b + t)] : make_uint4(0, 0, 0, 0);
                    }
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
#pragma unroll
                        for (int nt = 0; nt < NT; nt++) {
                            const uint4 a0 = ka[mt][0][b], a1 = ka[mt][1][b];
                            const u32 lo[4] = {a0.x, a1.x, a0.y, a1.y}, hi[4] = {a0.z, a1.z, a0.w, a1.w};
                            idx_mma_bf16(acc[mt][nt], lo, bq[nt].x, bq[nt].y);
                            idx_mma_bf16(acc[mt][nt], hi, bq[nt].z, bq[nt].w);
                        }
                }
                /* terms bf16(relu(bf16(dot)) · w_h), two heads per word, into the warp's [key][head pair] rows */
                const __nv_bfloat162 zero = __floats2bfloat162_rn(0.0f, 0.0f);
#pragma unroll
                for (int mt = 0; mt < 2; mt++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        int c = 4 * nt + t;
                        if (c < PAIRS) {
                            __nv_bfloat162 wv = bits_bf2(wps[r][c]);
                            __nv_bfloat162 d0 = __floats2bfloat162_rn(acc[mt][nt][0], acc[mt][nt][1]);
                            __nv_bfloat162 d1 = __floats2bfloat162_rn(acc[mt][nt][2], acc[mt][nt][3]);
                            xp[(16 * mt + g) * ROWW + c] = bf2_bits(__hmul2(__hmax2(d0, zero), wv));
                            xp[(16 * mt + 8 + g) * ROWW + c] = bf2_bits(__hmul2(__hmax2(d1, zero), wv));
                        }
                    }
                __syncwarp();
                /* lane L adds the terms of key L (tile row L) in head order */
                float sum = 0.0f;
#if PAIRS % 4 == 0
#pragma unroll
                for (int c4 = 0; c4 < PAIRS / 4; c4++) {
                    uint4 v = *(const uint4 *)&xp[lane * ROWW + 4 * c4];
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
                    u32 pr = xp[lane * ROWW + c];
                    sum = __fadd_rn(sum, __uint_as_float(pr << 16));
                    sum = __fadd_rn(sum, __uint_as_float(pr & 0xffff0000u));
                }
#endif
                score = bf16_bits_to_f32(f32_to_bf16_bits(sum));
                __syncwarp();
            }
            if (jk < N)
                out[(i64)row * lds + jk] = keep ? score : NEG_INF;
        }
    }
}
