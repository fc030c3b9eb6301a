#include "runtime/launch/index_score.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"

int op_index_score(const kit *k, CUstream s, const index_score_args *a)
{
    return op_index_score_slices(k, s, a, 0);
}

int op_index_score_slices(const kit *k, CUstream s, const index_score_args *a, int slices)
{
    rule_variant v;
    if (rule_index_score_pick(a->nh, a->ihd, &v))
        return -1;
    if (a->rows < 0 || a->N < 0 || a->lds < a->N)
        return dsk_err("index_score: rows %d, N %d and lds %lld must satisfy 0 <= N <= lds, rows >= 0", a->rows, a->N,
                       (long long)a->lds);
    if (slices < 0 || slices > 65535)
        return dsk_err("index_score: %d slices per row (at most 65535)", slices);
    if (a->group < 0 || a->group > RULE_INDEX_SCORE_GROUP)
        return dsk_err("index_score %s: groups of %d rows (1 to %d)", v.params, a->group, RULE_INDEX_SCORE_GROUP);
    const struct {
        const char *name;
        CUdeviceptr p;
        int required;
    } ptrs[] = {{"q", a->q, 1},           {"w", a->w, 1},         {"keys", a->keys, 1}, {"key_base", a->key_base, 1},
                {"reach", a->reach, 1},   {"cand", a->cand, 0},   {"out", a->out, 1}};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) {
        if (!ptrs[i].p && ptrs[i].required)
            return dsk_err("index_score %s: %s is a null device pointer", v.params, ptrs[i].name);
        if (ptrs[i].p % 16)
            return dsk_err("index_score %s: %s (0x%llx) is not 16-byte aligned", v.params, ptrs[i].name,
                           (unsigned long long)ptrs[i].p);
    }
    if (a->cand) {
        if (a->cand_block < 1)
            return dsk_err("index_score %s: candidate block size %d must be >= 1", v.params, a->cand_block);
        int64_t words = ((int64_t)a->N + a->cand_block - 1) / a->cand_block;
        words = (words + 31) / 32;
        if (a->ldc < words)
            return dsk_err("index_score %s: candidate bitmap rows of %d words, %lld needed for %d keys in blocks of %d",
                           v.params, a->ldc, (long long)words, a->N, a->cand_block);
    }
    if (a->rows == 0 || a->N == 0)
        return 0;
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    int group = a->group ? a->group : 1, gx = (a->rows + group - 1) / group;
    if (!slices)
        slices = rule_index_score_slices(gx, a->N, a->sms);
    CUdeviceptr q = a->q, w = a->w, keys = a->keys, base = a->key_base, reach = a->reach, cand = a->cand, out = a->out;
    int ldc = a->ldc, cb = a->cand_block > 0 ? a->cand_block : 1, rows = a->rows, N = a->N;
    int64_t lds = a->lds;
    void *args[] = {&q, &w, &keys, &base, &reach, &cand, &ldc, &cb, &rows, &group, &N, &out, &lds};
    return kit_launch(kk, (unsigned)gx, (unsigned)slices, 1, s, args, 13);
}
