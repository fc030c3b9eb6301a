#include "runtime/launch/sparse_attn.h"
#include "kit/src/sparse_attn_abi.cuh"
#include "manifest/rules/rules.h"
#include "runtime/common/error.h"
#include "runtime/driver/cuda_api.h"

#include <math.h>

static int blocks_of(int max_list)
{
    return (max_list + SPARSE_ATTN_BLOCK - 1) / SPARSE_ATTN_BLOCK;
}

static int groups_of(int heads)
{
    return (heads + SPARSE_ATTN_HEADS - 1) / SPARSE_ATTN_HEADS;
}

static int want_split(const sparse_attn_args *a, int split)
{
    return split < 0 ? rule_sparse_attn_split(a->rows, a->heads, a->max_list) : split != 0;
}

size_t op_sparse_attn_ws_bytes_form(const sparse_attn_args *a, int split)
{
    if (!want_split(a, split) || a->rows <= 0 || a->heads <= 0 || a->max_list <= 0)
        return 0;
    size_t pairs = (size_t)a->rows * (size_t)groups_of(a->heads);
    return pairs * (size_t)blocks_of(a->max_list) * SPARSE_ATTN_WS_BLOCK((size_t)a->head_dim) * sizeof(float) +
           pairs * SPARSE_ATTN_WS_COUNTERS * sizeof(uint32_t); /* the fold's arrival counters */
}

size_t op_sparse_attn_ws_bytes(const sparse_attn_args *a)
{
    return op_sparse_attn_ws_bytes_form(a, -1);
}

static int check_args(const sparse_attn_args *a, int split)
{
    if (a->head_dim != 128 && a->head_dim != 512)
        return dsk_err("sparse_attn: head_dim %d is not one the kit has (128, 512)", a->head_dim);
    if (a->rows < 0 || a->rows > 65535)
        return dsk_err("sparse_attn: %d rows (0 .. 65535 per launch)", a->rows);
    if (a->heads < 1 || a->heads > 65535 * SPARSE_ATTN_HEADS)
        return dsk_err("sparse_attn: %d heads", a->heads);
    if (a->ring < 1)
        return dsk_err("sparse_attn: ring of %d slots (at least 1)", a->ring);
    if (a->max_list < 1)
        return dsk_err("sparse_attn: max_list %d (the longest list, at least 1)", a->max_list);
    if (a->rope_dim < 0 || a->rope_dim % 2 || a->rope_dim > a->head_dim || a->rope_dim > SPARSE_ATTN_MAX_ROPE)
        return dsk_err("sparse_attn: rope_dim %d must be even, at most head_dim %d and %d", a->rope_dim, a->head_dim,
                       SPARSE_ATTN_MAX_ROPE);
    if (a->q_rope && (a->rope_dim <= 0 || a->rope_dim % 8))
        return dsk_err("sparse_attn: the queries' RoPE on load needs rope_dim a positive multiple of 8, got %d",
                       a->rope_dim);
    if (!a->rope_dim != !a->freqs)
        return dsk_err("sparse_attn: rope_dim %d %s", a->rope_dim,
                       a->freqs ? "with frequencies (0 rotates nothing)" : "without frequencies (freqs is 0)");
    if (a->sel && a->sel_ld < 1)
        return dsk_err("sparse_attn: selection row length sel_ld %d", a->sel_ld);
    struct {
        const char *name;
        CUdeviceptr p;
        int required;
    } ptrs[] = {{"q", a->q, 1},          {"kv_call", a->kv_call, 1}, {"kv_ring", a->kv_ring, 0},
                {"kv2", a->kv2, 0},      {"sel", a->sel, 0},         {"rows_desc", a->rows_desc, 1},
                {"sink", a->sink, 1},    {"freqs", a->freqs, 0},     {"out", a->out, 1},
                {"ws", a->ws, 0}};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) {
        if (ptrs[i].required && !ptrs[i].p)
            return dsk_err("sparse_attn: %s is missing", ptrs[i].name);
        if (ptrs[i].p % 16)
            return dsk_err("sparse_attn: %s (0x%llx) is not 16-byte aligned", ptrs[i].name,
                           (unsigned long long)ptrs[i].p);
    }
    size_t need = op_sparse_attn_ws_bytes_form(a, split);
    if (need && (!a->ws || a->ws_bytes < need))
        return dsk_err("sparse_attn: the split form of %d rows x %d heads, lists up to %d, needs a workspace of %zu "
                       "bytes (%zu given)",
                       a->rows, a->heads, a->max_list, need, a->ws ? a->ws_bytes : (size_t)0);
    return 0;
}

/* The variant of a mode, checked against the ABI this launcher was built with: a kit whose variant spec
 * disagrees on threads or shared memory would run out of bounds. */
static const kit_kernel *variant(const kit *k, int hd, int mode)
{
    rule_variant v;
    rule_sparse_attn_pick(hd, mode, &v);
    const kit_kernel *kk = kit_find(k, v.family, v.params);
    if (!kk)
        return NULL;
    if (kk->meta->block != SPARSE_ATTN_THREADS(hd, mode) || kk->meta->smem < SPARSE_ATTN_SMEM(hd, mode)) {
        dsk_err("sparse_attn %s: the kit's variant has %d threads and %d bytes of shared memory, the launcher "
                "needs %d and %d (kit/variants.json and kit/src/sparse_attn_abi.cuh disagree)",
                v.params, kk->meta->block, kk->meta->smem, SPARSE_ATTN_THREADS(hd, mode), SPARSE_ATTN_SMEM(hd, mode));
        return NULL;
    }
    return kk;
}

int op_sparse_attn_form(const kit *k, CUstream s, const sparse_attn_args *a, int split)
{
    if (check_args(a, split))
        return -1;
    if (a->rows == 0)
        return 0;
    int sp = want_split(a, split);
    int rows = a->rows, heads = a->heads, ring = a->ring, sel_ld = a->sel ? a->sel_ld : 0, rope = a->rope_dim;
    int max_blocks = blocks_of(a->max_list);
    float scale = (float)(1.0 / sqrt((double)a->head_dim)); /* fp32(head_dim^-1/2), as the reference */
    CUdeviceptr q = a->q, kc = a->kv_call, kr = a->kv_ring, k2 = a->kv2, sel = a->sel, meta = a->rows_desc;
    CUdeviceptr sink = a->sink, fr = a->freqs, out = a->out, ws = sp ? a->ws : 0;
    int q_rope = a->q_rope;
    void *args[] = {&q, &kc, &kr, &k2, &sel, &meta, &sink, &fr, &out, &ws, &rows, &heads, &ring, &sel_ld, &rope,
                    &max_blocks, &scale, &q_rope};
    unsigned groups = (unsigned)groups_of(heads);
    if (!sp) {
        const kit_kernel *kk = variant(k, a->head_dim, SPARSE_ATTN_MODE_WHOLE);
        return kk ? kit_launch(kk, groups, (unsigned)rows, 1, s, args, 18) : -1;
    }
    const kit_kernel *k1 = variant(k, a->head_dim, SPARSE_ATTN_MODE_SCORES);
    const kit_kernel *k2v = k1 ? variant(k, a->head_dim, SPARSE_ATTN_MODE_VALUES) : NULL;
    if (!k2v)
        return -1;
    /* the scores (and the counters zeroed), then the values, whose last CTA per row and head group folds */
    if (kit_launch(k1, groups, (unsigned)rows, (unsigned)max_blocks, s, args, 18))
        return -1;
    return kit_launch(k2v, groups, (unsigned)rows, (unsigned)max_blocks, s, args, 18);
}

int op_sparse_attn(const kit *k, CUstream s, const sparse_attn_args *a)
{
    return op_sparse_attn_form(k, s, a, -1);
}
