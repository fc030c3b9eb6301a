// EXL3 MoE plan: from the routing of R rows (expert ids [R][topk]) build what exl3_mm's MoE modes read
// (layout in exl3_abi.cuh): the local experts' entries (entry = r·topk + s) grouped by expert into
// tiles of at most M rows, and per row its local slots in ascending expert id. Local experts are ids
// [e_lo, e_lo + e_count); other ids are someone else's (expert parallelism) and skipped. Rows with no
// local slot get y = 0 here (unless y is null), since no MoE-down CTA will write them. One CTA.
// Where an entry sits inside its expert's tiles does not change any result: each row's output depends
// on that row alone (docs/exl3-kernels.md), so placement by atomics is fine.
//
// P_R > 0 (the routing variants, P_R = moe_route's NPL): the launch routes the rows first, from their gate
// logits (E experts, bias, route_scale), writing route (ids) and weights with moe_route's row code (the
// same bits as a moe_route launch), then plans from them: routing and plan in one launch for the few rows
// of a decode round (warp w routes rows w, w + 32, ...). P_R = 0: route is given, the routing arguments
// are unused.
#include "dskit_kernel.cuh"
#include "exl3_abi.cuh"
#if P_R > 0
#include "moe_route.cuh"
#endif

#define MAXE 2048
#if P_R > 0
#define RROWS 16 // rows routed at a time: their scores fill the plan's shared arrays
static_assert(RROWS * P_R * 32 <= 4 * MAXE && RROWS <= 32, "exl3_moe_plan: the routing's scores must fit");
#endif

DSK_KERNEL void __launch_bounds__(1024) DSK_SYMBOL(int *route, int rows, int topk, int e_lo, int e_count,
                                                   int mtile, int tcap, int *plan, float *y, int ldy, int dim,
                                                   const float *__restrict__ logits, i64 ld,
                                                   const float *__restrict__ bias, int E, float route_scale,
                                                   float *weights)
{
    dsk_pdl_wait(); // launched with PDL: nothing is read or written before the previous grid is done
    dsk_pdl_launch_next();
    __shared__ int sh[4 * MAXE];
    int *cnt = sh, *off = sh + MAXE, *toff = sh + 2 * MAXE, *cur = sh + 3 * MAXE;
    __shared__ int wsum[32];
    int tid = threadIdx.x, n = rows * topk;
#if P_R > 0
    // the rows' routing, RROWS rows at a time: every thread computes scores s_e into shared memory (the
    // plan's arrays, not yet in use), then warp w routes row r0 + w from them (rather than one warp issuing
    // all of its row's transcendental chains); the barriers make the ids and weights visible to the plan's
    // reads
    {
        float *sc = (float *)sh;
        for (int r0 = 0; r0 < rows; r0 += RROWS) {
            const int nr = min(RROWS, rows - r0);
            for (int i = tid; i < nr * E; i += 1024) {
                const int rr = i / E, e = i - rr * E;
                sc[rr * P_R * 32 + e] = sqrtsoftplus(logits[(i64)(r0 + rr) * ld + e]);
            }
            __syncthreads();
            const int w = tid >> 5;
            if (w < nr) {
                const float *sw = sc + w * P_R * 32;
                route_row_scored<P_R>([&](int e) { return sw[e]; }, bias, E, topk, route_scale, r0 + w, route,
                                      weights, nullptr, tid & 31);
            }
            __syncthreads();
        }
    }
#endif
    for (int e = tid; e < MAXE; e += 1024)
        cnt[e] = 0, cur[e] = 0;
    __syncthreads();
    for (int i = tid; i < n; i += 1024) {
        int e = route[i] - e_lo;
        if (e >= 0 && e < e_count)
            atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    // exclusive scans of entry counts and tile counts over the experts, 2 experts per thread
    int e0 = 2 * tid, c0 = e0 < e_count ? cnt[e0] : 0, c1 = e0 + 1 < e_count ? cnt[e0 + 1] : 0;
    int t0 = (c0 + mtile - 1) / mtile, t1 = (c1 + mtile - 1) / mtile;
    int lane = tid & 31, warp = tid >> 5;
    for (int pass = 0; pass < 2; pass++) {
        int v = pass == 0 ? c0 + c1 : t0 + t1, inc = v;
        for (int o = 1; o < 32; o <<= 1) {
            int u = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o)
                inc += u;
        }
        if (lane == 31)
            wsum[warp] = inc;
        __syncthreads();
        if (warp == 0) {
            int w = wsum[lane], wi = w;
            for (int o = 1; o < 32; o <<= 1) {
                int u = __shfl_up_sync(0xffffffffu, wi, o);
                if (lane >= o)
                    wi += u;
            }
            wsum[lane] = wi - w;
        }
        __syncthreads();
        int ex = wsum[warp] + inc - v;
        if (e0 < MAXE) {
            int *dst = pass == 0 ? off : toff;
            dst[e0] = ex;
            if (e0 + 1 < MAXE)
                dst[e0 + 1] = ex + (pass == 0 ? c0 : t0);
        }
        if (tid == 1023 && pass == 0)
            plan[1] = ex + v;
        if (tid == 1023 && pass == 1)
            plan[0] = ex + v;
        __syncthreads();
    }
    // tiles
    for (int e = tid; e < e_count; e += 1024) {
        int c = cnt[e];
        for (int j = 0; j * mtile < c; j++) {
            int t = toff[e] + j;
            plan[EXL3_PLAN_TILE_EXPERT(tcap) + t] = e;
            plan[EXL3_PLAN_TILE_FIRST(tcap) + t] = off[e] + j * mtile;
            plan[EXL3_PLAN_TILE_COUNT(tcap) + t] = min(mtile, c - j * mtile);
        }
    }
    // entries grouped by expert
    for (int i = tid; i < n; i += 1024) {
        int e = route[i] - e_lo;
        if (e >= 0 && e < e_count)
            plan[EXL3_PLAN_ENTRIES(tcap) + off[e] + atomicAdd(&cur[e], 1)] = i;
    }
    // per row: local slots in ascending expert id. Thread per entry: slot s of row r goes to its rank
    // among the row's local slots (ids first, then slots: a stable sort), the row's loads independent of
    // each other (one thread per row sorting by insertion chained dependent global loads)
    auto local = [&](int id) { return id - e_lo >= 0 && id - e_lo < e_count; };
    for (int i = tid; i < n; i += 1024) {
        const int r = i / topk, s = i - r * topk, e = route[i];
        const int *rr = route + (i64)r * topk;
        if (local(e)) {
            int rank = 0;
            for (int t = 0; t < topk; t++)
                rank += local(rr[t]) && (rr[t] < e || (rr[t] == e && t < s));
            plan[EXL3_PLAN_ROW_ORDER(tcap, rows, topk) + (i64)r * topk + rank] = s;
        }
        if (s == 0) {
            int ns = 0;
            for (int t = 0; t < topk; t++)
                ns += local(rr[t]);
            plan[EXL3_PLAN_ROW_NSLOTS(tcap, rows, topk) + r] = ns;
            if (ns == 0 && y)
                for (int c = 0; c < dim; c++)
                    y[(i64)r * ldy + c] = 0.0f;
        }
    }
}
