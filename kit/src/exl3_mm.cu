// EXL3 matmul y = x·W for up to M rows per tile, every form in one kernel (docs/exl3-kernels.md):
// dense (1..4 matrices sharing x, or block-diagonal: up to 16 matrices each on its own columns of x;
// decode and prompt), MoE up (W1, W3 + clamped SwiGLU) and MoE down
// (W2, bf16 per expert, rows summed in ascending expert id). P_K bits, codebook P_CB, tile rows P_M.
//
// One CTA = one matrix × 128 output columns (one Hadamard block) × one k group (split) or all groups
// (EXL3_F_FOLD) × one row tile. Warps own n-tiles (16 columns each); per 16-k chunk a warp decodes its
// tiles straight into mma A registers (A = W_hat^T, so rows sit in the mma's N dimension, 8 per mma)
// and multiplies them with the chunk's x' fragments. Trellis words and x' go through a two-stage
// shared-memory pipeline, one 128-row block of k per stage; x' is transformed in the CTA (bf16 rows ×
// suh, Hadamard) or copied from exl3_had's output (EXL3_F_XF).
//
// Canonical sum order (row invariance): y'[row][col] = P_0 + P_1 + ... + P_{G-1}, added left to right,
// where P_g is the mma chain over group g's 16-k chunks in ascending order, started from +0. Groups
// are qb consecutive 128-blocks of k (exl3_desc.qb, a function of k and n only). Split CTAs write
// P_g to `part`; the last CTA of a column block (arrival counter) adds them in that order. FOLD CTAs
// keep a running total and add each finished group to it. Both give the same bits for every row, for
// any number of rows and any tile it sits in.
#include "exl3_dq.cuh"
#include "exl3_util.cuh"

#define KB P_K
#define CBK P_CB
#define MT P_M
#define NTW (MT <= 16 ? 2 : 1)  // n-tiles per warp
#define NWARP (8 / NTW)          // warps per CTA: 8 n-tiles = 128 columns
#define NTHR (NWARP * 32)
#define RG (MT / 8)              // row groups (mma N = 8)
#define WBYTES (2048 * KB)       // trellis bytes per stage: 8 chunks × 8 tiles × 32K
#define XBYTES (256 * MT)        // x' bytes per stage: MT rows × 128 fp16
#define STAGE (WBYTES + XBYTES)
#define YSTRIDE 132              // fp32 per row of the epilogue buffer (fragment stores conflict-free)
#define NWW EXL3_NW(KB)
#define TWORDS (8 * KB)          // u32 words per tile

struct mm_args {
    const exl3_desc *d0, *d1, *d2, *d3;
    const u16 *x;
    void *y;
    float *part;
    u32 *cnt, *rcnt;
    const int *plan;
    u16 *yslot;
    const float *rweight;
    int rows, ldx, ldy, nmat, mode, flags, topk, tcap;
    i64 xf_stride;
};

// What one CTA computes, resolved from blockIdx.x.
struct mm_job {
    const exl3_desc *d;  // the matrix of the main loop (MoE up: W1 or W3)
    const exl3_desc *dg; // MoE up: W1 (gate) and W3 (up), the epilogue needs both
    const exl3_desc *du;
    int m;               // dense: matrix index
    int mat;             // MoE up: 0 = W1, 1 = W3
    int cb;              // column block
    int g;               // group (split); -1 with FOLD
    int gs;              // partial sums per row and matrix in the epilogue unit (1 with FOLD)
    int eu;              // epilogue unit: its arrival counter
    int expect;          // arrivals per epilogue unit
    i64 pbase, prs;      // partial sum of tile row j, matrix mat, group g: part + 128 * (pbase + j·prs + mat·gs + g)
    int coff;            // dense: column offset of the matrix in y
    int rt;              // dense: row tile
    int nvalid;          // valid rows in the tile
};

__device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }

// Resolve blockIdx.x. Returns 0 for a CTA with nothing to do (MoE grids are sized for the most tiles).
__device__ int resolve(const mm_args &A, mm_job &J, int *rowkey, const u16 **rowptr, float *rw)
{
    int item = blockIdx.x;
    int fold = (A.flags & EXL3_F_FOLD) != 0;
    J.dg = J.du = nullptr;
    J.m = 0;
    J.mat = 0;
    J.coff = 0;
    J.rt = 0;
    if (A.mode == EXL3_MODE_DENSE) {
        int rt_n = cdiv(A.rows, MT), eu_base = 0, coff = 0;
        i64 pb = 0;
        for (int m = 0; m < A.nmat; m++) {
            const exl3_desc *d = (A.flags & EXL3_F_BLOCKDIAG) ? A.d0 + m : m == 0 ? A.d0 : m == 1 ? A.d1 : m == 2 ? A.d2 : A.d3;
            int nb = d->n / 128, gs = fold ? 1 : d->groups;
            int cnt = rt_n * nb * gs;
            if (item < cnt || m == A.nmat - 1) {
                J.d = d;
                J.m = m;
                J.gs = gs;
                J.g = fold ? -1 : item % gs;
                int e = item / gs;
                J.cb = e % nb;
                J.rt = e / nb;
                J.eu = eu_base + e;
                J.expect = gs;
                J.coff = coff;
                J.pbase = pb + ((i64)J.cb * A.rows + J.rt * MT) * gs;
                J.prs = gs;
                if (J.rt >= rt_n)
                    return 0;
                J.nvalid = min(MT, A.rows - J.rt * MT);
                for (int j = threadIdx.x; j < MT; j += NTHR) {
                    int r = J.rt * MT + j;
                    rowkey[j] = r;
                    rowptr[j] = A.x + (i64)min(r, A.rows - 1) * A.ldx + ((A.flags & EXL3_F_BLOCKDIAG) ? (i64)m * d->k : 0);
                    rw[j] = 1.0f;
                }
                return 1;
            }
            item -= cnt;
            eu_base += rt_n * nb;
            coff += d->n;
            pb += (i64)nb * A.rows * gs;
        }
        return 0;
    }
    // MoE: tiles of one expert's entries (plan), or every row with table entry 0 (no routing)
    int routed = A.plan != nullptr;
    int ntiles = routed ? A.plan[0] : cdiv(A.rows, MT);
    int nmats = A.mode == EXL3_MODE_MOE_UP ? 2 : 1;
    const exl3_desc *probe = A.d0 + (A.mode == EXL3_MODE_MOE_UP ? 0 : 2);
    int nb = probe->n / 128, gs = fold ? 1 : probe->groups;
    int per_tile = nb * nmats * gs;
    int t = item / per_tile, rem = item % per_tile;
    if (t >= ntiles)
        return 0;
    int tmax = A.tcap;
    int expert, first, count;
    if (routed) {
        expert = A.plan[EXL3_PLAN_TILE_EXPERT(tmax) + t];
        first = A.plan[EXL3_PLAN_TILE_FIRST(tmax) + t];
        count = A.plan[EXL3_PLAN_TILE_COUNT(tmax) + t];
    } else {
        expert = 0;
        first = t * MT;
        count = min(MT, A.rows - t * MT);
    }
    int mat = (rem / gs) % nmats;
    J.cb = rem / (gs * nmats);
    J.g = fold ? -1 : rem % gs;
    J.gs = gs;
    J.mat = mat;
    J.eu = t * nb + J.cb;
    J.expect = nmats * gs;
    J.nvalid = count;
    J.pbase = ((i64)first * nb + J.cb) * nmats * gs;
    J.prs = (i64)nb * nmats * gs;
    if (A.mode == EXL3_MODE_MOE_UP) {
        J.d = A.d0 + expert * 3 + mat;
        J.dg = A.d0 + expert * 3;
        J.du = A.d0 + expert * 3 + 1;
    } else {
        J.d = A.d0 + expert * 3 + 2;
    }
    for (int j = threadIdx.x; j < MT; j += NTHR) {
        int jj = min(j, count - 1);
        int entry = routed ? A.plan[EXL3_PLAN_ENTRIES(tmax) + first + jj] : first + jj;
        rowkey[j] = entry;
        int xrow = (A.mode == EXL3_MODE_MOE_UP && routed) ? entry / A.topk : entry;
        rowptr[j] = A.x + (i64)xrow * A.ldx;
        rw[j] = (A.mode == EXL3_MODE_MOE_UP && routed) ? A.rweight[entry] : 1.0f;
    }
    return 1;
}

// Issue the copies of one stage: the trellis of 128-block kb (8 chunks × the CTA's 8 tiles), and with
// EXL3_F_XF the block's x' for the row tile.
__device__ __forceinline__ void load_stage(unsigned char *st, const mm_args &A, const mm_job &J, int kb)
{
    const int GR = 16 * KB; // 16-byte granules per chunk run (8 tiles)
    const u16 *tr = (const u16 *)J.d->trellis;
    int n16 = J.d->n / 16;
    u32 sbase = dsk_smem_addr(st);
    // The trellis is read once a round: its copies are marked first to leave L2, so the round's small
    // inputs and code stay.
    const u64 pol = dsk_l2_evict_first();
    const int passes = cdiv(8 * GR, NTHR);
    auto copy = [&](int j) {
        int q = threadIdx.x + j * NTHR;
        if ((8 * GR) % NTHR == 0 || q < 8 * GR) {
            int c = q / GR, off = q % GR;
            const u16 *src = tr + ((i64)(kb * 8 + c) * n16 + J.cb * 8) * (16 * KB) + off * 8;
            dsk_cp_async16_once(sbase + q * 16, src, pol);
        }
    };
    if (passes == 3) {
        // Unrolled, these three passes (K 3, 128 threads) come out of ptxas (CUDA 13.0) as hinted LDGSTS
        // with the shared base folded into the policy's descriptor, a form sm_90 faults on
        // (CUDA_ERROR_ILLEGAL_INSTRUCTION; the SASS names uniform registers nothing writes):
        // tests/kit/check_sass.py looks for it in every kernel of a kit.
#pragma unroll 1
        for (int j = 0; j < passes; j++)
            copy(j);
    } else {
#pragma unroll
        for (int j = 0; j < passes; j++)
            copy(j);
    }
    if (A.flags & EXL3_F_XF) {
        // exl3_had output: [row group][k/16 chunk][32 lanes][8 bytes]; the tile's RG groups, chunks kb·8..+7
        int kc = J.d->k / 16;
        const unsigned char *xf = (const unsigned char *)A.x + (i64)J.m * A.xf_stride * 2;
#pragma unroll
        for (int j = 0; j < cdiv(RG * 128, NTHR); j++) {
            int q = threadIdx.x + j * NTHR;
            if ((RG * 128) % NTHR == 0 || q < RG * 128) {
                int rg = q >> 7, off = q & 127;
                const unsigned char *src = xf + (((i64)(J.rt * RG + rg) * kc + kb * 8) * 256) + off * 16;
                dsk_cp_async16(sbase + WBYTES + q * 16, src);
            }
        }
    }
}

// The fused input transform reads a 128-block of x and suh one block ahead into registers (the rows
// j = warp + r·NWARP of this warp), so the loads are in flight during the previous block's compute.
#define XPR ((MT + NWARP - 1) / NWARP)
struct x_ahead {
    uint2 x[XPR], s;
};

__device__ __forceinline__ void fetch_x(x_ahead &P, const mm_job &J, const u16 *const *rowptr, int kb)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    P.s = *(const uint2 *)((const u16 *)J.d->suh + kb * 128 + 4 * lane);
#pragma unroll
    for (int r = 0; r < XPR; r++) {
        int j = warp + r * NWARP;
        if (j < J.nvalid)
            P.x[r] = *(const uint2 *)(rowptr[j] + kb * 128 + 4 * lane);
    }
}

// x' of the fetched 128-block for the tile's valid rows into stage st.
__device__ __forceinline__ void transform_stage(unsigned char *st, const mm_job &J, const x_ahead &P)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 *xs = (u32 *)(st + WBYTES);
#pragma unroll
    for (int r = 0; r < XPR; r++) {
        int j = warp + r * NWARP;
        if (j < J.nvalid) {
            uint2 v = exl3_transform4(P.x[r], P.s, lane);
            int i = exl3_xf_index(j, lane);
            xs[i] = v.x;
            xs[i + 2] = v.y;
        }
    }
}

// One 128-block: 8 chunks × NTW tiles, decode + mma into acc.
__device__ __forceinline__ void compute_stage(const unsigned char *st, float (&acc)[NTW][RG][4], const int *woff,
                                              u32 shift)
{
    int lane = threadIdx.x & 31;
    const u32 *ws = (const u32 *)st;
    const uint2 *xs = (const uint2 *)(st + WBYTES);
#pragma unroll
    for (int c = 0; c < 8; c++) {
        uint2 b[RG];
#pragma unroll
        for (int rg = 0; rg < RG; rg++)
            b[rg] = xs[(rg * 8 + c) * 32 + lane];
#pragma unroll
        for (int t = 0; t < NTW; t++) {
            u32 w[3], a[4];
#pragma unroll
            for (int j = 0; j < NWW; j++)
                w[j] = ws[(c * 8 + t) * TWORDS + woff[j]];
            exl3_decode_frag(KB, CBK, w, shift, a);
#pragma unroll
            for (int rg = 0; rg < RG; rg++)
                dsk_mma_16816_f16(acc[t][rg], a[0], a[1], a[2], a[3], b[rg].x, b[rg].y);
        }
    }
}

// Partial sums live per row: tile row j of the fragment (t, rg) is rg·8 + 2(l%4) (+1), its columns
// (warp·NTW + t)·16 + l/4 (+8). Write this CTA's sums for matrix `mat`, group `g`.
__device__ __forceinline__ void store_partial(float *part, const mm_job &J, int mat, int g, const float (&acc)[NTW][RG][4])
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < NTW; t++)
#pragma unroll
        for (int rg = 0; rg < RG; rg++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int j = rg * 8 + 2 * (lane & 3) + h, col = (warp * NTW + t) * 16 + (lane >> 2);
                if (j < J.nvalid) {
                    float *p = part + 128 * (J.pbase + j * J.prs + mat * J.gs + g) + col;
                    __stcg(p, acc[t][rg][h]);
                    __stcg(p + 8, acc[t][rg][2 + h]);
                }
            }
}

// acc = P_0 + P_1 + ... + P_{gs-1} of matrix `mat`, added left to right (the canonical order).
__device__ __forceinline__ void fold_partials(const float *part, const mm_job &J, int mat, float (&acc)[NTW][RG][4])
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < NTW; t++)
#pragma unroll
        for (int rg = 0; rg < RG; rg++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int j = rg * 8 + 2 * (lane & 3) + h, col = (warp * NTW + t) * 16 + (lane >> 2);
                if (j < J.nvalid) {
                    const float *p = part + 128 * (J.pbase + j * J.prs + mat * J.gs) + col;
                    float a = __ldcg(p), b = __ldcg(p + 8);
                    for (int g = 1; g < J.gs; g++) {
                        a = __fadd_rn(a, __ldcg(p + 128 * g));
                        b = __fadd_rn(b, __ldcg(p + 128 * g + 8));
                    }
                    acc[t][rg][h] = a;
                    acc[t][rg][2 + h] = b;
                }
            }
}

// acc (fragment layout) -> ybuf[row][col], row stride YSTRIDE. D fragment of tile T, row group rg:
// {d0,d1} = rows 8rg + 2(l%4) + 0,1 at column 16T + l/4; {d2,d3} the same rows at column + 8.
__device__ __forceinline__ void acc_to_smem(float *ybuf, const float (&acc)[NTW][RG][4])
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int t = 0; t < NTW; t++)
#pragma unroll
        for (int rg = 0; rg < RG; rg++) {
            int row = rg * 8 + 2 * (lane & 3), col = (warp * NTW + t) * 16 + (lane >> 2);
            ybuf[row * YSTRIDE + col] = acc[t][rg][0];
            ybuf[(row + 1) * YSTRIDE + col] = acc[t][rg][1];
            ybuf[row * YSTRIDE + col + 8] = acc[t][rg][2];
            ybuf[(row + 1) * YSTRIDE + col + 8] = acc[t][rg][3];
        }
}

// Output stage of exl3.md §3 for row j's 4 columns 4·lane..+3 of the block: Hadamard128 (× 1/sqrt(128)),
// then × svh, then + bias, each rounded in fp32 in that order.
__device__ __forceinline__ void out_stage(const float *ybuf, int j, const exl3_desc *d, int cb, float v[4])
{
    int lane = threadIdx.x & 31;
    float4 y = *(const float4 *)(ybuf + j * YSTRIDE + 4 * lane);
    v[0] = y.x, v[1] = y.y, v[2] = y.z, v[3] = y.w;
    exl3_had128(v, lane);
    int col = cb * 128 + 4 * lane;
    uint2 s4 = *(const uint2 *)((const u16 *)d->svh + col);
    u16 sv[4] = {(u16)(s4.x & 0xffff), (u16)(s4.x >> 16), (u16)(s4.y & 0xffff), (u16)(s4.y >> 16)};
#pragma unroll
    for (int i = 0; i < 4; i++)
        v[i] = __fmul_rn(v[i], exl3_h2f(sv[i]));
    if (d->bias) {
        float4 b = *(const float4 *)((const float *)d->bias + col);
        v[0] = __fadd_rn(v[0], b.x), v[1] = __fadd_rn(v[1], b.y), v[2] = __fadd_rn(v[2], b.z), v[3] = __fadd_rn(v[3], b.w);
    }
}

__device__ __forceinline__ u32 pack_bf16(float a, float b) { return (u32)f32_to_bf16_bits(a) | (u32)f32_to_bf16_bits(b) << 16; }

// CTAs per SM: K <= 2 at 8 rows fits 96 registers and so five (the MoE runs thousands of one-block CTAs)
#define MINCTAS (MT == 8 && KB <= 2 ? 5 : MT <= 16 ? 4 : MT == 32 ? 2 : 1)

DSK_KERNEL void __launch_bounds__(NTHR, MINCTAS)
    DSK_SYMBOL(const exl3_desc *d0, const exl3_desc *d1, const exl3_desc *d2, const exl3_desc *d3, const u16 *x,
               void *y, float *part, u32 *cnt, u32 *rcnt, const int *plan, u16 *yslot, const float *rweight,
               int rows, int ldx, int ldy, int nmat, int mode, int flags, int topk, int tcap, i64 xf_stride)
{
    EXL3_DYNAMIC_SMEM(smem);
    __shared__ int rowkey[MT];
    __shared__ const u16 *rowptr[MT];
    __shared__ float rw[MT];
    __shared__ int s_last;
    const mm_args A = {d0, d1, d2, d3, x, y, part, cnt, rcnt, plan, yslot, rweight, rows, ldx, ldy, nmat, mode, flags,
                       topk, tcap, xf_stride};
    // Before dsk_pdl_wait only what no earlier kernel writes: the arguments, descriptors and trellis
    // (dense with a fused transform: resolve and the first trellis stage). MoE tiles come from the
    // plan and a pre-transformed x' from exl3_had, so those wait first.
    const int early = mode == EXL3_MODE_DENSE && !(flags & EXL3_F_XF);
    if (!early)
        dsk_pdl_wait();
    mm_job J;
    if (!resolve(A, J, rowkey, rowptr, rw))
        return;
    __syncthreads();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int fold = (flags & EXL3_F_FOLD) != 0, fused = !(flags & EXL3_F_XF);
    const int kbt = J.d->k / 128, qb = J.d->qb;
    const int kb0 = fold ? 0 : J.g * qb, kb1 = fold ? kbt : min(kbt, (J.g + 1) * qb);

    // lane constants of the tile geometry: word offsets (with this warp's first tile) and the shift
    exl3_lane L = exl3_lane_setup(KB, lane);
    int woff[3];
#pragma unroll
    for (int j = 0; j < 3; j++)
        woff[j] = warp * NTW * TWORDS + L.word[j];

    if (fused) {
        // rows past the tile's end stay zero in both stages
        for (int i = tid; i < 2 * XBYTES / 16; i += NTHR) {
            int s = i / (XBYTES / 16), o = i % (XBYTES / 16);
            ((uint4 *)(smem + s * STAGE + WBYTES))[o] = make_uint4(0, 0, 0, 0);
        }
        __syncthreads();
    }

    float chain[NTW][RG][4], total[NTW][RG][4];
#pragma unroll
    for (int t = 0; t < NTW; t++)
#pragma unroll
        for (int rg = 0; rg < RG; rg++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                chain[t][rg][i] = 0.0f, total[t][rg][i] = 0.0f;

    load_stage(smem, A, J, kb0);
    dsk_cp_async_commit();
    if (early)
        dsk_pdl_wait();
    x_ahead xa;
    if (fused) {
        fetch_x(xa, J, rowptr, kb0);
        transform_stage(smem, J, xa);
        if (kb0 + 1 < kb1)
            fetch_x(xa, J, rowptr, kb0 + 1);
    }
    int in_group = 0; // blocks of the current group done (FOLD)
    for (int kb = kb0; kb < kb1; kb++) {
        int s = (kb - kb0) & 1;
        unsigned char *cur = smem + s * STAGE, *nxt = smem + (s ^ 1) * STAGE;
        if (kb + 1 < kb1) {
            load_stage(nxt, A, J, kb + 1);
            dsk_cp_async_commit();
            if (fused) {
                transform_stage(nxt, J, xa);
                if (kb + 2 < kb1)
                    fetch_x(xa, J, rowptr, kb + 2);
            }
            dsk_cp_async_wait<1>();
        } else {
            dsk_cp_async_wait<0>();
        }
        __syncthreads();
        compute_stage(cur, chain, woff, (u32)L.shift);
        if (fold && (++in_group == qb || kb + 1 == kbt)) {
            // a group ends: total = P_0, then total += P_g
#pragma unroll
            for (int t = 0; t < NTW; t++)
#pragma unroll
                for (int rg = 0; rg < RG; rg++)
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        total[t][rg][i] = kb < qb ? chain[t][rg][i] : __fadd_rn(total[t][rg][i], chain[t][rg][i]);
                        chain[t][rg][i] = 0.0f;
                    }
            in_group = 0;
        }
        __syncthreads();
    }
    if (fold) {
#pragma unroll
        for (int t = 0; t < NTW; t++)
#pragma unroll
            for (int rg = 0; rg < RG; rg++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    chain[t][rg][i] = total[t][rg][i];
    }
    // The next grid may start once every CTA of this one is past its main loop: earlier, its waiting
    // CTAs would take free slots and pile up on some SMs (the head at K2 +20 %). At five CTAs per SM
    // even this placement costs the head 7 %: those variants let the next grid start as they exit.
    if (MINCTAS < 5)
        dsk_pdl_launch_next();

    // partial sums: split CTAs with more than one group, and both halves of MoE up
    const int need_part = mode == EXL3_MODE_MOE_UP || J.gs > 1;
    if (need_part) {
        store_partial(part, J, J.mat, fold ? 0 : J.g, chain);
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            u32 old = atomicAdd(cnt + J.eu, 1u);
            s_last = old == (u32)(J.expect - 1);
        }
        __syncthreads();
        if (!s_last)
            return;
        __threadfence();
        if (tid == 0)
            cnt[J.eu] = 0; // every arrival is in: reset for the next launch on this workspace
        fold_partials(part, J, 0, chain);
    }

    float *ybuf = (float *)smem;
    acc_to_smem(ybuf, chain);
    __syncthreads();

    if (mode == EXL3_MODE_DENSE) {
        for (int j = warp; j < J.nvalid; j += NWARP) {
            float v[4];
            out_stage(ybuf, j, J.d, J.cb, v);
            i64 off = (i64)rowkey[j] * ldy + J.coff + J.cb * 128 + 4 * lane;
            if (flags & EXL3_F_OUT_BF16)
                *(uint2 *)((u16 *)y + off) = make_uint2(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]));
            else
                *(float4 *)((float *)y + off) = make_float4(v[0], v[1], v[2], v[3]);
        }
        return;
    }

    if (mode == EXL3_MODE_MOE_UP) {
        // ybuf holds W1's y' (gate); keep bf16(g) beside it, then fold W3's slots (up) into the buffer
        u32 *gbuf = (u32 *)(smem + MT * YSTRIDE * 4);
        for (int j = warp; j < J.nvalid; j += NWARP) {
            float v[4];
            out_stage(ybuf, j, J.dg, J.cb, v);
            gbuf[j * 64 + 2 * lane] = pack_bf16(v[0], v[1]);
            gbuf[j * 64 + 2 * lane + 1] = pack_bf16(v[2], v[3]);
        }
        __syncthreads();
        fold_partials(part, J, 1, chain);
        acc_to_smem(ybuf, chain);
        __syncthreads();
        int inter = J.du->n;
        for (int j = warp; j < J.nvalid; j += NWARP) {
            float u[4];
            out_stage(ybuf, j, J.du, J.cb, u);
            u32 g2[2] = {gbuf[j * 64 + 2 * lane], gbuf[j * 64 + 2 * lane + 1]};
            float h[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float g = bf16_bits_to_f32((u16)(g2[i >> 1] >> (16 * (i & 1))));
                float uu = bf16_bits_to_f32(f32_to_bf16_bits(u[i]));
                g = fminf(g, 10.0f);
                uu = fminf(fmaxf(uu, -10.0f), 10.0f);
                float sg = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
                h[i] = __fmul_rn(rw[j], __fmul_rn(sg, uu));
            }
            i64 off = (i64)rowkey[j] * inter + J.cb * 128 + 4 * lane;
            *(uint2 *)((u16 *)y + off) = make_uint2(pack_bf16(h[0], h[1]), pack_bf16(h[2], h[3]));
        }
        return;
    }

    // MoE down: bf16(W2 h) per entry, then the row's slots summed in ascending expert id by whichever
    // warp brings the row's last slot of this column block
    const int dim = J.d->n, nb = dim / 128, routed = plan != nullptr;
    const int tmax = tcap;
    for (int j = warp; j < J.nvalid; j += NWARP) {
        float v[4];
        out_stage(ybuf, j, J.d, J.cb, v);
        int entry = rowkey[j], r = routed ? entry / topk : entry;
        i64 col = J.cb * 128 + 4 * lane;
        __stcg((uint2 *)(yslot + (i64)entry * dim + col), make_uint2(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3])));
        __threadfence();
        __syncwarp();
        u32 old = 0;
        if (lane == 0)
            old = atomicAdd(rcnt + (i64)r * nb + J.cb, 1u);
        old = __shfl_sync(0xffffffffu, old, 0);
        int ns = routed ? plan[EXL3_PLAN_ROW_NSLOTS(tmax, rows, topk) + r] : 1;
        if (old != (u32)(ns - 1))
            continue;
        __threadfence();
        float *yr = (float *)y + (i64)r * ldy + col;
        float4 acc = (flags & EXL3_F_ACCUM) ? __ldcg((const float4 *)yr) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int i = 0; i < ns; i++) {
            int e = routed ? r * topk + plan[EXL3_PLAN_ROW_ORDER(tmax, rows, topk) + r * topk + i] : r;
            uint2 q = __ldcg((const uint2 *)(yslot + (i64)e * dim + col));
            acc.x = __fadd_rn(acc.x, bf16_bits_to_f32((u16)(q.x & 0xffff)));
            acc.y = __fadd_rn(acc.y, bf16_bits_to_f32((u16)(q.x >> 16)));
            acc.z = __fadd_rn(acc.z, bf16_bits_to_f32((u16)(q.y & 0xffff)));
            acc.w = __fadd_rn(acc.w, bf16_bits_to_f32((u16)(q.y >> 16)));
        }
        *(float4 *)yr = acc;
        if (lane == 0)
            rcnt[(i64)r * nb + J.cb] = 0;
    }
}
