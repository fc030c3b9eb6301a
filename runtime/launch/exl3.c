/* Host launchers of the EXL3 kernels: shape checks with named errors, the variant/plan rule, the
 * workspace layout, and the launches (docs/exl3-kernels.md). */
#include "runtime/launch/exl3.h"
#include "runtime/common/error.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define ALIGN16(p) (((p) & 15) == 0)

static int cdiv(int a, int b)
{
    return (a + b - 1) / b;
}

static size_t up16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

int exl3_dev_linear_init(exl3_dev_linear *L, int k, int n, int K, int codebook, CUdeviceptr trellis, CUdeviceptr suh,
                         CUdeviceptr svh, CUdeviceptr bias, CUdeviceptr desc)
{
    memset(L, 0, sizeof *L);
    if (k <= 0 || n <= 0 || k % 128 || n % 128)
        return dsk_err("exl3 linear: k = %d and n = %d must be positive multiples of 128", k, n);
    if (K < 1 || K > 8)
        return dsk_err("exl3 linear %d x %d: K = %d bits, must be 1..8", k, n, K);
    if (codebook < 0 || codebook > 2)
        return dsk_err("exl3 linear %d x %d: codebook %d, must be 0 (3INST), 1 (MCG) or 2 (MUL1)", k, n, codebook);
    if (!trellis || !suh || !svh)
        return dsk_err("exl3 linear %d x %d: trellis, suh and svh must be device pointers", k, n);
    if (!ALIGN16(trellis) || !ALIGN16(suh) || !ALIGN16(svh) || !ALIGN16(bias) || !ALIGN16(desc))
        return dsk_err("exl3 linear %d x %d: trellis, suh, svh, bias and desc must be 16-byte aligned", k, n);
    L->k = k, L->n = n, L->K = K, L->codebook = codebook;
    rule_exl3_split(k, n, &L->qb, &L->groups);
    L->trellis = trellis, L->suh = suh, L->svh = svh, L->bias = bias, L->desc = desc;
    if (desc) {
        exl3_desc d;
        exl3_desc_fill(L, &d);
        CU_TRY(cu.cuMemcpyHtoD(desc, &d, sizeof d));
        /* the copy runs on the legacy stream: finish it before any launch on another stream reads it */
        CU_TRY(cu.cuCtxSynchronize());
    }
    return 0;
}

void exl3_desc_fill(const exl3_dev_linear *L, exl3_desc *d)
{
    memset(d, 0, sizeof *d);
    d->trellis = L->trellis, d->suh = L->suh, d->svh = L->svh, d->bias = L->bias;
    d->k = L->k, d->n = L->n, d->K = L->K, d->cb = L->codebook, d->qb = L->qb, d->groups = L->groups;
}

int exl3_moe_experts_init(exl3_moe_experts *E, const exl3_dev_linear *w1, const exl3_dev_linear *w3,
                          const exl3_dev_linear *w2, int nexp, CUdeviceptr table)
{
    memset(E, 0, sizeof *E);
    if (nexp < 1 || nexp > 2048)
        return dsk_err("exl3 moe: %d experts, must be 1..2048", nexp);
    if (!table || !ALIGN16(table))
        return dsk_err("exl3 moe: the descriptor table must be a 16-byte aligned device pointer");
    for (int e = 0; e < nexp; e++) {
        const exl3_dev_linear *a = &w1[e], *b = &w3[e], *c = &w2[e];
        if (a->k != w1[0].k || a->n != w1[0].n || b->k != a->k || b->n != a->n || c->k != a->n || c->n != a->k)
            return dsk_err("exl3 moe: expert %d: W1 %dx%d, W3 %dx%d, W2 %dx%d; need W1, W3 = %d -> %d and W2 = %d -> %d "
                           "for every expert",
                           e, a->k, a->n, b->k, b->n, c->k, c->n, w1[0].k, w1[0].n, w1[0].n, w1[0].k);
        if (a->K != w1[0].K || b->K != w1[0].K || c->K != w2[0].K)
            return dsk_err("exl3 moe: expert %d: K is %d/%d/%d (W1/W3/W2); W1 and W3 must all have K %d and W2 K %d", e,
                           a->K, b->K, c->K, w1[0].K, w2[0].K);
        if (a->codebook != w1[0].codebook || b->codebook != a->codebook || c->codebook != a->codebook)
            return dsk_err("exl3 moe: expert %d: codebooks %d/%d/%d (W1/W3/W2) differ from %d", e, a->codebook,
                           b->codebook, c->codebook, w1[0].codebook);
    }
    E->nexp = nexp, E->k = w1[0].k, E->n = w1[0].n;
    E->K_up = w1[0].K, E->K_down = w2[0].K, E->codebook = w1[0].codebook;
    E->groups_up = w1[0].groups, E->groups_down = w2[0].groups;
    E->table = table;
    for (int e = 0; e < nexp; e++) {
        exl3_desc d[3];
        exl3_desc_fill(&w1[e], &d[0]);
        exl3_desc_fill(&w3[e], &d[1]);
        exl3_desc_fill(&w2[e], &d[2]);
        CU_TRY(cu.cuMemcpyHtoD(table + (CUdeviceptr)e * sizeof d, d, sizeof d));
    }
    CU_TRY(cu.cuCtxSynchronize());
    return 0;
}

int exl3_workspace_alloc(exl3_workspace *ws, const dsk_gpu *g, size_t bytes)
{
    memset(ws, 0, sizeof *ws);
    bytes = bytes < EXL3_WS_COUNTER_BYTES ? EXL3_WS_COUNTER_BYTES : up16(bytes);
    CU_TRY(cu.cuMemAlloc(&ws->ptr, bytes));
    if (cu.cuMemsetD32(ws->ptr, 0, EXL3_WS_COUNTER_BYTES / 4) != CUDA_SUCCESS || cu.cuCtxSynchronize() != CUDA_SUCCESS) {
        cu.cuMemFree(ws->ptr);
        ws->ptr = 0;
        return dsk_err("exl3 workspace: cannot clear its counters");
    }
    ws->bytes = bytes;
    ws->sms = g->sms;
    return 0;
}

void exl3_workspace_free(exl3_workspace *ws)
{
    if (ws->ptr)
        cu.cuMemFree(ws->ptr);
    memset(ws, 0, sizeof *ws);
}

exl3_mm_plan exl3_plan_matmul(const exl3_dev_linear *const *L, int nmat, int rows, int sms)
{
    exl3_mm_plan p;
    p.bucket = rule_exl3_bucket(rows);
    p.xf = rule_exl3_pretransform(rows);
    int nb = 0;
    for (int m = 0; m < nmat; m++)
        nb += L[m]->n / 128;
    /* prompt: fold over k when the column blocks × row tiles fill the GPU about twice */
    p.fold = rows > 64 && nb * cdiv(rows, 64) >= 2 * (sms > 0 ? sms : 132);
    return p;
}

static int check_linear(const exl3_dev_linear *L, const char *what, int m)
{
    if (!L)
        return dsk_err("%s: matrix %d is NULL", what, m);
    if (L->k <= 0 || L->n <= 0 || L->k % 128 || L->n % 128 || L->K < 1 || L->K > 8 || L->codebook < 0 ||
        L->codebook > 2 || L->groups < 1 || L->qb < 1)
        return dsk_err("%s: matrix %d (%d x %d, K %d, codebook %d) was not set up by exl3_dev_linear_init", what, m, L->k,
                       L->n, L->K, L->codebook);
    if (!L->desc)
        return dsk_err("%s: matrix %d (%d x %d) has no device descriptor", what, m, L->k, L->n);
    return 0;
}

/* Byte offsets of the scratch regions (after the counters) of one grouped matmul. */
typedef struct {
    size_t part, xf, end;
    int counters;
} mm_layout;

static mm_layout layout_matmul(const exl3_dev_linear *const *L, int nmat, int rows, exl3_mm_plan p)
{
    mm_layout y;
    size_t off = EXL3_WS_COUNTER_BYTES, part = 0;
    int rt = cdiv(rows, p.bucket);
    y.counters = 0;
    for (int m = 0; m < nmat; m++) {
        part += (size_t)(L[m]->n / 128) * (size_t)rows * (size_t)(p.fold ? 1 : L[m]->groups) * 512;
        y.counters += (L[m]->n / 128) * rt;
    }
    y.part = off;
    off += up16(part);
    y.xf = off;
    if (p.xf)
        off += (size_t)nmat * (size_t)rt * (size_t)p.bucket * (size_t)L[0]->k * 2;
    y.end = off;
    return y;
}

size_t exl3_ws_bytes_matmul(const exl3_dev_linear *const *L, int nmat, int rows)
{
    exl3_mm_plan p = {rule_exl3_bucket(rows), rule_exl3_pretransform(rows), 0};
    return layout_matmul(L, nmat, rows, p).end;
}

static int check_rows(const char *what, int rows, int ldx, int ldy, int kdim, int ndim)
{
    if (rows < 0)
        return dsk_err("%s: %d rows", what, rows);
    if (ldx < kdim || ldx % 8 || ldy < ndim || ldy % 8)
        return dsk_err("%s: row strides ldx %d (needs >= %d) and ldy %d (needs >= %d) must be multiples of 8", what, ldx,
                       kdim, ldy, ndim);
    return 0;
}

int op_exl3_matmul(const kit *k, CUstream s, const exl3_dev_linear *L, CUdeviceptr x, int ldx, int rows,
                   CUdeviceptr y, int ldy, int out_kind, const exl3_workspace *ws)
{
    const exl3_dev_linear *one[1] = {L};
    return op_exl3_grouped(k, s, one, 1, x, ldx, rows, y, ldy, out_kind, ws, EXL3_AUTO);
}

/* The dense forms: grouped (matrices sharing x) or block-diagonal (matrix m on x's columns [m·k, (m+1)·k),
 * its descriptors consecutive). */
static int dense(const kit *k, CUstream s, const exl3_dev_linear *const *L, int nmat, int blockdiag, CUdeviceptr x,
                 int ldx, int rows, CUdeviceptr y, int ldy, int out_kind, const exl3_workspace *ws, exl3_force force)
{
    const char *what = blockdiag ? "exl3 block-diagonal matmul" : "exl3 matmul";
    int most = blockdiag ? EXL3_MAX_BLOCKS : 4;
    if (nmat < 1 || nmat > most)
        return dsk_err("%s: %d matrices, must be 1..%d", what, nmat, most);
    int ntot = 0;
    for (int m = 0; m < nmat; m++) {
        if (check_linear(L[m], what, m))
            return -1;
        if (L[m]->k != L[0]->k || L[m]->K != L[0]->K || L[m]->codebook != L[0]->codebook)
            return dsk_err("%s: matrix %d (k %d, K %d, codebook %d) differs from matrix 0 (k %d, K %d, codebook %d); "
                           "grouped matrices share k, K and codebook",
                           what, m, L[m]->k, L[m]->K, L[m]->codebook, L[0]->k, L[0]->K, L[0]->codebook);
        if (blockdiag && L[m]->n != L[0]->n)
            return dsk_err("%s: matrix %d has %d outputs, matrix 0 %d; the blocks share their shape", what, m, L[m]->n,
                           L[0]->n);
        if (blockdiag && L[m]->desc != L[0]->desc + (CUdeviceptr)m * sizeof(exl3_desc))
            return dsk_err("%s: matrix %d's descriptor (%#llx) does not follow matrix 0's (%#llx) at %zu bytes a "
                           "matrix: the blocks' descriptors must be one array",
                           what, m, (unsigned long long)L[m]->desc, (unsigned long long)L[0]->desc, sizeof(exl3_desc));
        ntot += L[m]->n;
    }
    if (check_rows(what, rows, ldx, ldy, blockdiag ? nmat * L[0]->k : L[0]->k, ntot))
        return -1;
    if (out_kind != EXL3_OUT_F32 && out_kind != EXL3_OUT_BF16)
        return dsk_err("%s: out_kind %d, must be EXL3_OUT_F32 or EXL3_OUT_BF16", what, out_kind);
    if (!ALIGN16(x) || !ALIGN16(y) || !x || !y)
        return dsk_err("%s: x and y must be 16-byte aligned device pointers", what);
    if (rows == 0)
        return 0;
    exl3_mm_plan p = exl3_plan_matmul(L, nmat, rows, ws ? ws->sms : 0);
    if (force.bucket > 0) {
        if (force.bucket != 8 && force.bucket != 16 && force.bucket != 32 && force.bucket != 64)
            return dsk_err("%s: forced bucket %d, must be 8, 16, 32 or 64", what, force.bucket);
        p.bucket = force.bucket;
    }
    if (force.xf >= 0)
        p.xf = force.xf;
    if (force.fold >= 0)
        p.fold = force.fold;
    mm_layout lay = layout_matmul(L, nmat, rows, p);
    if (!ws || !ws->ptr || ws->bytes < lay.end)
        return dsk_err("%s: the workspace has %zu bytes, %d rows x %d matrices need %zu (exl3_ws_bytes_matmul)", what,
                       ws ? ws->bytes : 0, rows, nmat, lay.end);
    if ((size_t)lay.counters * 4 > EXL3_WS_COUNTER_BYTES)
        return dsk_err("%s: %d rows need %d arrival counters, the workspace holds %zu; split the rows", what, rows,
                       lay.counters, EXL3_WS_COUNTER_BYTES / 4);
    const kit_kernel *mm = kit_findf(k, "exl3_mm", "K=%d,CB=%d,M=%d", L[0]->K, L[0]->codebook, p.bucket);
    if (!mm)
        return -1;
    CUdeviceptr d[4] = {0, 0, 0, 0};
    for (int m = 0; m < (blockdiag ? 1 : nmat); m++)
        d[m] = L[m]->desc;
    int rt = cdiv(rows, p.bucket);
    int64_t xf_stride = (int64_t)rt * p.bucket * L[0]->k;
    CUdeviceptr xin = x;
    if (p.xf) {
        const kit_kernel *had = kit_find(k, "exl3_had", "T=256");
        if (!had)
            return -1;
        CUdeviceptr xf = ws->ptr + lay.xf;
        int hflags = blockdiag ? EXL3_F_BLOCKDIAG : 0;
        void *hargs[] = {&d[0], &d[1], &d[2], &d[3], &x, &ldx, &rows, &xf, &xf_stride, &hflags};
        if (kit_launch(had, (unsigned)(L[0]->k / 128), (unsigned)(rt * p.bucket / 8), (unsigned)nmat, s, hargs, 10))
            return dsk_err_ctx("%s: input transform", what);
        xin = xf;
    }
    unsigned items = 0;
    for (int m = 0; m < nmat; m++)
        items += (unsigned)(rt * (L[m]->n / 128) * (p.fold ? 1 : L[m]->groups));
    CUdeviceptr part = ws->ptr + lay.part, cnt = ws->ptr, zero = 0;
    int mode = EXL3_MODE_DENSE, topk = 0, tcap = 0;
    int flags = (out_kind == EXL3_OUT_BF16 ? EXL3_F_OUT_BF16 : 0) | (p.xf ? EXL3_F_XF : 0) | (p.fold ? EXL3_F_FOLD : 0) |
                (blockdiag ? EXL3_F_BLOCKDIAG : 0);
    void *args[] = {&d[0], &d[1], &d[2],  &d[3],  &xin,  &y,     &part, &cnt,  &zero, &zero,     &zero,
                    &zero, &rows, &ldx,  &ldy,  &nmat, &mode, &flags, &topk, &tcap, &xf_stride};
    return kit_launch(mm, items, 1, 1, s, args, 21);
}

int op_exl3_grouped(const kit *k, CUstream s, const exl3_dev_linear *const *L, int nmat, CUdeviceptr x, int ldx,
                    int rows, CUdeviceptr y, int ldy, int out_kind, const exl3_workspace *ws, exl3_force force)
{
    return dense(k, s, L, nmat, 0, x, ldx, rows, y, ldy, out_kind, ws, force);
}

int op_exl3_blockdiag(const kit *k, CUstream s, const exl3_dev_linear *const *L, int nmat, CUdeviceptr x, int ldx,
                      int rows, CUdeviceptr y, int ldy, int out_kind, const exl3_workspace *ws, exl3_force force)
{
    return dense(k, s, L, nmat, 1, x, ldx, rows, y, ldy, out_kind, ws, force);
}

/* MoE scratch: plan, H (bf16 per entry), per-entry W2 outputs, partial sums; counters: per (tile,
 * column block) and per (row, column block of the output). */
typedef struct {
    int bucket, tcap, entries;
    size_t plan, h, yslot, part, end;
    int eu_counters, row_counters;
} moe_layout;

static moe_layout layout_moe(const exl3_moe_experts *E, int rows, int topk, int routed, int bucket, int fold)
{
    moe_layout y;
    y.bucket = bucket;
    y.entries = routed ? rows * topk : rows;
    int local = E->nexp < y.entries ? E->nexp : y.entries;
    y.tcap = routed ? local + y.entries / bucket : cdiv(rows, bucket);
    int nb1 = E->n / 128, nb2 = E->k / 128;
    size_t off = EXL3_WS_COUNTER_BYTES;
    y.plan = off;
    off += up16((size_t)EXL3_PLAN_WORDS(y.tcap, rows, topk) * 4);
    y.h = off;
    off += up16((size_t)y.entries * (size_t)E->n * 2);
    y.yslot = off;
    off += up16((size_t)y.entries * (size_t)E->k * 2);
    size_t pu = (size_t)y.entries * (size_t)nb1 * 2 * (size_t)(fold ? 1 : E->groups_up);
    size_t pd = (size_t)y.entries * (size_t)nb2 * (size_t)(fold ? 1 : E->groups_down);
    y.part = off;
    off += (pu > pd ? pu : pd) * 512;
    y.end = off;
    y.eu_counters = y.tcap * (nb1 > nb2 ? nb1 : nb2);
    y.row_counters = rows * nb2;
    return y;
}

size_t exl3_ws_bytes_moe(const exl3_moe_experts *E, int rows, int topk)
{
    return layout_moe(E, rows, topk > 0 ? topk : 1, 1, rule_exl3_bucket(rows), 0).end;
}

static int moe_run(const kit *k, CUstream s, const exl3_moe_experts *E, CUdeviceptr x, int ldx, int rows,
                   const exl3_router *rt, CUdeviceptr route, CUdeviceptr weights, int topk, int e_lo, CUdeviceptr y,
                   int ldy, int accumulate, const exl3_workspace *ws, exl3_force force, int phases)
{
    const char *what = rt ? "exl3 moe (routed in its plan)" : "exl3 moe";
    if (rt) {
        if (!route || rows > RULE_ROUTE_PLAN_ROWS)
            return dsk_err("%s: %d rows (1..%d) and the ids' buffer are needed", what, rows, RULE_ROUTE_PLAN_ROWS);
        if (!rt->logits || !rt->bias || (rt->logits & 3) || (rt->bias & 3) || rt->ld < rt->n_experts)
            return dsk_err("%s: the gate logits and bias must be 4-byte aligned device pointers, the logits' row "
                           "stride (%lld) at least the %d experts", what, (long long)rt->ld, rt->n_experts);
    }
    if (!E || !E->table || E->nexp < 1)
        return dsk_err("%s: the experts were not set up by exl3_moe_experts_init", what);
    if (check_rows(what, rows, ldx, ldy, E->k, E->k))
        return -1;
    if (route && (topk < 1 || topk > 64 || !weights))
        return dsk_err("%s: with routing, topk (%d) must be 1..64 and the routing weights given", what, topk);
    if (!ALIGN16(x) || !ALIGN16(y) || !x || !y || (route & 3) || (weights & 3))
        return dsk_err("%s: x and y must be 16-byte aligned device pointers, route and weights 4-byte aligned", what);
    if (rows == 0)
        return 0;
    int routed = route != 0, tk = routed ? topk : 1;
    int bucket = force.bucket > 0 ? force.bucket : rule_exl3_bucket(rows);
    if (bucket != 8 && bucket != 16 && bucket != 32 && bucket != 64)
        return dsk_err("%s: forced bucket %d, must be 8, 16, 32 or 64", what, bucket);
    /* fold when the experts alone give about four waves of CTAs (≈ rows·topk tiles × column blocks × 2
     * matrices); fewer rows split over k groups */
    int sms = ws && ws->sms > 0 ? ws->sms : 132;
    int fold = force.fold >= 0 ? force.fold : (routed ? rows * topk : cdiv(rows, bucket)) * (E->n / 128) * 2 >= 32 * sms;
    moe_layout lay = layout_moe(E, rows, tk, routed, bucket, fold);
    if (!ws || !ws->ptr || ws->bytes < lay.end)
        return dsk_err("%s: the workspace has %zu bytes, %d rows need %zu (exl3_ws_bytes_moe)", what, ws ? ws->bytes : 0,
                       rows, lay.end);
    if ((size_t)(lay.eu_counters + lay.row_counters) * 4 > EXL3_WS_COUNTER_BYTES)
        return dsk_err("%s: %d rows need %d arrival counters, the workspace holds %zu; split the rows", what, rows,
                       lay.eu_counters + lay.row_counters, EXL3_WS_COUNTER_BYTES / 4);
    const kit_kernel *up = kit_findf(k, "exl3_mm", "K=%d,CB=%d,M=%d", E->K_up, E->codebook, bucket);
    const kit_kernel *down = up ? kit_findf(k, "exl3_mm", "K=%d,CB=%d,M=%d", E->K_down, E->codebook, bucket) : NULL;
    const kit_kernel *plan_k = NULL;
    if (down && routed && rt) {
        rule_variant pv;
        plan_k = rule_moe_route_plan_pick(rt->n_experts, topk, &pv) ? NULL : kit_find(k, pv.family, pv.params);
    } else if (down && routed)
        plan_k = kit_find(k, "exl3_moe_plan", RULE_MOE_PLAN_GIVEN);
    if (!down || (routed && !plan_k))
        return -1;
    CUdeviceptr plan = routed ? ws->ptr + lay.plan : 0, h = ws->ptr + lay.h, yslot = ws->ptr + lay.yslot;
    CUdeviceptr part = ws->ptr + lay.part, cnt = ws->ptr, rcnt = ws->ptr + (CUdeviceptr)lay.eu_counters * 4, zero = 0;
    int tcap = lay.tcap, n = E->n, kdim = E->k, nexp = E->nexp;
    if (routed && (phases & EXL3_MOE_UP)) {
        CUdeviceptr yz = accumulate ? 0 : y, lg = rt ? rt->logits : 0, bias = rt ? rt->bias : 0;
        CUdeviceptr rw = rt ? weights : 0;
        int64_t ld = rt ? rt->ld : 0;
        int ne = rt ? rt->n_experts : 0;
        float scale = rt ? rt->route_scale : 0.0f;
        void *pargs[] = {&route, &rows, &topk, &e_lo, &nexp, &bucket, &tcap, &plan, &yz,
                         &ldy,   &kdim, &lg,   &ld,   &bias, &ne,     &scale, &rw};
        if (kit_launch(plan_k, 1, 1, 1, s, pargs, 17))
            return dsk_err_ctx("%s: plan", what);
    }
    int nmat = 1, flags = fold ? EXL3_F_FOLD : 0, mode = EXL3_MODE_MOE_UP;
    int64_t xf_stride = 0;
    unsigned items = (unsigned)tcap * (unsigned)(n / 128) * 2u * (unsigned)(fold ? 1 : E->groups_up);
    CUdeviceptr table = E->table;
    void *uargs[] = {&table, &zero, &zero, &zero, &x,    &h,    &part,  &cnt,  &rcnt, &plan,     &yslot,
                     &weights, &rows, &ldx,  &n,    &nmat, &mode, &flags, &tk,   &tcap, &xf_stride};
    if ((phases & EXL3_MOE_UP) && kit_launch(up, items, 1, 1, s, uargs, 21))
        return dsk_err_ctx("%s: gate and up", what);
    mode = EXL3_MODE_MOE_DOWN;
    flags |= accumulate ? EXL3_F_ACCUM : 0;
    items = (unsigned)tcap * (unsigned)(kdim / 128) * (unsigned)(fold ? 1 : E->groups_down);
    void *dargs[] = {&table, &zero, &zero, &zero, &h,    &y,    &part,  &cnt,  &rcnt, &plan,     &yslot,
                     &weights, &rows, &n,    &ldy,  &nmat, &mode, &flags, &tk,   &tcap, &xf_stride};
    if ((phases & EXL3_MOE_DOWN) && kit_launch(down, items, 1, 1, s, dargs, 21))
        return dsk_err_ctx("%s: down", what);
    return 0;
}

int op_exl3_moe(const kit *k, CUstream s, const exl3_moe_experts *E, CUdeviceptr x, int ldx, int rows,
                CUdeviceptr route, CUdeviceptr weights, int topk, int e_lo, CUdeviceptr y, int ldy, int accumulate,
                const exl3_workspace *ws, exl3_force force)
{
    return moe_run(k, s, E, x, ldx, rows, NULL, route, weights, topk, e_lo, y, ldy, accumulate, ws, force,
                   EXL3_MOE_UP | EXL3_MOE_DOWN);
}

int op_exl3_moe_route(const kit *k, CUstream s, const exl3_moe_experts *E, CUdeviceptr x, int ldx, int rows,
                      const exl3_router *rt, CUdeviceptr route, CUdeviceptr weights, int topk, int e_lo, CUdeviceptr y,
                      int ldy, int accumulate, const exl3_workspace *ws, exl3_force force)
{
    if (!rt)
        return dsk_err("exl3 moe (routed in its plan): no router given");
    return moe_run(k, s, E, x, ldx, rows, rt, route, weights, topk, e_lo, y, ldy, accumulate, ws, force,
                   EXL3_MOE_UP | EXL3_MOE_DOWN);
}

int op_exl3_moe_phase(const kit *k, CUstream s, const exl3_moe_experts *E, CUdeviceptr x, int ldx, int rows,
                      CUdeviceptr y, int ldy, int accumulate, const exl3_workspace *ws, exl3_force force, int phase)
{
    if (phase != EXL3_MOE_UP && phase != EXL3_MOE_DOWN)
        return dsk_err("exl3 moe: phase %d (EXL3_MOE_UP or EXL3_MOE_DOWN)", phase);
    return moe_run(k, s, E, x, ldx, rows, NULL, 0, 0, 1, 0, y, ldy, accumulate, ws, force, phase);
}

int op_exl3_reconstruct(const kit *k, CUstream s, const exl3_dev_linear *L, CUdeviceptr out, int original_basis)
{
    if (check_linear(L, "exl3 reconstruct", 0))
        return -1;
    if (!out || !ALIGN16(out))
        return dsk_err("exl3 reconstruct: out must be a 16-byte aligned device pointer");
    const kit_kernel *kk = kit_findf(k, "exl3_recon", "K=%d,CB=%d", L->K, L->codebook);
    if (!kk)
        return -1;
    CUdeviceptr d = L->desc;
    int mode = original_basis ? 1 : 0;
    void *args[] = {&d, &out, &mode};
    return kit_launch(kk, (unsigned)(L->n / 128), (unsigned)(L->k / 128), 1, s, args, 3);
}
