#include "runtime/launch/sample.h"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/launch/topk.h"

_Static_assert(RULE_SAMPLE_PER_THREAD == SAMPLE_PER_THREAD && RULE_SAMPLE_CANDIDATES == SAMPLE_CANDIDATES,
               "manifest/rules/rules.h and kit/src/sample_abi.cuh disagree on the sample family's shape");
_Static_assert(sizeof(sample_row_params) == 48 && sizeof(sample_partial) == 192, "sample ABI sizes");

static size_t align256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

static int64_t z_stride(int V)
{
    return ((int64_t)V + 3) & ~(int64_t)3;
}

/* Workspace: partials [rows][slices]; with candidates, z [rows][z_stride], the top-k's ids and values
 * [rows][nc] and its workspace. Returns the bytes; offsets through the pointers. */
static size_t layout(int rows, int V, int candidates, size_t *z, size_t *ci, size_t *cv, size_t *tws, size_t *tb)
{
    size_t off = align256((size_t)rows * (size_t)rule_sample_slices(V) * sizeof(sample_partial));
    *z = *ci = *cv = *tws = *tb = 0;
    if (!candidates)
        return off;
    int nc = rule_sample_candidates(V);
    *z = off;
    off = align256(off + (size_t)rows * (size_t)z_stride(V) * 4);
    *ci = off;
    off = align256(off + (size_t)rows * (size_t)nc * 4);
    *cv = off;
    off = align256(off + (size_t)rows * (size_t)nc * 4);
    *tws = off;
    *tb = op_topk_ws_bytes(rows, V, nc);
    return off + *tb;
}

size_t op_sample_ws_bytes(int rows, int V, int candidates)
{
    if (rows <= 0 || V <= 0)
        return 0;
    size_t a, b, c, d, e;
    return layout(rows, V, candidates, &a, &b, &c, &d, &e);
}

int op_sample(const kit *k, CUstream s, const sample_args *a)
{
    rule_variant v;
    rule_sample_pick(&v);
    if (a->rows < 0 || a->V < 1 || a->ldl < a->V)
        return dsk_err("sample: %d rows of %d logits with row stride %lld", a->rows, a->V, (long long)a->ldl);
    int S = rule_sample_slices(a->V);
    if (S * SAMPLE_TOP_LOGPROBS > SAMPLE_CANDIDATES)
        return dsk_err("sample: a vocabulary of %d is %d slices; the top log-probabilities are merged from at most %d",
                       a->V, S, SAMPLE_CANDIDATES / SAMPLE_TOP_LOGPROBS);
    if (a->rows > 65535)
        return dsk_err("sample: %d rows: at most 65535 per launch (grid y)", a->rows);
    if (a->allow && a->ldw < (a->V + 31) / 32)
        return dsk_err("sample: allow-mask rows of %d words, %d needed for %d ids", a->ldw, (a->V + 31) / 32, a->V);
    const struct {
        const char *name;
        CUdeviceptr p;
        int required;
    } ptrs[] = {{"logits", a->logits, 1},   {"vocab", a->vocab, 0},     {"allow", a->allow, 0},
                {"params", a->params, 1},   {"tokens", a->tokens, 1},   {"logprob", a->logprob, 1},
                {"top_ids", a->top_ids, 1}, {"top_lp", a->top_lp, 1},   {"ws", a->ws, 1}};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
        if ((!ptrs[i].p && ptrs[i].required) || ptrs[i].p % 16)
            return dsk_err("sample: %s (0x%llx) must be a 16-byte aligned device pointer", ptrs[i].name,
                           (unsigned long long)ptrs[i].p);
    size_t oz, oi, ov, ot, tb, need = layout(a->rows, a->V, a->candidates, &oz, &oi, &ov, &ot, &tb);
    if (a->ws_bytes < need)
        return dsk_err("sample: %d rows of %d logits%s need a workspace of %zu bytes, got %zu", a->rows, a->V,
                       a->candidates ? " with candidates" : "", need, a->ws_bytes);
    if (a->rows == 0)
        return 0;
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return -1;
    CUdeviceptr logits = a->logits, vocab = a->vocab, allow = a->allow, params = a->params, part = a->ws;
    CUdeviceptr zk = oz ? a->ws + oz : 0, ci = oi ? a->ws + oi : 0, cv = ov ? a->ws + ov : 0;
    CUdeviceptr tokens = a->tokens, logprob = a->logprob, top_ids = a->top_ids, top_lp = a->top_lp;
    int64_t ldl = a->ldl, ldz = z_stride(a->V);
    int V = a->V, ldw = a->ldw, nc = rule_sample_candidates(a->V), step;
    void *args[] = {&logits, &ldl, &V, &vocab, &allow, &ldw, &params, &zk, &ldz, &part, &S, &ci, &cv, &nc,
                    &tokens, &logprob, &top_ids, &top_lp, &step};
    for (step = 0; step < 2; step++)
        if (kit_launch(kk, (unsigned)S, (unsigned)a->rows, 1, s, args, 19))
            return dsk_err_ctx("sample: step %d", step);
    if (a->candidates && op_topk(k, s, zk, 0, a->rows, V, nc, ldz, ci, cv, a->ws + ot, tb))
        return dsk_err_ctx("sample: the top %d candidates of %d", nc, V);
    step = 2;
    if (kit_launch(kk, 1, (unsigned)a->rows, 1, s, args, 19))
        return dsk_err_ctx("sample: step 2");
    return 0;
}
