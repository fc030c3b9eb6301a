#include "runtime/launch/cand_blocks.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/launch/topk.h"

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

int64_t op_cand_blocks_ldb(int N, int block)
{
    int64_t nb = block > 0 ? ((int64_t)N + block - 1) / block : 0;
    return (nb + 3) & ~(int64_t)3; /* 16-byte rows */
}

/* Offsets of the top-k's output and workspace in ws (0 when the launch keeps every block). */
static size_t layout(int rows, int N, int block, int cap, size_t *sel_idx, size_t *sel_val, size_t *topk_ws,
                     size_t *topk_bytes)
{
    int64_t nb = ((int64_t)N + block - 1) / block, ldb = op_cand_blocks_ldb(N, block);
    size_t off = align256((size_t)rows * (size_t)ldb * 4);
    *sel_idx = *sel_val = *topk_ws = *topk_bytes = 0;
    if (!rule_cand_blocks_need_topk(nb, cap))
        return off;
    *sel_idx = off;
    off = align256(off + (size_t)rows * (size_t)cap * 4);
    *sel_val = off;
    off = align256(off + (size_t)rows * (size_t)cap * 4);
    *topk_ws = off;
    *topk_bytes = op_topk_ws_bytes(rows, (int)nb, cap < nb ? cap : (int)nb);
    return off + *topk_bytes;
}

size_t op_cand_blocks_ws_bytes(int rows, int N, int block, int cap)
{
    if (rows <= 0 || N <= 0 || block <= 0 || cap <= 0)
        return 0;
    size_t a, b, c, d;
    return layout(rows, N, block, cap, &a, &b, &c, &d);
}

int op_cand_blocks(const kit *k, CUstream s, const cand_blocks_args *a)
{
    if (a->rows < 0 || a->N < 0 || a->lds < a->N)
        return dsk_err("cand_blocks: rows %d, N %d and lds %lld must satisfy 0 <= N <= lds, rows >= 0", a->rows, a->N,
                       (long long)a->lds);
    if (a->block < 1 || a->cap < 1)
        return dsk_err("cand_blocks: block size %d and cap %d must be >= 1", a->block, a->cap);
    if (a->rows > 65535)
        return dsk_err("cand_blocks: %d rows: at most 65535 per launch (grid y)", a->rows);
    if (a->rows == 0 || a->N == 0)
        return 0;
    int64_t nb = ((int64_t)a->N + a->block - 1) / a->block, words = (nb + 31) / 32;
    if (a->ldw < words)
        return dsk_err("cand_blocks: bitmap rows of %d words, %lld needed for %lld blocks", a->ldw, (long long)words,
                       (long long)nb);
    const struct {
        const char *name;
        CUdeviceptr p;
    } ptrs[] = {{"scores", a->scores}, {"reach", a->reach}, {"bitmap", a->bitmap}, {"ws", a->ws}};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if (!ptrs[i].p || ptrs[i].p % 16)
            return dsk_err("cand_blocks: %s (0x%llx) must be a 16-byte aligned device pointer", ptrs[i].name,
                           (unsigned long long)ptrs[i].p);
    size_t oi, ov, ot, tb, need = layout(a->rows, a->N, a->block, a->cap, &oi, &ov, &ot, &tb);
    if (a->ws_bytes < need)
        return dsk_err("cand_blocks: %d rows of %d scores in blocks of %d (cap %d) need a workspace of %zu bytes, got %zu",
                       a->rows, a->N, a->block, a->cap, need, a->ws_bytes);
    rule_variant vs, vm;
    rule_cand_blocks_pick(&vs, &vm);
    const kit_kernel *ks = kit_find(k, vs.family, vs.params), *km = kit_find(k, vm.family, vm.params);
    if (!ks || !km)
        return -1;
    CUdeviceptr scores = a->scores, reach = a->reach, bs = a->ws, bitmap = a->bitmap;
    int64_t lds = a->lds, ldb = op_cand_blocks_ldb(a->N, a->block);
    int N = a->N, B = a->block, NB = (int)nb, ldw = a->ldw;
    /* every block kept (no top-k): the block scores' launch writes the bitmap too, over all ldw words */
    CUdeviceptr direct = oi ? 0 : bitmap;
    int64_t threads = oi ? nb : (int64_t)ldw * 32;
    void *args_s[] = {&scores, &lds, &reach, &N, &B, &bs, &ldb, &NB, &direct, &ldw};
    if (kit_launch(ks, (unsigned)((threads + 255) / 256), (unsigned)a->rows, 1, s, args_s, 10))
        return dsk_err_ctx("cand_blocks: block scores");
    if (!oi)
        return 0;
    CUdeviceptr sel_idx = a->ws + oi, sel_val = a->ws + ov;
    int kk = a->cap;
    if (op_topk(k, s, bs, 0, a->rows, NB, kk, ldb, sel_idx, sel_val, a->ws + ot, tb))
        return dsk_err_ctx("cand_blocks: top %d of %d blocks", kk, NB);
    void *args_m[] = {&bs, &ldb, &NB, &sel_idx, &sel_val, &kk, &bitmap, &ldw};
    if (kit_launch(km, (unsigned)((ldw + 255) / 256), (unsigned)a->rows, 1, s, args_m, 8))
        return dsk_err_ctx("cand_blocks: the kept set");
    return 0;
}
