// Full bidirectional multi-head attention over one image's N patches (vision.md §3.4): per head,
// out_i = softmax_j((q_i·k_j)·hd^-1/2)·v_j, no mask, no sink; FlashAttention-2's forward. Tuned for the
// release tower (16 heads x 64, N up to ~9k): a CTA owns 128 query rows of one head (4 warps x 32 rows, Q
// held in registers as A fragments); K and V stream through shared memory in tiles of 64 keys (cp.async,
// three stages, one barrier per tile); S = Q·Kᵀ and O += bf16(P)·V run on mma.m16n8k16 (bf16 in, fp32
// accumulate, fragments by ldmatrix); the online softmax runs in fp32 in the S accumulators' registers.
//
// Arithmetic and order (fixed by HD and N alone: the same inputs give the same bits on every run):
//   score: the tensor core's dot over the head's dims, k-steps of 16 ascending. With c = fp32(hd^-1/2)·log2 e
//     (exact: hd^-1/2 is 1/4 or 1/8), p = 2^(s·c − m·c) as one fma and ex2, m the row's running maximum of
//     the raw dots over the tiles in key order (exact); α = 2^(m_old·c − m_new·c) per tile (fma, ex2).
//   row sum: each thread adds its 16 p of a tile (n-tiles ascending, the pair in order) into its partial
//     l = fma(l, α, Σ); the row's 4 partials are added by a xor butterfly (1, then 2) at the end.
//   O = O·α (skipped when every α of the warp is 1, which changes no bit) + bf16(p)·V through the
//     accumulator, k-steps of 16 keys ascending; out = bf16(O / l), IEEE division, round to nearest even.
// Keys past N: their K and V rows are zeros in shared memory and their scores −∞ (p = 0). Query rows past
// N: zero Q rows, never written.
#include "dskit_kernel.cuh"
#include "dsk_mma.cuh"
#include "vision_attn_abi.cuh"

#define HD P_HD
#define BM VISION_ATTN_ROWS
#define BN VISION_ATTN_KEYS
#define NT VISION_ATTN_THREADS
#define STAGES VISION_ATTN_STAGES
#define CPR (HD / 8) // 16-byte chunks in one head's row
#define KS (HD / 16) // k-steps of Q·Kᵀ
#define DT (HD / 8)  // 8-wide n-tiles of O
#define NEG_INF __uint_as_float(0xff800000u)

#if HD != 16 && HD != 64
#error "vision_attn: HD is 16 or 64"
#endif
#if BM != 4 * 32 || NT != 128 || BN != 64
#error "vision_attn: the code below is written for 4 warps of 32 query rows and tiles of 64 keys"
#endif

// Shared-memory tiles keep rows of RS = HD + 8 bf16 (144 or 48 bytes): the 8 rows of one ldmatrix phase
// (16 bytes each, the same chunk) fall in 8 distinct 16-byte bank groups, and every address is a lane's
// constant plus an immediate (a swizzle would cost address arithmetic in the loop).
#define RS (HD + 8)
__device__ __forceinline__ int tile_at(int r, int c) { return r * RS + c * 8; }

// A tile copy in passes of RP rows: thread i copies chunk i % CPR of rows i / CPR + RP·k.
#define RP (NT / CPR)

// This thread's passes of a ROWS-row tile: dst and src at its first row and chunk, ldp = RP global rows,
// `valid` = the tile's rows before N less this thread's first row. Rows at or past N are zeroed instead
// (finite values for the masked keys' zero probabilities to multiply).
template <int ROWS> __device__ __forceinline__ void copy_tile(u16 *dst, const u16 *src, i64 ldp, int valid)
{
#pragma unroll
    for (int k = 0; k < ROWS / RP; k++) {
        if (k * RP < valid)
            dsk_cp_async16(dsk_smem_addr(dst + k * RP * RS), src + k * ldp);
        else
            *(uint4 *)(dst + k * RP * RS) = make_uint4(0, 0, 0, 0);
    }
}

// The K and V tiles of keys j·BN .. j·BN + BN − 1 into a stage (dst: this thread's chunk in it; kv: this
// thread's chunk of key row 0's K, V being D columns further).
__device__ __forceinline__ void load_kv(u16 *dst, const u16 *kv, i64 ld, i64 ldp, i64 D, int valid, int j)
{
    const u16 *src = kv + (i64)j * BN * ld;
    copy_tile<BN>(dst, src, ldp, valid - j * BN);
    copy_tile<BN>(dst + BN * RS, src + D, ldp, valid - j * BN);
}

__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi)
{
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return (u32)__bfloat16_as_ushort(v.x) | (u32)__bfloat16_as_ushort(v.y) << 16;
}

// One tile of 64 keys (K and V at sk, sv) for this warp's 32 query rows: S = Q·Kᵀ, the online softmax,
// O += bf16(P)·V. TAIL: the tile runs past N (keys key0 .. N - 1 are real); a template parameter, so the
// other tiles have no branch between their mmas and their softmax.
template <bool TAIL>
__device__ __forceinline__ void attend_tile(const u32 (&qf)[2][KS][4], float (&o)[2][DT][4], float (&m)[2][2],
                                            float (&l)[2][2], const u16 *sk, const u16 *sv, int k_lane, int a_lane,
                                            int key0, int n)
{
    const int lane = threadIdx.x & 31, t = lane & 3;
    const float c = (HD == 16 ? 0.25f : 0.125f) * 1.4426950408889634f;
    // S = Q·Kᵀ: s[mt][nt] holds rows {g, g + 8} of m-tile mt, keys 8·nt + {2t, 2t + 1}
    float s[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            u32 b[4]; // keys 16·np + 0..7 then + 8..15, dims 16·ks + 0..7 and + 8..15 of each
            dsk_ldsm_x4(b, sk + tile_at(np * 16, 2 * ks) + k_lane);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                const u32 *a = qf[mt][ks];
                dsk_mma_16816_bf16(s[mt][2 * np], a[0], a[1], a[2], a[3], b[0], b[1]);
                dsk_mma_16816_bf16(s[mt][2 * np + 1], a[0], a[1], a[2], a[3], b[2], b[3]);
            }
        }
    if (TAIL) { // keys key0 + ... past N
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    if (key0 + nt * 8 + 2 * t + (i & 1) >= n)
                        s[mt][nt][i] = NEG_INF;
    }

    // online softmax: running max, α, O·α, p = 2^(s·c − m·c) in place of s, this thread's partial sums
    float alpha[2][2], nmc[2][2];
    int grew = 0;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = m[mt][h];
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
                mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mc = mx * c;
            alpha[mt][h] = dsk_ex2(fmaf(m[mt][h], c, -mc));
            grew |= alpha[mt][h] != 1.0f;
            nmc[mt][h] = -mc;
            m[mt][h] = mx;
        }
    // O·α before the exps: no branch then separates them from the P·V mmas, which they overlap
    if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int dt = 0; dt < DT; dt++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    o[mt][dt][i] *= alpha[mt][i >> 1];
    }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                s[mt][nt][i] = dsk_ex2(fmaf(s[mt][nt][i], c, nmc[mt][i >> 1]));
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float sum = s[mt][0][2 * h] + s[mt][0][2 * h + 1];
#pragma unroll
            for (int nt = 1; nt < 8; nt++) {
                sum += s[mt][nt][2 * h];
                sum += s[mt][nt][2 * h + 1];
            }
            l[mt][h] = fmaf(l[mt][h], alpha[mt][h], sum);
        }

    // O += bf16(P)·V: the S accumulators of keys 16·kk .. + 15 are the A fragment as they lie
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        u32 pa[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            pa[mt][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            pa[mt][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            pa[mt][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            pa[mt][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < HD / 16; dp++) {
            u32 b[4]; // keys 16·kk + 0..7 then + 8..15 of dims 16·dp + 0..7, then the same of + 8..15
            dsk_ldsm_x4_trans(b, sv + tile_at(kk * 16, 2 * dp) + a_lane);
#pragma unroll
            for (int mt = 0; mt < 2; mt++) {
                dsk_mma_16816_bf16(o[mt][2 * dp], pa[mt][0], pa[mt][1], pa[mt][2], pa[mt][3], b[0], b[1]);
                dsk_mma_16816_bf16(o[mt][2 * dp + 1], pa[mt][0], pa[mt][1], pa[mt][2], pa[mt][3], b[2], b[3]);
            }
        }
    }
}

// Two CTAs per SM: 128 threads of at most 255 registers, 2 x 72 KiB of shared memory at HD 64.
DSK_KERNEL void __launch_bounds__(NT, 2)
    DSK_SYMBOL(const u16 *__restrict__ qkv, u16 *__restrict__ out, int n, int heads)
{
    DSK_DYNAMIC_SMEM(smem);
    u16 *sq = (u16 *)smem;   // [BM][RS]
    u16 *skv = sq + BM * RS; // [STAGES][K, V][BN][RS]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int q0 = blockIdx.x * BM, head = blockIdx.y;
    const i64 D = (i64)heads * HD, ld = 3 * D, ldp = RP * ld;
    const int tiles = (n + BN - 1) / BN;
    // this thread's chunk of the copies: row cr (+ RP·k), chunk cc
    const int cr = threadIdx.x / CPR, cc = threadIdx.x % CPR;
    const u16 *qsrc = qkv + (q0 + cr) * ld + head * HD + cc * 8, *kv = qsrc - q0 * ld + D;
    u16 *kdst = skv + tile_at(cr, cc);
    // the lanes' ldmatrix rows and chunks: A fragments and V (rows +8 for matrices 1, 3; chunk +1 for 2, 3),
    // K as the B operand (chunk +1 for matrices 1, 3; rows +8 for 2, 3)
    const int a_lane = tile_at((lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4);
    const int k_lane = tile_at((lane & 7) + ((lane >> 4) & 1) * 8, (lane >> 3) & 1);

    copy_tile<BM>(sq + tile_at(cr, cc), qsrc, ldp, n - q0 - cr);
    dsk_cp_async_commit();
    for (int j = 0; j < 2; j++) {
        if (j < tiles)
            load_kv(kdst + j * 2 * BN * RS, kv, ld, ldp, D, n - cr, j);
        dsk_cp_async_commit();
    }
    dsk_cp_async_wait<2>();
    __syncthreads();
    // this warp's rows warp·32 + 16·mt + {g, g + 8}, dims 16·ks + {2t, 2t + 1, 2t + 8, 2t + 9}
    u32 qf[2][KS][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
            dsk_ldsm_x4(qf[mt][ks], sq + tile_at(warp * 32 + mt * 16, 2 * ks) + a_lane);

    float o[2][DT][4], m[2][2], l[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; mt++) {
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
        m[mt][0] = m[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    for (int j = 0, rd = 0; j < tiles; j++, rd = rd == STAGES - 1 ? 0 : rd + 1) {
        dsk_cp_async_wait<1>(); // tile j (stage rd) has landed; tile j + 1 may still be in flight
        __syncthreads();        // ... for every thread; and every warp is done with tile j - 1's stage
        if (j + 2 < tiles)      // into that stage, (j + 2) % 3
            load_kv(kdst + (rd == 0 ? STAGES - 1 : rd - 1) * 2 * BN * RS, kv, ld, ldp, D, n - cr, j + 2);
        dsk_cp_async_commit();
        const u16 *sk = skv + rd * 2 * BN * RS, *sv = sk + BN * RS;

        if (j + 1 < tiles || n % BN == 0)
            attend_tile<false>(qf, o, m, l, sk, sv, k_lane, a_lane, j * BN, n);
        else
            attend_tile<true>(qf, o, m, l, sk, sv, k_lane, a_lane, j * BN, n);
    }

#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float sum = l[mt][h];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const int row = q0 + warp * 32 + mt * 16 + g + 8 * h;
            if (row < n) {
                u16 *orow = out + row * D + head * HD + 2 * t;
#pragma unroll
                for (int dt = 0; dt < DT; dt++)
                    *(u32 *)(orow + dt * 8) = (u32)f32_to_bf16_bits(__fdiv_rn(o[mt][dt][2 * h], sum)) |
                                              (u32)f32_to_bf16_bits(__fdiv_rn(o[mt][dt][2 * h + 1], sum)) << 16;
            }
        }
}
