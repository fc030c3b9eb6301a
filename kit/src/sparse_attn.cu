// Sparse attention with sink over each query row's canonical list (model.md §3.5, docs/model.md), MQA: one
// key of head_dim HD shared by every head, K = V. Tuned so each key is gathered once per 16 heads and feeds
// both tensor-core products: a CTA owns one query row and 16 heads (one m16 tile), a 64-entry block of the
// list is copied into shared memory (cp.async, two stages in MODE 0), S = Q·Kᵀ and O += bf16(P)·K run on
// mma.m16n8k16 (bf16 in, fp32 accumulate). MODE 0 walks the whole list in one CTA (prompt chunks, many
// decode rows); MODES 1-2 split it over CTAs for few rows (flash-decoding): 1 writes each block's scores and
// maximum, 2 each block's probabilities times K with REF's running maximum rebuilt from those maxima, and
// the last of a (row, head group)'s MODE 2 CTAs to finish (an arrival counter in the workspace, zeroed
// by MODE 1) folds the blocks in list order. Both paths make the same operations in the same order, so a row's bits
// are the same whichever runs, whatever the other rows, and whatever the grid.
//
// Reduction orders (fixed by HD alone):
//   score s[h][e]: warp w adds dims [w·DPW, (w+1)·DPW) through the mma accumulator, 32-dim chunks ascending
//     (two k-steps each: dims {8q..8q+3} then {8q+4..8q+7} of the chunk, q = 0..3, in the tensor core's
//     order within a k-step); the warps' partials are added in warp order 0..NW-1; then × scale.
//   block maximum: exact. Σ exp(s − max) of a block per head: each thread's SPT entries left to right, then
//     a xor butterfly over the head's TPH threads (offsets TPH/2 .. 1).
//   Σ bf16(p)·k of a block: from zero through the mma accumulator over the block's 4 k-steps of 16 entries.
//   REF's running state per block, in list order: num = num·α + Σ bf16(p)·k, den = den·α + Σ p, then
//   den + exp(sink − max), num / den rounded to bf16, then the optional inverse RoPE of the last rope_dim
//   dims (the rope family's math: angle fp32(pos)·θ′_j, cos/sin in double, products and sums rounded).
// With q_rope the queries' own RoPE (the same dims, at the same position) is applied as they are loaded.
#include "dskit_kernel.cuh"
#include "sparse_attn_abi.cuh"
#include "sparse_attn_ops.cuh"

#define HD P_HD
#define DPW SPARSE_ATTN_DIMS_PER_WARP(HD) // dims per warp in both products
#define NW SPARSE_ATTN_WARPS(HD)
#define NT (NW * 32)
#define BLK SPARSE_ATTN_BLOCK
#define MH SPARSE_ATTN_HEADS
#define CPR (HD / 8)          // 16-byte chunks per key row
#define SPT (MH * BLK / NT)   // scores per thread in the softmax: 4 (HD 512) or 8 (HD 128)
#define TPH (BLK / SPT)       // threads per head in the softmax
#define SSTR 72               // row stride (floats) of the score partials: float2 stores conflict-free
#define PSTR 72               // row stride (bf16) of the probabilities: A-fragment loads conflict-free
#define MERGE_T 128           // the fold's parts per 128 dims: 16 heads x 8, 16 values each
#define MERGE_DIMS SPARSE_ATTN_MERGE_DIMS

#if HD != 128 && HD != 256 && HD != 512
#error "sparse_attn: HD is 128, 256 or 512"
#endif

#define WS_BLOCK SPARSE_ATTN_WS_BLOCK(HD)
#define NEG_INF __uint_as_float(0xff800000u)

struct attn_args {
    const u16 *q, *kv_call, *kv_ring, *kv2;
    const int *sel;
    const sparse_attn_row *meta;
    const float *sink, *freqs;
    u16 *out;
    float *ws;
    int rows, heads, ring, sel_ld, rope_dim, max_blocks;
    float scale;
    int q_rope; // the queries come unrotated: RoPE them on load (load_q)
};

// One row's list: where entry i's key lives.
struct row_list {
    const u16 *kv_call, *kv_ring, *kv2;
    const int *sel; // this row's selection, or null
    sparse_attn_row m;
    int nw, n, ring;
};

__device__ __forceinline__ row_list row_list_of(const attn_args &A, int r)
{
    row_list L;
    L.kv_call = A.kv_call, L.kv_ring = A.kv_ring, L.kv2 = A.kv2, L.ring = A.ring;
    L.m = A.meta[r];
    L.sel = A.sel ? A.sel + (i64)r * A.sel_ld : nullptr;
    L.nw = L.m.win_hi >= L.m.win_lo ? L.m.win_hi - L.m.win_lo + 1 : 0;
    L.n = L.nw + L.m.nsel;
    return L;
}

// The selection value entry i needs (0 when it needs none): loaded a block ahead of its use, so the
// address of a block's keys never waits on memory.
__device__ __forceinline__ int entry_sel(const row_list &L, int i)
{
    return L.sel && i >= L.nw && i < L.n ? L.sel[i - L.nw] : 0;
}

// entry_sel of this thread's entry of block b (threads 0..63 address a block).
__device__ __forceinline__ int block_sel(const row_list &L, int b)
{
    return threadIdx.x < BLK ? entry_sel(L, b * BLK + threadIdx.x) : 0;
}

// Entry i's key row (sv: its entry_sel), or null past the end of the list (that row is zeros).
__device__ __forceinline__ const u16 *entry_key(const row_list &L, int i, int sv)
{
    if (i >= L.n)
        return nullptr;
    if (i < L.nw) {
        int p = L.m.win_lo + i;
        if (p >= L.m.call_pos0)
            return L.kv_call + (i64)(L.m.call_row0 + (p - L.m.call_pos0)) * HD;
        return L.kv_ring + (i64)(L.m.ring_base + p % L.ring) * HD;
    }
    return L.kv2 + (i64)(L.m.base2 + (L.sel ? sv : i - L.nw)) * HD;
}

// 16-byte chunk c of key row e sits at chunk c ^ swz(e) of its shared-memory row: the QK loads (rows 2i, 2i+1,
// four chunks each per 8 lanes) and the transposing loads (8 rows, one chunk) both hit 8 distinct bank groups.
__device__ __forceinline__ int swz(int e) { return ((e & 1) << 2) | ((e >> 1) & 3); }

// Threads 0..63 write the key addresses of block b's entries (sv: block_sel(L, b)).
__device__ __forceinline__ void block_addrs(const row_list &L, int b, const u16 **addr, int sv)
{
    if (threadIdx.x < BLK)
        addr[threadIdx.x] = entry_key(L, b * BLK + threadIdx.x, sv);
}

// Issue the copies of one block's keys into a stage (the addresses written before a barrier); rows past
// the list are zeroed instead, so their zero probabilities multiply zeros.
__device__ __forceinline__ void issue_keys(u16 *stage, const u16 *const *addr)
{
#pragma unroll
    for (int k = 0; k < BLK * CPR / NT; k++) {
        int c = threadIdx.x + k * NT, e = c / CPR, cc = c % CPR;
        u16 *dst = stage + e * HD + ((cc ^ swz(e)) << 3);
        if (addr[e])
            sa_cp16(dst, addr[e] + (cc << 3));
        else
            *(uint4 *)dst = make_uint4(0, 0, 0, 0);
    }
}

// RoPE of one bf16 pair (lo = dim d, hi = dim d + 1) by (c, s): vec_glue's products, sums and roundings.
__device__ __forceinline__ u32 rot_pair(u32 p, float c, float s)
{
    const float a = __uint_as_float(p << 16), b = __uint_as_float(p & 0xffff0000u);
    return (u32)f32_to_bf16_bits(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s))) |
           (u32)f32_to_bf16_bits(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c))) << 16;
}

// This warp's Q fragments: heads h0+g and h0+g+8 (zeros past the model's heads), dims w·DPW + 32c + 8q .. +7.
// With A.q_rope the queries come unrotated and their last rope_dim dims are rotated here at the row's
// position, as vec_glue's RoPE does it (angle fp32(pos)·θ′_j, cos/sin by sincos in double, rounded to
// float; each product and sum rounded; bf16 out): the bits of the RoPE'd queries.
__device__ __forceinline__ void load_q(const attn_args &A, int r, int h0, uint4 *qa, uint4 *qb)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    const u16 *base = A.q + ((i64)r * A.heads + h0) * HD + warp * DPW + 8 * q;
#pragma unroll
    for (int c = 0; c < DPW / 32; c++) {
        qa[c] = h0 + g < A.heads ? *(const uint4 *)(base + (i64)g * HD + 32 * c) : zero;
        qb[c] = h0 + g + 8 < A.heads ? *(const uint4 *)(base + (i64)(g + 8) * HD + 32 * c) : zero;
    }
    if (!A.q_rope)
        return;
    const float pos = (float)A.meta[r].pos;
#pragma unroll
    for (int c = 0; c < DPW / 32; c++) {
        const int d0 = warp * DPW + 32 * c + 8 * q; // the chunk's first dim
        if (d0 < HD - A.rope_dim)
            continue;
        const int j0 = (d0 - (HD - A.rope_dim)) >> 1;
        float cs[4], sn[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            double sd, cd;
            sincos((double)__fmul_rn(pos, A.freqs[j0 + j]), &sd, &cd);
            cs[j] = (float)cd, sn[j] = (float)sd;
        }
        qa[c] = make_uint4(rot_pair(qa[c].x, cs[0], sn[0]), rot_pair(qa[c].y, cs[1], sn[1]),
                           rot_pair(qa[c].z, cs[2], sn[2]), rot_pair(qa[c].w, cs[3], sn[3]));
        qb[c] = make_uint4(rot_pair(qb[c].x, cs[0], sn[0]), rot_pair(qb[c].y, cs[1], sn[1]),
                           rot_pair(qb[c].z, cs[2], sn[2]), rot_pair(qb[c].w, cs[3], sn[3]));
    }
}

// This warp's partial scores over its dims for the block in `stage`, into sp [16][SSTR].
__device__ __forceinline__ void qk_block(const u16 *stage, const uint4 *qa, const uint4 *qb, float *sp)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
    for (int c = 0; c < DPW / 32; c++) {
        const int lc = warp * (DPW / 8) + 4 * c + q;
        const u32 a0[4] = {qa[c].x, qb[c].x, qa[c].y, qb[c].y}, a1[4] = {qa[c].z, qb[c].z, qa[c].w, qb[c].w};
#pragma unroll
        for (int nt = 0; nt < 8; nt++) {
            const int e = nt * 8 + g;
            uint4 kb = *(const uint4 *)(stage + e * HD + ((lc ^ swz(e)) << 3));
            sa_mma_bf16(acc[nt], a0, kb.x, kb.y);
            sa_mma_bf16(acc[nt], a1, kb.z, kb.w);
        }
    }
#pragma unroll
    for (int nt = 0; nt < 8; nt++) {
        *(float2 *)(sp + g * SSTR + nt * 8 + 2 * q) = make_float2(acc[nt][0], acc[nt][1]);
        *(float2 *)(sp + (g + 8) * SSTR + nt * 8 + 2 * q) = make_float2(acc[nt][2], acc[nt][3]);
    }
}

// Softmax thread layout: head threadIdx.x / TPH, entries e0 .. e0+SPT-1 of the block.
__device__ __forceinline__ int sm_head() { return threadIdx.x / TPH; }
__device__ __forceinline__ int sm_e0() { return (threadIdx.x % TPH) * SPT; }

// The block's scores of this thread's entries: the warps' partials in warp order, × scale; −∞ past the list.
__device__ __forceinline__ void block_scores(const float *spart, int b, int n, float scale, float *s)
{
    const int h = sm_head(), e0 = sm_e0();
#pragma unroll
    for (int j = 0; j < SPT; j += 4) {
        float4 v = *(const float4 *)(spart + h * SSTR + e0 + j);
#pragma unroll
        for (int w = 1; w < NW; w++) {
            float4 u = *(const float4 *)(spart + (w * MH + h) * SSTR + e0 + j);
            v.x = __fadd_rn(v.x, u.x), v.y = __fadd_rn(v.y, u.y), v.z = __fadd_rn(v.z, u.z), v.w = __fadd_rn(v.w, u.w);
        }
        const float vv[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++)
            s[j + i] = b * BLK + e0 + j + i < n ? __fmul_rn(vv[i], scale) : NEG_INF;
    }
}

// The block's maximum score of this thread's head (every thread of the head gets it).
__device__ __forceinline__ float block_max(const float *s)
{
    float m = s[0];
#pragma unroll
    for (int j = 1; j < SPT; j++)
        m = fmaxf(m, s[j]);
#pragma unroll
    for (int o = TPH / 2; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    return m;
}

// p = exp(s − rmax) of this thread's entries, rounded to bf16 into ps [16][PSTR]; returns the head's
// unrounded Σ p (the same bits in every thread of the head).
__device__ __forceinline__ float block_probs(const float *s, float rmax, u16 *ps)
{
    const int h = sm_head(), e0 = sm_e0();
    float p[SPT], sum;
#pragma unroll
    for (int j = 0; j < SPT; j++)
        p[j] = expf(__fsub_rn(s[j], rmax));
    sum = p[0];
#pragma unroll
    for (int j = 1; j < SPT; j++)
        sum = __fadd_rn(sum, p[j]);
#pragma unroll
    for (int o = TPH / 2; o > 0; o >>= 1)
        sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
#pragma unroll
    for (int j = 0; j < SPT; j += 4) { // entries past the list: exp(−∞) = 0
        uint2 v;
        v.x = (u32)f32_to_bf16_bits(p[j]) | (u32)f32_to_bf16_bits(p[j + 1]) << 16;
        v.y = (u32)f32_to_bf16_bits(p[j + 2]) | (u32)f32_to_bf16_bits(p[j + 3]) << 16;
        *(uint2 *)(ps + h * PSTR + e0 + j) = v;
    }
    return sum;
}

// This warp's Σ bf16(p)·k over the block, dims w·DPW + 8nt + 2q (+1) of heads g (bs[nt][0..1]) and g+8 ([2..3]).
__device__ __forceinline__ void pv_block(const u16 *stage, const u16 *ps, float (*bs)[4])
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int nt = 0; nt < DPW / 8; nt++)
        bs[nt][0] = bs[nt][1] = bs[nt][2] = bs[nt][3] = 0.0f;
    const u32 *pw = (const u32 *)ps;
#pragma unroll
    for (int ks = 0; ks < BLK / 16; ks++) {
        const u32 a[4] = {pw[g * (PSTR / 2) + 8 * ks + q], pw[(g + 8) * (PSTR / 2) + 8 * ks + q],
                          pw[g * (PSTR / 2) + 8 * ks + q + 4], pw[(g + 8) * (PSTR / 2) + 8 * ks + q + 4]};
        const int e = 16 * ks + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int j = 0; j < DPW / 16; j++) {
            const int lc = (warp * DPW + 16 * j) / 8 + (lane >> 4);
            u32 b[4];
            sa_ldsm_x4_trans(b, stage + e * HD + ((lc ^ swz(e)) << 3));
            sa_mma_bf16(bs[2 * j], a, b[0], b[1]);
            sa_mma_bf16(bs[2 * j + 1], a, b[2], b[3]);
        }
    }
}

// The cos/sin of the inverse RoPE at the row's position, one pair per thread j < rope_dim/2.
__device__ __forceinline__ void rope_table(const attn_args &A, int pos, float2 *cs)
{
    if ((int)threadIdx.x < A.rope_dim / 2) {
        float angle = __fmul_rn((float)pos, A.freqs[threadIdx.x]);
        cs[threadIdx.x] = make_float2((float)cos((double)angle), (float)sin((double)angle));
    }
}

// Output pair (d, d+1) of one head: n ? bf16(num / den) : 0, then the inverse RoPE where d is in the tail.
__device__ __forceinline__ u32 out_pair(float x0, float x1, float den, int n, int d, int rope_dim, const float2 *cs)
{
    u16 o0 = n ? f32_to_bf16_bits(__fdiv_rn(x0, den)) : 0, o1 = n ? f32_to_bf16_bits(__fdiv_rn(x1, den)) : 0;
    if (d >= HD - rope_dim) {
        float2 t = cs[(d - (HD - rope_dim)) >> 1];
        float a = bf16_bits_to_f32(o0), b = bf16_bits_to_f32(o1), c = t.x, s = -t.y;
        o0 = f32_to_bf16_bits(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
        o1 = f32_to_bf16_bits(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
    }
    return (u32)o0 | (u32)o1 << 16;
}

#if P_MODE == 0
// The whole list of one row in one CTA, REF's recurrence block by block; keys double-buffered.
__device__ __forceinline__ void attend_whole(const attn_args &A)
{
    DSK_DYNAMIC_SMEM(smem);
    u16 *kst = (u16 *)smem;                                     // [2][BLK][HD]
    float *spart = (float *)(smem + 2 * BLK * HD * 2);          // [NW][MH][SSTR]
    u16 *ps = (u16 *)(spart + NW * MH * SSTR);                  // [MH][PSTR]
    const u16 **kaddr = (const u16 **)(ps + MH * PSTR);         // [2][BLK]
    float *fac = (float *)(kaddr + 2 * BLK);                    // α [MH], then the final denominators [MH]
    float2 *cs = (float2 *)(fac + 64);                          // [SPARSE_ATTN_MAX_ROPE / 2]
    const int hg = blockIdx.x, r = blockIdx.y, h0 = hg * MH;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const row_list L = row_list_of(A, r);
    const int nblk = (L.n + BLK - 1) / BLK;
    rope_table(A, L.m.pos, cs);
    float num[DPW / 8][4];
#pragma unroll
    for (int nt = 0; nt < DPW / 8; nt++)
        num[nt][0] = num[nt][1] = num[nt][2] = num[nt][3] = 0.0f;
    float rmax = -1e30f, den = 0.0f; // the softmax threads' copy of their head's state
    if (nblk > 0) {
        uint4 qa[DPW / 32], qb[DPW / 32];
        load_q(A, r, h0, qa, qb);
        block_addrs(L, 0, kaddr, block_sel(L, 0));
        block_addrs(L, 1, kaddr + BLK, block_sel(L, 1));
        int sv_next = block_sel(L, 2); // in flight during block 0
        __syncthreads();
        issue_keys(kst, kaddr);
        sa_cp_commit();
        if (nblk > 1)
            issue_keys(kst + BLK * HD, kaddr + BLK);
        sa_cp_commit();
        for (int b = 0; b < nblk; b++) {
            u16 *stage = kst + (b & 1) * BLK * HD;
            sa_cp_wait<1>();
            __syncthreads();
            qk_block(stage, qa, qb, spart + warp * MH * SSTR);
            __syncthreads();
            float s[SPT];
            block_scores(spart, b, L.n, A.scale, s);
            float rnew = fmaxf(rmax, block_max(s));
            float alpha = expf(__fsub_rn(rmax, rnew));
            float bsum = block_probs(s, rnew, ps);
            den = __fadd_rn(__fmul_rn(den, alpha), bsum);
            rmax = rnew;
            if (threadIdx.x % TPH == 0)
                fac[sm_head()] = alpha;
            if (b + 2 < nblk) {
                block_addrs(L, b + 2, kaddr + (b & 1) * BLK, sv_next);
                sv_next = block_sel(L, b + 3);
            }
            __syncthreads();
            float bs[DPW / 8][4];
            pv_block(stage, ps, bs);
            const float ag = fac[g], ag8 = fac[g + 8];
#pragma unroll
            for (int nt = 0; nt < DPW / 8; nt++) {
                num[nt][0] = __fadd_rn(__fmul_rn(num[nt][0], ag), bs[nt][0]);
                num[nt][1] = __fadd_rn(__fmul_rn(num[nt][1], ag), bs[nt][1]);
                num[nt][2] = __fadd_rn(__fmul_rn(num[nt][2], ag8), bs[nt][2]);
                num[nt][3] = __fadd_rn(__fmul_rn(num[nt][3], ag8), bs[nt][3]);
            }
            __syncthreads(); // every warp is done with this stage, its probabilities and α
            if (b + 2 < nblk)
                issue_keys(stage, kaddr + (b & 1) * BLK);
            sa_cp_commit();
        }
    }
    if (threadIdx.x % TPH == 0 && h0 + sm_head() < A.heads)
        fac[MH + sm_head()] = __fadd_rn(den, expf(__fsub_rn(A.sink[h0 + sm_head()], rmax)));
    __syncthreads();
    u16 *orow = A.out + ((i64)r * A.heads + h0) * HD;
#pragma unroll
    for (int nt = 0; nt < DPW / 8; nt++) {
        const int d = warp * DPW + nt * 8 + 2 * q;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int h = g + 8 * half;
            if (h0 + h < A.heads)
                *(u32 *)(orow + (i64)h * HD + d) =
                    out_pair(num[nt][2 * half], num[nt][2 * half + 1], fac[MH + h], L.n, d, A.rope_dim, cs);
        }
    }
}
#endif

#if P_MODE == 1 || P_MODE == 2
__device__ __forceinline__ float *ws_block(const attn_args &A, int r, int hg, int b)
{
    const int groups = (A.heads + MH - 1) / MH;
    return A.ws + (((i64)r * groups + hg) * A.max_blocks + b) * WS_BLOCK;
}

// The arrival counter of (row r, head group hg), after the blocks (SPARSE_ATTN_WS_COUNTERS).
__device__ __forceinline__ unsigned *ws_counter(const attn_args &A, int r, int hg)
{
    const int groups = (A.heads + MH - 1) / MH;
    return (unsigned *)(A.ws + (i64)A.rows * groups * A.max_blocks * WS_BLOCK) + (i64)r * groups + hg;
}
#endif

#if P_MODE == 1
// Split, step 1: block blockIdx.z of the row's list: its scores and per-head maximum.
__device__ __forceinline__ void split_scores(const attn_args &A)
{
    DSK_DYNAMIC_SMEM(smem);
    u16 *kst = (u16 *)smem;                            // [BLK][HD]
    float *spart = (float *)(smem + BLK * HD * 2);     // [NW][MH][SSTR]
    const u16 **kaddr = (const u16 **)(spart + NW * MH * SSTR);
    const int hg = blockIdx.x, r = blockIdx.y, b = blockIdx.z, h0 = hg * MH, warp = threadIdx.x >> 5;
    const row_list L = row_list_of(A, r);
    if (b == 0 && threadIdx.x == 0)
        *ws_counter(A, r, hg) = 0; // MODE 2's arrivals, counted from zero
    if (b * BLK >= L.n)
        return;
    block_addrs(L, b, kaddr, block_sel(L, b));
    __syncthreads();
    issue_keys(kst, kaddr);
    sa_cp_commit();
    uint4 qa[DPW / 32], qb[DPW / 32];
    load_q(A, r, h0, qa, qb);
    sa_cp_wait<0>();
    __syncthreads();
    qk_block(kst, qa, qb, spart + warp * MH * SSTR);
    __syncthreads();
    float s[SPT];
    block_scores(spart, b, L.n, A.scale, s);
    float m = block_max(s);
    float *w = ws_block(A, r, hg, b);
#pragma unroll
    for (int j = 0; j < SPT; j += 4)
        *(float4 *)(w + SPARSE_ATTN_WS_SCORES + sm_head() * BLK + sm_e0() + j) = make_float4(s[j], s[j + 1], s[j + 2], s[j + 3]);
    if (threadIdx.x % TPH == 0)
        w[SPARSE_ATTN_WS_BMAX + sm_head()] = m;
}
#endif

#if P_MODE == 2
// The fold of the row's blocks in list order (REF's recurrence), the sink, the division, the inverse RoPE,
// for one part of a (head group, row): part t (0 .. 128·HD/MERGE_DIMS - 1) takes head (t % 128) / 8 and
// dims c·128 + 4(t % 8) + 32k .. +3, k = 0..3, c = t / 128. The blocks were written by other CTAs of this
// launch: read at L2 (__ldcg), never from this SM's L1.
__device__ __forceinline__ void merge_part(const attn_args &A, const row_list &L, int hg, int r, int t,
                                           const float2 *cs)
{
    const int h0 = hg * MH, h = (t % MERGE_T) / 8;
    const int groups = (A.heads + MH - 1) / MH;
    const int nblk = (L.n + BLK - 1) / BLK;
    if (h0 + h >= A.heads)
        return;
    const float *w0 = A.ws + ((i64)r * groups + hg) * A.max_blocks * WS_BLOCK;
    const int d0 = (t / MERGE_T) * MERGE_DIMS + 4 * (t % 8);
    float num[16], den = 0.0f, rmax = -1e30f;
#pragma unroll
    for (int i = 0; i < 16; i++)
        num[i] = 0.0f;
    for (int b = 0; b < nblk && nblk <= A.max_blocks; b++) {
        const float *w = w0 + (i64)b * WS_BLOCK;
        const float alpha = __ldcg(w + SPARSE_ATTN_WS_ALPHA + h);
        den = __fadd_rn(__fmul_rn(den, alpha), __ldcg(w + SPARSE_ATTN_WS_BSUM + h));
        rmax = fmaxf(rmax, __ldcg(w + SPARSE_ATTN_WS_BMAX + h));
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float4 v = __ldcg((const float4 *)(w + SPARSE_ATTN_WS_NUM + h * HD + d0 + 32 * k));
            num[4 * k] = __fadd_rn(__fmul_rn(num[4 * k], alpha), v.x);
            num[4 * k + 1] = __fadd_rn(__fmul_rn(num[4 * k + 1], alpha), v.y);
            num[4 * k + 2] = __fadd_rn(__fmul_rn(num[4 * k + 2], alpha), v.z);
            num[4 * k + 3] = __fadd_rn(__fmul_rn(num[4 * k + 3], alpha), v.w);
        }
    }
    const float fin = __fadd_rn(den, expf(__fsub_rn(A.sink[h0 + h], rmax)));
    u16 *orow = A.out + ((i64)r * A.heads + h0 + h) * HD;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int d = d0 + 32 * k;
        uint2 o;
        o.x = out_pair(num[4 * k], num[4 * k + 1], fin, L.n, d, A.rope_dim, cs);
        o.y = out_pair(num[4 * k + 2], num[4 * k + 3], fin, L.n, d + 2, A.rope_dim, cs);
        if (nblk > A.max_blocks) // a list longer than the launch allowed: make it loud
            o = make_uint2(0x7fc07fc0u, 0x7fc07fc0u);
        *(uint2 *)(orow + d) = o;
    }
}

// The fold by the CTA that found itself last (or, for an empty list, by block 0's CTA).
__device__ __forceinline__ void merge_row(const attn_args &A, const row_list &L, int hg, int r)
{
    __shared__ float2 cs[SPARSE_ATTN_MAX_ROPE / 2];
    rope_table(A, L.m.pos, cs);
    __syncthreads();
    for (int t = threadIdx.x; t < MERGE_T * (HD / MERGE_DIMS); t += NT)
        merge_part(A, L, hg, r, t, cs);
}
#endif

#if P_MODE == 2
// Split, step 2: block blockIdx.z: REF's running maximum before and after it (from the blocks' maxima),
// its α, Σ p and Σ bf16(p)·k; the row's last CTA to arrive then folds them (merge_row).
__device__ __forceinline__ void split_values(const attn_args &A)
{
    DSK_DYNAMIC_SMEM(smem);
    u16 *kst = (u16 *)smem;                            // [BLK][HD]
    u16 *ps = (u16 *)(smem + BLK * HD * 2);            // [MH][PSTR]
    const u16 **kaddr = (const u16 **)(ps + MH * PSTR);
    const int hg = blockIdx.x, r = blockIdx.y, b = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
    const row_list L = row_list_of(A, r);
    if (L.n == 0 && b == 0) // no block to wait for: the fold (of nothing) now
        merge_row(A, L, hg, r);
    if (b * BLK >= L.n)
        return;
    block_addrs(L, b, kaddr, block_sel(L, b));
    __syncthreads();
    issue_keys(kst, kaddr);
    sa_cp_commit();
    float *w = ws_block(A, r, hg, b);
    const int h = sm_head();
    float rmax = -1e30f;
    for (int z = 0; z < b; z++)
        rmax = fmaxf(rmax, ws_block(A, r, hg, z)[SPARSE_ATTN_WS_BMAX + h]);
    float rnew = fmaxf(rmax, w[SPARSE_ATTN_WS_BMAX + h]);
    float s[SPT];
#pragma unroll
    for (int j = 0; j < SPT; j += 4) {
        float4 v = *(const float4 *)(w + SPARSE_ATTN_WS_SCORES + h * BLK + sm_e0() + j);
        s[j] = v.x, s[j + 1] = v.y, s[j + 2] = v.z, s[j + 3] = v.w;
    }
    float bsum = block_probs(s, rnew, ps);
    if (threadIdx.x % TPH == 0) {
        w[SPARSE_ATTN_WS_ALPHA + h] = expf(__fsub_rn(rmax, rnew));
        w[SPARSE_ATTN_WS_BSUM + h] = bsum;
    }
    sa_cp_wait<0>();
    __syncthreads();
    float bs[DPW / 8][4];
    pv_block(kst, ps, bs);
#pragma unroll
    for (int nt = 0; nt < DPW / 8; nt++) {
        const int d = warp * DPW + nt * 8 + 2 * q;
        *(float2 *)(w + SPARSE_ATTN_WS_NUM + g * HD + d) = make_float2(bs[nt][0], bs[nt][1]);
        *(float2 *)(w + SPARSE_ATTN_WS_NUM + (g + 8) * HD + d) = make_float2(bs[nt][2], bs[nt][3]);
    }
    // arrival: the last of the row's min(nblk, max_blocks) working CTAs folds (its writes and the
    // others' made visible by the fences on both sides of the counter)
    __shared__ int s_last;
    const int nblk = (L.n + BLK - 1) / BLK, arrivals = nblk < A.max_blocks ? nblk : A.max_blocks;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0)
        s_last = atomicAdd(ws_counter(A, r, hg), 1u) == (unsigned)arrivals - 1;
    __syncthreads();
    if (!s_last)
        return;
    __threadfence();
    merge_row(A, L, hg, r);
}
#endif


// MODE 0 holds a row's numerator in registers (one CTA per SM at HD 512); the split steps fit two per SM.
DSK_KERNEL void __launch_bounds__(NT, P_MODE == 0 ? 1 : 2)
    DSK_SYMBOL(const u16 *__restrict__ q, const u16 *__restrict__ kv_call, const u16 *__restrict__ kv_ring,
               const u16 *__restrict__ kv2, const int *__restrict__ sel, const sparse_attn_row *__restrict__ meta,
               const float *__restrict__ sink, const float *__restrict__ freqs, u16 *__restrict__ out,
               float *__restrict__ ws, int rows, int heads, int ring, int sel_ld, int rope_dim, int max_blocks,
               float scale, int q_rope)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    attn_args A;
    A.q = q, A.kv_call = kv_call, A.kv_ring = kv_ring, A.kv2 = kv2, A.sel = sel, A.meta = meta, A.sink = sink;
    A.freqs = freqs, A.out = out, A.ws = ws, A.rows = rows, A.heads = heads, A.ring = ring, A.sel_ld = sel_ld;
    A.rope_dim = rope_dim, A.max_blocks = max_blocks, A.scale = scale, A.q_rope = q_rope;
#if P_MODE == 0
    attend_whole(A);
#elif P_MODE == 1
    split_scores(A);
#elif P_MODE == 2
    split_values(A);
#else
#error "sparse_attn: MODE is 0 (whole list), 1 (scores) or 2 (values, then the fold)"
#endif
}
