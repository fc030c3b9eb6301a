// Sampling (docs/model.md "Sampling", runtime/ref/sampling.c) of each row from its fp32 logits on the
// device, in three steps over one workspace (slices x rows blocks for steps 0 and 1, a block per row for 2):
//   0  per slice: the argmax keys over the drawable ids (the tokenizer's ∧ the row's allow mask) and over
//      the tokenizer's ids, the slice's most likely ids (top_logprobs), and, when the row truncates,
//      z = l / T for the top-k (NaN where not drawable);
//   1  per slice, from step 0's maxima: Σ exp(l − max) (log-probabilities), Σ exp(z − M) (top_p over
//      every id), the Gumbel-max key of every drawable id (no truncation);
//      (between 1 and 2 the launcher runs the topk family on z: the 1024 largest, ascending ids)
//   2  per row: the draw (greedy or untruncated from the partials; truncated from the candidates sorted
//      into rank order, top_k, then top_p by a scan in rank order) and the log-probabilities.
// Orders, fixed by V and the block size: a slice's sums are per-thread partials in index order, then a
// butterfly in each warp, then the warps in order; slices are added in slice order; the top_p prefix is a
// per-thread run of 4 ranks, a warp scan and the warps in order. Maxima are of composite keys (value
// order << 32 | ~id): exact, ties to the lower id. The noise is the CPU's integer hash bit for bit;
// expf and logf are CUDA's (an ulp from glibc's), so a draw can differ from the CPU's only where two
// candidates are that close. Latency-bound at decode sizes: a few passes over 0.5 MB per row.
#include "sample_abi.cuh"
#include "topk_common.cuh"

#define NW (P_T / 32)
#define PER SAMPLE_PER_THREAD
#define NC SAMPLE_CANDIDATES
#define NTOP SAMPLE_TOP_LOGPROBS
#define RUN (NC / P_T) // consecutive ranks per thread in step 2

#define NEG_INF __uint_as_float(0xff800000u)
#define QNAN __uint_as_float(0x7fc00000u)

// The float a topk_order_key came from (−0 comes back as +0).
__device__ __forceinline__ float key_value(u64 k)
{
    u32 u = (u32)(k >> 32);
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7fffffffu) : ~u);
}
__device__ __forceinline__ u64 id_key(float v, int id)
{
    return (u64)topk_order_key(v) << 32 | (u64)(0xffffffffu - (u32)id);
}
__device__ __forceinline__ int key_id(u64 k) { return (int)(0xffffffffu - (u32)k); }
__device__ __forceinline__ int bit_set(const u32 *m, int id) { return !m || (m[id >> 5] >> (id & 31) & 1u); }
__device__ __forceinline__ u64 umax(u64 a, u64 b) { return a > b ? a : b; }

// The CPU's noise (runtime/ref/sampling.c sample_uniform): splitmix64's finaliser, integers only.
__device__ __forceinline__ u64 mix64(u64 z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ float noise_u(u64 seed, i64 pos, int id)
{
    u64 h = mix64(seed ^ 0x6a09e667f3bcc908ull);
    h = mix64(h ^ (u64)pos * 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ (u64)(u32)id * 0xc2b2ae3d27d4eb4full);
    u32 k = (u32)(h >> 41); /* 23 bits: (2k + 1) · 2^-24 is exact */
    return __fmul_rn((float)(2u * k + 1u), 5.9604644775390625e-08f);
}

__device__ u64 block_max_u64(u64 v, u64 *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max_u64(v);
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        u64 r = lane < NW ? sh[lane] : 0ull;
        r = warp_max_u64(r);
        if (lane == 0)
            sh[NW] = r;
    }
    __syncthreads();
    u64 r = sh[NW];
    __syncthreads();
    return r;
}

// Σ over the block: a butterfly in each warp, then the warps in order.
__device__ float block_sum(float v, float *sh)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int w = 0; w < NW; w++)
            s = __fadd_rn(s, sh[w]);
        sh[NW] = s;
    }
    __syncthreads();
    float r = sh[NW];
    __syncthreads();
    return r;
}

// Sort NC composite keys in shared memory, largest first (bitonic, every thread).
__device__ void sort_desc(u64 *key)
{
    for (int k = 2; k <= NC; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < NC; i += P_T) {
                int p = i ^ j;
                if (p > i) {
                    u64 a = key[i], b = key[p];
                    if (((i & k) == 0) ? a < b : a > b) {
                        key[i] = b;
                        key[p] = a;
                    }
                }
            }
            __syncthreads();
        }
}

DSK_KERNEL void __launch_bounds__(P_T)
    DSK_SYMBOL(const float *__restrict__ logits, i64 ldl, int V, const u32 *__restrict__ vocab,
               const u32 *__restrict__ allow, int ldw, const sample_row_params *__restrict__ params,
               float *__restrict__ zk, i64 ldz, sample_partial *__restrict__ part, int S,
               const int *__restrict__ cand_idx, const float *__restrict__ cand_val, int ncand,
               int *__restrict__ tokens, float *__restrict__ logprob, int *__restrict__ top_ids,
               float *__restrict__ top_lp, int step)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    const int row = blockIdx.y, tid = threadIdx.x;
    const sample_row_params p = params[row];
    const float *lr = logits + (i64)row * ldl;
    const int sampled = p.temperature > 0.0f;
    const float tcl = p.temperature > 1e-5f ? p.temperature : 1e-5f;
    const int kcap = !sampled ? 0 : p.top_k > 0 ? min(p.top_k, NC) : p.top_p < 1.0f ? NC : 0;
    const int ntop = p.top_logprobs < NTOP ? p.top_logprobs : NTOP;
    const u32 *am = p.allow_row >= 0 && allow ? allow + (i64)p.allow_row * ldw : nullptr;
    sample_partial *pr = part + (i64)row * S;
    __shared__ u64 shk[NW + 1];
    __shared__ float shf[NW + 1];

    if (step < 2) {
        const int L = (V + S - 1) / S, begin = blockIdx.x * L, end = min(V, begin + L);
        sample_partial *mp = pr + blockIdx.x;
        if (step == 0) {
            u64 dk = 0, vk = 0, mine[PER];
            float *zr = zk + (i64)row * ldz;
#pragma unroll
            for (int i = 0; i < PER; i++) {
                int v = begin + tid + i * P_T;
                mine[i] = 0;
                if (v < end) {
                    float l = lr[v];
                    int vok = bit_set(vocab, v), dok = vok && bit_set(am, v);
                    u64 key = id_key(l, v);
                    dk = dok ? umax(dk, key) : dk;
                    vk = vok ? umax(vk, key) : vk;
                    mine[i] = vok ? key : 0ull;
                    if (kcap > 0 && zk) /* no z without candidates: such rows draw -2 */
                        zr[v] = dok ? __fdiv_rn(l, tcl) : QNAN;
                }
            }
            dk = block_max_u64(dk, shk);
            vk = block_max_u64(vk, shk);
            for (int t = 0; t < ntop; t++) { /* the slice's t-th most likely: a block maximum, then removed */
                u64 b = mine[0];
#pragma unroll
                for (int i = 1; i < PER; i++)
                    b = umax(b, mine[i]);
                b = block_max_u64(b, shk);
#pragma unroll
                for (int i = 0; i < PER; i++)
                    mine[i] = mine[i] == b ? 0ull : mine[i];
                if (tid == 0)
                    mp->top[t] = b;
            }
            if (tid == 0) {
                for (int t = ntop < 0 ? 0 : ntop; t < NTOP; t++)
                    mp->top[t] = 0ull;
                mp->draw_key = dk;
                mp->vocab_key = vk;
            }
            return;
        }
        /* step 1: the row's maxima from every slice of step 0 */
        u64 dk = 0, vk = 0;
        for (int i = tid; i < S; i += P_T) {
            dk = umax(dk, pr[i].draw_key);
            vk = umax(vk, pr[i].vocab_key);
        }
        dk = block_max_u64(dk, shk);
        vk = block_max_u64(vk, shk);
        const int want_lp = p.top_logprobs >= 0, want_mass = sampled && p.top_p < 1.0f && p.top_k <= 0,
                  want_g = sampled && kcap == 0;
        const float lv = key_value(vk), mx = __fdiv_rn(key_value(dk), tcl);
        float sl = 0.0f, sz = 0.0f;
        u64 gk = 0;
        if (want_lp || want_mass || want_g)
#pragma unroll 4
            for (int i = 0; i < PER; i++) {
                int v = begin + tid + i * P_T;
                if (v >= end)
                    break;
                float l = lr[v];
                int vok = bit_set(vocab, v), dok = vok && bit_set(am, v);
                if (want_lp && vok)
                    sl = __fadd_rn(sl, expf(__fsub_rn(l, lv)));
                if ((want_mass || want_g) && dok) {
                    float e = expf(__fsub_rn(__fdiv_rn(l, tcl), mx));
                    if (want_mass)
                        sz = __fadd_rn(sz, e);
                    if (want_g)
                        gk = umax(gk, id_key(__fdiv_rn(e, -logf(noise_u(p.seed, p.pos, v))), v));
                }
            }
        sl = block_sum(sl, shf);
        sz = block_sum(sz, shf);
        gk = block_max_u64(gk, shk);
        if (tid == 0) {
            mp->sum_l = sl;
            mp->sum_z = sz;
            mp->gumbel_key = gk;
        }
        return;
    }

    /* step 2: one block per row */
    __shared__ u64 key[NC];
    __shared__ float cum_at[1];
    u64 dk = 0, vk = 0, gk = 0;
    float sl = 0.0f, sz = 0.0f;
    for (int s = 0; s < S; s++) { /* every thread, slices in order */
        dk = umax(dk, pr[s].draw_key);
        vk = umax(vk, pr[s].vocab_key);
        gk = umax(gk, pr[s].gumbel_key);
        sl = __fadd_rn(sl, pr[s].sum_l);
        sz = __fadd_rn(sz, pr[s].sum_z);
    }
    const float mx = __fdiv_rn(key_value(dk), tcl);
    int tok;
    if (!dk)
        tok = -1; /* nothing drawable */
    else if (!sampled)
        tok = key_id(dk);
    else if (kcap == 0)
        tok = gk ? key_id(gk) : -1;
    else if (!cand_idx)
        tok = -2; /* the launch ran without candidates, the row truncates */
    else {
        const int *ci = cand_idx + (i64)row * ncand;
        const float *cv = cand_val + (i64)row * ncand;
        for (int i = tid; i < NC; i += P_T) {
            u64 kk = 0;
            if (i < ncand) {
                int id = ci[i];
                float z = cv[i];
                if (z == z && bit_set(vocab, id) && bit_set(am, id))
                    kk = id_key(z, id);
            }
            key[i] = kk;
        }
        __syncthreads();
        sort_desc(key);
        /* drawable candidates are a prefix of the rank order (the others are 0) */
        int na = 0;
        for (int c = 0; c < RUN; c++) {
            int i = RUN * tid + c;
            if (key[i] && (i == NC - 1 || !key[i + 1]))
                na = i + 1;
        }
        na = (int)block_max_u64((u64)na, shk);
        const int kept = kcap < na ? kcap : na;
        float e[RUN];
        int ids[RUN];
#pragma unroll
        for (int c = 0; c < RUN; c++) {
            int i = RUN * tid + c;
            ids[c] = key_id(key[i]);
            e[c] = i < kept ? expf(__fsub_rn(key_value(key[i]), mx)) : 0.0f;
        }
        int keep = kept;
        if (p.top_p < 1.0f) {
            /* C_i = Σ e over ranks <= i: a run of RUN ranks per thread, a warp scan, the warps in order */
            const int lane = tid & 31, warp = tid >> 5;
            float run[RUN];
            run[0] = e[0];
#pragma unroll
            for (int c = 1; c < RUN; c++)
                run[c] = __fadd_rn(run[c - 1], e[c]);
            float inc = run[RUN - 1];
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                float y = __shfl_up_sync(0xffffffffu, inc, o);
                if (lane >= o)
                    inc = __fadd_rn(inc, y);
            }
            float excl = __shfl_up_sync(0xffffffffu, inc, 1);
            if (lane == 0)
                excl = 0.0f;
            if (lane == 31)
                shf[warp] = inc;
            if (tid == 0)
                cum_at[0] = 0.0f;
            __syncthreads();
            if (tid == 0) {
                float s = 0.0f;
                for (int w = 0; w < NW; w++) {
                    float t = shf[w];
                    shf[w] = s;
                    s = __fadd_rn(s, t);
                }
            }
            __syncthreads();
            const float base = __fadd_rn(shf[warp], excl);
            float C[RUN];
#pragma unroll
            for (int c = 0; c < RUN; c++) {
                C[c] = __fadd_rn(base, run[c]);
                if (RUN * tid + c == kept - 1)
                    cum_at[0] = C[c];
            }
            __syncthreads();
            const float mass = p.top_k > 0 ? cum_at[0] : sz;
            const float thr = __fmul_rn(p.top_p, mass);
            int first = NC + 1; /* the shortest prefix whose mass reaches thr */
#pragma unroll
            for (int c = 0; c < RUN; c++) {
                int i = RUN * tid + c;
                if (i < kept && C[c] >= thr && i + 1 < first)
                    first = i + 1;
            }
            first = NC + 1 - (int)block_max_u64((u64)(NC + 1 - first), shk);
            keep = first < kept ? first : kept;
        }
        u64 g = 0;
#pragma unroll
        for (int c = 0; c < RUN; c++) {
            int i = RUN * tid + c;
            if (i < keep)
                g = umax(g, id_key(__fdiv_rn(e[c], -logf(noise_u(p.seed, p.pos, ids[c]))), ids[c]));
        }
        g = block_max_u64(g, shk);
        tok = keep > 0 ? key_id(g) : -1;
    }

    /* log-probabilities of the raw logits over the tokenizer's ids */
    float lse = 0.0f;
    if (p.top_logprobs >= 0) {
        lse = __fadd_rn(key_value(vk), logf(sl));
        if (ntop > 0) {
            __syncthreads();
            for (int i = tid; i < NC; i += P_T)
                key[i] = i < S * ntop ? pr[i / ntop].top[i % ntop] : 0ull;
            __syncthreads();
            sort_desc(key);
        }
    }
    if (tid == 0) {
        tokens[row] = tok;
        logprob[row] = p.top_logprobs < 0 ? QNAN
                       : tok >= 0 && tok < V && bit_set(vocab, tok) ? __fsub_rn(lr[tok], lse)
                                                                    : NEG_INF;
    }
    for (int i = tid; i < NTOP; i += P_T) {
        int id = i < ntop && key[i] ? key_id(key[i]) : -1;
        top_ids[(i64)row * NTOP + i] = id;
        top_lp[(i64)row * NTOP + i] = id >= 0 ? __fsub_rn(lr[id], lse) : NEG_INF;
    }
}
