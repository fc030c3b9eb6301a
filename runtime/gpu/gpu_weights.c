/* Uploading the checkpoint: one binder walks the model's tensors twice, first only adding up the bytes
 * (so the free memory is checked before anything is allocated), then copying each into the arena. */
#include "runtime/gpu/gpu_weights.h"
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/common/util.h"
#include "runtime/weights/exl3_linear.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARENA_ALIGN 256

typedef struct {
    gpu_weights *w;
    const st_set *st;
    const gpu_weights_opts *o;
    int dry;             /* size pass: count bytes, copy nothing */
    size_t bytes;        /* dry: the total */
    size_t copied;       /* real: uploaded so far (progress) */
    double t0, last;
    char nm[192];
} binder;

/* Reserve bytes of the arena (the size pass only counts them) and, with host, copy them there. */
static CUdeviceptr put(binder *b, const void *host, size_t bytes)
{
    size_t *at = b->dry ? &b->bytes : &b->w->used;
    size_t off = (*at + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (b->dry) {
        *at = off + bytes;
        return 0;
    }
    if (off + bytes > b->w->arena_bytes) {
        dsk_err("gpu weights: the arena (%zu bytes) is smaller than the size pass said", b->w->arena_bytes);
        return 0;
    }
    CUdeviceptr d = b->w->arena + off;
    if (host && bytes && cu.cuMemcpyHtoD(d, host, bytes) != CUDA_SUCCESS) {
        dsk_err("gpu weights: copying %zu bytes to the device failed", bytes);
        return 0;
    }
    *at = off + bytes;
    b->copied += host ? bytes : 0;
    double now = dsk_now();
    if (b->o->progress && now - b->last > 0.5 && isatty(2)) {
        fprintf(stderr, "\ruploading weights: %.2f / %.2f GiB (%.1f GiB/s)", b->copied / 1073741824.0,
                b->w->arena_bytes / 1073741824.0, b->copied / 1073741824.0 / (now - b->t0));
        b->last = now;
    }
    return d;
}

/* A tensor by name, with its dtype checked. */
static const st_tensor *tensor(binder *b, const char *name, st_dtype dt, st_dtype alt)
{
    const st_tensor *t = st_get(b->st, name);
    if (!t) {
        dsk_err("tensor %s is missing", name);
        return NULL;
    }
    if (t->dtype != dt && t->dtype != alt) {
        dsk_err("tensor %s is %s, expected %s", name, st_dtype_name(t->dtype), st_dtype_name(dt));
        return NULL;
    }
    return t;
}

/* bf16 on the device; f32 storage (norms, Engram q/k weights) rounded to bf16 as REF holds it. */
static int up_bf16(binder *b, const char *name, CUdeviceptr *out)
{
    const st_tensor *t = tensor(b, name, ST_BF16, ST_F32);
    if (!t)
        return -1;
    size_t n = t->nbytes / st_dtype_size(t->dtype);
    if (b->dry) {
        put(b, NULL, n * 2);
        return 0;
    }
    uint16_t *h = dsk_malloc(n * 2 + 2);
    if (!h)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (t->dtype == ST_BF16)
            memcpy(&h[i], (const char *)t->data + 2 * i, 2);
        else {
            float f;
            memcpy(&f, (const char *)t->data + 4 * i, 4);
            h[i] = f32_to_bf16(f);
        }
    }
    *out = put(b, h, n * 2);
    free(h);
    return *out ? 0 : dsk_err_ctx("tensor %s", name);
}

static int up_raw(binder *b, const char *name, st_dtype dt, CUdeviceptr *out)
{
    const st_tensor *t = tensor(b, name, dt, dt);
    if (!t)
        return -1;
    *out = put(b, t->data, t->nbytes);
    return b->dry || *out ? 0 : dsk_err_ctx("tensor %s", name);
}

/* Bytes [off, off + bytes) of a tensor (a rank's part of a per-head vector). */
static int up_raw_part(binder *b, const char *name, st_dtype dt, size_t off, size_t bytes, CUdeviceptr *out)
{
    const st_tensor *t = tensor(b, name, dt, dt);
    if (!t)
        return -1;
    if (off + bytes > t->nbytes)
        return dsk_err("tensor %s holds %zu bytes, its part [%zu, %zu) is past them", name, t->nbytes, off, off + bytes);
    *out = put(b, (const char *)t->data + off, bytes);
    return b->dry || *out ? 0 : dsk_err_ctx("tensor %s", name);
}

/* Element i of an fp32 tensor as stored (a file's tensors need not be 4-byte aligned: copied, not loaded). */
static float f32_at(const st_tensor *t, size_t i)
{
    float v;
    memcpy(&v, (const char *)t->data + 4 * i, sizeof v);
    return v;
}

/* An EXL3 linear: trellis, suh, svh, bias (widened to fp32) and, with_desc, its descriptor (experts
 * need none: their table holds them). Only input rows [k0, k1) and output columns [c0, c1) (multiples of
 * 128: the Hadamard transforms work per 128 inputs and per 128 outputs) become the linear, their trellis
 * tiles gathered contiguous; shared_suh, when given, is an suh already on the device (the groups of wo_a
 * share one). A rank's part of a row split (wo_b's inputs) is a partial sum of every output: it takes no
 * bias (the sum would count it once per rank). */
static int up_linear_part(binder *b, const exl3_linear *q, int64_t k0, int64_t k1, int64_t c0, int64_t c1,
                          const CUdeviceptr *shared_suh, int with_desc, exl3_dev_linear *L)
{
    int64_t k = k1 - k0, n = c1 - c0, ntiles = q->n / 16, tw = 16 * (int64_t)q->K;
    if (k0 % 128 || k1 % 128 || c0 % 128 || c1 % 128 || k <= 0 || n <= 0 || k1 > q->k || c1 > q->n)
        return dsk_err("the part [%lld, %lld) x [%lld, %lld) of a %lld x %lld linear is not in multiples of 128",
                       (long long)k0, (long long)k1, (long long)c0, (long long)c1, (long long)q->k, (long long)q->n);
    if (q->bias && k != q->k)
        return dsk_err("a linear with a bias split by its inputs (each rank would add it)");
    size_t tbytes = (size_t)((k / 16) * (n / 16) * tw) * 2;
    const uint16_t *src = q->trellis + (k0 / 16) * ntiles * tw;
    uint16_t *slice = NULL;
    if (!b->dry && (c0 != 0 || c1 != q->n)) {
        if (!(slice = dsk_malloc(tbytes)))
            return -1;
        for (int64_t kt = 0; kt < k / 16; kt++)
            memcpy(slice + kt * (n / 16) * tw, src + (kt * ntiles + c0 / 16) * tw, (size_t)((n / 16) * tw) * 2);
        src = slice;
    }
    CUdeviceptr tr = put(b, src, tbytes);
    free(slice);
    CUdeviceptr suh = shared_suh ? *shared_suh : put(b, q->suh + k0, (size_t)k * 2);
    CUdeviceptr svh = put(b, q->svh + c0, (size_t)n * 2), bias = 0;
    if (q->bias) {
        float *bf = b->dry ? NULL : dsk_malloc(sizeof(float) * (size_t)n);
        if (!b->dry && !bf)
            return -1;
        for (int64_t i = 0; bf && i < n; i++)
            bf[i] = q->bias_is_f32 ? ((const float *)q->bias)[c0 + i] : f16_to_f32(((const uint16_t *)q->bias)[c0 + i]);
        bias = put(b, bf, sizeof(float) * (size_t)n);
        free(bf);
    }
    CUdeviceptr desc = with_desc ? put(b, NULL, sizeof(exl3_desc)) : 0;
    if (b->dry)
        return 0;
    if (!tr || !suh || !svh || (q->bias && !bias) || (with_desc && !desc))
        return -1;
    return exl3_dev_linear_init(L, (int)k, (int)n, q->K, q->codebook, tr, suh, svh, bias, desc);
}

static int up_linear_cols(binder *b, const exl3_linear *q, int64_t c0, int64_t c1, const CUdeviceptr *shared_suh,
                          int with_desc, exl3_dev_linear *L)
{
    return up_linear_part(b, q, 0, q->k, c0, c1, shared_suh, with_desc, L);
}

/* This rank's part of a linear: input rows [k0, k1) and output columns [c0, c1); -1 takes all of them. */
static int up_linear_slice(binder *b, const char *name, int64_t k0, int64_t k1, int64_t c0, int64_t c1,
                           exl3_dev_linear *L)
{
    exl3_linear q;
    if (exl3_linear_get(b->st, name, &q))
        return -1;
    if (k1 < 0)
        k0 = 0, k1 = q.k;
    if (c1 < 0)
        c0 = 0, c1 = q.n;
    return up_linear_part(b, &q, k0, k1, c0, c1, NULL, 1, L) ? dsk_err_ctx("EXL3 linear %s", name) : 0;
}

static int up_linear_desc(binder *b, const char *name, int with_desc, exl3_dev_linear *L)
{
    exl3_linear q;
    if (exl3_linear_get(b->st, name, &q))
        return -1;
    return up_linear_cols(b, &q, 0, q.n, NULL, with_desc, L) ? dsk_err_ctx("EXL3 linear %s", name) : 0;
}

static int up_linear(binder *b, const char *name, exl3_dev_linear *L)
{
    return up_linear_desc(b, name, 1, L);
}

#define NAME(...) (snprintf(b->nm, sizeof b->nm, __VA_ARGS__), b->nm)
#define TRY(call)                                                                                                \
    do {                                                                                                         \
        if (call)                                                                                                \
            return -1;                                                                                           \
    } while (0)

/* Routed experts [e0, e0 + n) (or the shared one, n = 1): W1, W3, W2 and their table. */
static int up_experts(binder *b, const char *p, int e0, int n, int shared, exl3_moe_experts *E)
{
    exl3_dev_linear *l = b->dry ? NULL : dsk_calloc((size_t)n * 3, sizeof *l);
    exl3_dev_linear scratch;
    if (!b->dry && !l)
        return -1;
    int rc = 0;
    for (int e = 0; e < n && !rc; e++) {
        for (int j = 0; j < 3 && !rc; j++) {
            static const char *const part[3] = {"w1", "w3", "w2"};
            if (shared)
                NAME("%sffn.shared_experts.%s", p, part[j]);
            else
                NAME("%sffn.experts.%d.%s", p, e0 + e, part[j]);
            rc = up_linear_desc(b, b->nm, 0, l ? &l[j * n + e] : &scratch);
        }
    }
    CUdeviceptr table = put(b, NULL, (size_t)n * 3 * sizeof(exl3_desc));
    if (!rc && !b->dry)
        rc = table ? exl3_moe_experts_init(E, l, l + n, l + 2 * n, n, table) : -1;
    free(l);
    return rc ? dsk_err_ctx("%s experts of %s", shared ? "shared" : "routed", p) : 0;
}

static int bind_block(binder *b, int l, gpu_block *g)
{
    const model_config *c = &b->w->cfg;
    const layer_role *r = &c->roles[l];
    char p[32];
    snprintf(p, sizeof p, l < c->n_layers ? "layers.%d." : "mtp.%d.", l < c->n_layers ? l : l - c->n_layers);
    TRY(up_bf16(b, NAME("%sattn_norm.weight", p), &g->attn_norm));
    TRY(up_bf16(b, NAME("%sffn_norm.weight", p), &g->ffn_norm));
    TRY(up_bf16(b, NAME("%sattn.q_norm.weight", p), &g->q_norm));
    TRY(up_bf16(b, NAME("%sattn.kv_norm.weight", p), &g->kv_norm));
    const gpu_split *sp = &b->w->split;
    int hd = c->head_dim, ol = c->o_lora_rank;
    TRY(up_linear(b, NAME("%sattn.wq_a", p), &g->wq_a));
    /* this rank's heads: their columns of wq_b; the inputs of its groups' outputs: its rows of wo_b */
    TRY(up_linear_slice(b, NAME("%sattn.wq_b", p), -1, -1, (int64_t)sp->h0 * hd, (int64_t)sp->h1 * hd, &g->wq_b));
    TRY(up_linear(b, NAME("%sattn.wkv", p), &g->wkv));
    TRY(up_linear_slice(b, NAME("%sattn.wo_b", p), (int64_t)sp->g0 * ol, (int64_t)sp->g1 * ol, -1, -1, &g->wo_b));
    /* grouped wo_a: group gi is columns [gi·o_lora, (gi+1)·o_lora) of the one linear (docs/model.md); the
     * rank's groups [g0, g1) at wo_a[0..] */
    exl3_linear woa;
    TRY(exl3_linear_get(b->st, NAME("%sattn.wo_a", p), &woa));
    if (c->o_groups > EXL3_MAX_BLOCKS)
        return dsk_err("%sattn.wo_a: %d groups, the GPU engine takes at most %d", p, c->o_groups, EXL3_MAX_BLOCKS);
    CUdeviceptr suh = put(b, woa.suh, (size_t)woa.k * 2);
    /* the groups' descriptors one array: the block-diagonal launch takes them all (op_exl3_blockdiag) */
    CUdeviceptr descs = put(b, NULL, (size_t)(sp->g1 - sp->g0) * sizeof(exl3_desc));
    if (!b->dry && (!suh || !descs))
        return -1;
    for (int gi = sp->g0; gi < sp->g1; gi++) {
        exl3_dev_linear *L = &g->wo_a[gi - sp->g0];
        TRY(up_linear_cols(b, &woa, (int64_t)gi * ol, (int64_t)(gi + 1) * ol, &suh, 0, L));
        if (!b->dry)
            TRY(exl3_dev_linear_init(L, L->k, L->n, L->K, L->codebook, L->trellis, L->suh, L->svh, L->bias,
                                     descs + (CUdeviceptr)(gi - sp->g0) * sizeof(exl3_desc)));
    }
    TRY(up_raw_part(b, NAME("%sattn.attn_sink", p), ST_F32, (size_t)sp->h0 * 4, (size_t)(sp->h1 - sp->h0) * 4,
                    &g->attn_sink));
    static const char *const sub[2] = {"attn", "ffn"};
    for (int i = 0; i < 2; i++) {
        TRY(up_raw(b, NAME("%shc_%s_fn", p, sub[i]), ST_F32, &g->hc_fn[i]));
        TRY(up_raw(b, NAME("%shc_%s_base", p, sub[i]), ST_F32, &g->hc_base[i]));
        TRY(up_raw(b, NAME("%shc_%s_scale", p, sub[i]), ST_F32, &g->hc_scale[i]));
    }
    g->n_experts = l < c->n_layers ? c->n_routed_experts : c->dspark_n_routed_experts;
    g->n_active = l < c->n_layers ? c->n_activated_experts : c->dspark_n_activated_experts;
    TRY(up_bf16(b, NAME("%sffn.gate.weight", p), &g->gate));
    TRY(up_raw(b, NAME("%sffn.gate.bias", p), ST_F32, &g->gate_bias));
    if (l < c->n_layers && c->vision_n_layers > 0) /* the drafter's bias_vl is never used (vision.md §3.8) */
        TRY(up_raw(b, NAME("%sffn.gate.bias_vl", p), ST_F32, &g->gate_bias_vl));
    /* expert parallel: the rank's experts [e0, e0 + E/tp) (docs/ranks.md) */
    if (g->n_experts % sp->tp)
        return dsk_err("%d routed experts do not split over %d ranks", g->n_experts, sp->tp);
    g->e0 = g->n_experts / sp->tp * sp->rank;
    TRY(up_experts(b, p, 0, 1, 1, &g->shared));
    TRY(up_experts(b, p, g->e0, g->n_experts / sp->tp, 0, &g->experts));
    if (r->is_kv_source) {
        TRY(up_linear(b, NAME("%sattn.compressor.wkv", p), &g->c_wkv));
        if (r->ratio == 2)
            TRY(up_linear(b, NAME("%sattn.compressor.wgate", p), &g->c_wgate));
        TRY(up_linear(b, NAME("%sattn.indexer.wk", p), &g->ix_wk));
        TRY(up_bf16(b, NAME("%sattn.compressor.norm.weight", p), &g->c_norm));
        TRY(up_bf16(b, NAME("%sattn.indexer.k_norm.weight", p), &g->ix_k_norm));
    }
    if (r->is_index_source) {
        TRY(up_linear(b, NAME("%sattn.indexer.wq_b", p), &g->ix_wq_b));
        TRY(up_bf16(b, NAME("%sattn.indexer.weights_proj.weight", p), &g->ix_wproj));
    }
    if (r->engram >= 0) {
        TRY(up_linear(b, NAME("%sengram.wkv", p), &g->eg_wkv));
        const st_tensor *qw = tensor(b, NAME("%sengram.q_weight", p), ST_BF16, ST_F32);
        const st_tensor *kw = qw ? tensor(b, NAME("%sengram.k_weight", p), ST_BF16, ST_F32) : NULL;
        if (!kw)
            return -1;
        size_t n = (size_t)c->hc_mult * (size_t)c->dim;
        float *prod = b->dry ? NULL : dsk_malloc(sizeof(float) * n);
        if (!b->dry && !prod)
            return -1;
        /* REF uses only the fp32 product of the two bf16 weights (model.md §3.3 step 3, §4) */
        for (size_t i = 0; prod && i < n; i++) {
            float a, k;
            if (qw->dtype == ST_BF16)
                a = bf16_to_f32(((const uint16_t *)qw->data)[i]);
            else
                a = bf16_round(f32_at(qw, i));
            if (kw->dtype == ST_BF16)
                k = bf16_to_f32(((const uint16_t *)kw->data)[i]);
            else
                k = bf16_round(f32_at(kw, i));
            prod[i] = a * k;
        }
        g->eg_w = put(b, prod, sizeof(float) * n);
        free(prod);
        if (!b->dry && !g->eg_w)
            return -1;
        if (b->o->engram_on_device) {
            TRY(up_raw(b, NAME("%sengram.embed.weight", p), ST_F8_E4M3, &g->eg_values));
            TRY(up_raw(b, NAME("%sengram.embed.scale", p), ST_F8_E8M0, &g->eg_scales));
        }
        if (!b->dry) {
            const st_tensor *mt = tensor(b, NAME("%sengram.multipliers", p), ST_I64, ST_I64);
            if (!mt)
                return -1;
            if (mt->nbytes < sizeof(int64_t) * (size_t)c->engram_max_ngram_size)
                return dsk_err("tensor %s holds %zu bytes, %d multipliers (int64) expected", b->nm, mt->nbytes,
                               c->engram_max_ngram_size);
            /* the file's data need not be 8-byte aligned: copied out, not loaded in place */
            for (int k = 0; k < c->engram_max_ngram_size; k++) {
                int64_t v;
                memcpy(&v, (const char *)mt->data + sizeof v * (size_t)k, sizeof v);
                if (v <= 0 || !(v & 1))
                    return dsk_err("tensor %s: entry %d = %lld is not a positive odd number", b->nm, k, (long long)v);
                b->w->engram.mult[r->engram][k] = v;
            }
        }
    }
    return 0;
}

/* A bf16 tensor of `rows` x `cols` (checked), uploaded with its columns padded to `ld` (zeros), or with
 * interleave its first rows/2 and last rows/2 rows alternated (the SwiGLU weight of op_vision_mm). */
static int up_bf16_shaped(binder *b, const char *name, int64_t rows, int64_t cols, int64_t ld, int interleave,
                          CUdeviceptr *out)
{
    const st_tensor *t = tensor(b, name, ST_BF16, ST_BF16);
    if (!t)
        return -1;
    if (t->nbytes != (size_t)(rows * cols) * 2)
        return dsk_err("tensor %s holds %zu bytes, expected [%lld, %lld] bf16", name, t->nbytes, (long long)rows,
                       (long long)cols);
    size_t n = (size_t)(rows * ld);
    if (b->dry) {
        put(b, NULL, n * 2);
        return 0;
    }
    uint16_t *h = dsk_calloc(n, 2);
    if (!h)
        return -1;
    const uint16_t *src = t->data;
    for (int64_t r = 0; r < rows; r++) {
        int64_t from = interleave ? (r % 2 ? rows / 2 + r / 2 : r / 2) : r;
        memcpy(h + r * ld, src + from * cols, (size_t)cols * 2);
    }
    *out = put(b, h, n * 2);
    free(h);
    return *out ? 0 : dsk_err_ctx("tensor %s", name);
}

/* An fp32 tensor of n values that may be stored bf16 (the vision norms), widened exactly. */
static int up_f32_wide(binder *b, const char *name, int64_t n, CUdeviceptr *out)
{
    const st_tensor *t = tensor(b, name, ST_F32, ST_BF16);
    if (!t)
        return -1;
    if (t->nbytes != (size_t)n * st_dtype_size(t->dtype))
        return dsk_err("tensor %s holds %zu bytes, expected %lld values", name, t->nbytes, (long long)n);
    if (b->dry) {
        put(b, NULL, (size_t)n * 4);
        return 0;
    }
    float *h = dsk_malloc((size_t)n * 4);
    if (!h)
        return -1;
    for (int64_t i = 0; i < n; i++)
        h[i] = t->dtype == ST_F32 ? f32_at(t, (size_t)i) : bf16_to_f32(((const uint16_t *)t->data)[i]);
    *out = put(b, h, (size_t)n * 4);
    free(h);
    return *out ? 0 : dsk_err_ctx("tensor %s", name);
}

static int bind_vision(binder *b)
{
    const model_config *c = &b->w->cfg;
    gpu_vision_weights *v = &b->w->vision;
    int D = c->vision_dim, I = c->vision_inter_dim, p = c->vision_patch_size, K = 3 * p * p, r = c->vision_downsample_ratio;
    v->K0 = (K + 31) / 32 * 32;
    TRY(up_bf16_shaped(b, "vision.patch_embed.proj.weight", D, K, v->K0, 0, &v->patch_w));
    TRY(up_bf16_shaped(b, "vision.patch_embed.proj.bias", 1, D, D, 0, &v->patch_b));
    for (int l = 0; l < c->vision_n_layers; l++) {
        gpu_vision_block *k = &v->blocks[l];
        TRY(up_f32_wide(b, NAME("vision.blocks.%d.norm1.weight", l), D, &k->norm1));
        TRY(up_f32_wide(b, NAME("vision.blocks.%d.norm2.weight", l), D, &k->norm2));
        TRY(up_bf16_shaped(b, NAME("vision.blocks.%d.attn.wqkv.weight", l), 3 * D, D, D, 0, &k->wqkv));
        TRY(up_bf16_shaped(b, NAME("vision.blocks.%d.attn.wqkv.bias", l), 1, 3 * D, 3 * D, 0, &k->bqkv));
        TRY(up_bf16_shaped(b, NAME("vision.blocks.%d.attn.wo.weight", l), D, D, D, 0, &k->wo));
        TRY(up_bf16_shaped(b, NAME("vision.blocks.%d.attn.wo.bias", l), 1, D, D, 0, &k->bo));
        TRY(up_bf16_shaped(b, NAME("vision.blocks.%d.mlp.w1.weight", l), 2 * I, D, D, 1, &k->w1));
        TRY(up_bf16_shaped(b, NAME("vision.blocks.%d.mlp.w2.weight", l), D, I, I, 0, &k->w2));
    }
    TRY(up_f32_wide(b, "vision.norm.weight", D, &v->norm));
    TRY(up_bf16_shaped(b, "aligner.w1.weight", c->dim, (int64_t)r * r * D, (int64_t)r * r * D, 0, &v->al_w1));
    TRY(up_bf16_shaped(b, "aligner.w1.bias", 1, c->dim, c->dim, 0, &v->al_b1));
    TRY(up_bf16_shaped(b, "aligner.w2.weight", c->dim, c->dim, c->dim, 0, &v->al_w2));
    TRY(up_bf16_shaped(b, "aligner.w2.bias", 1, c->dim, c->dim, 0, &v->al_b2));
    /* the three delimiters side by side: rows L, L + 1, L + 2 of the span's gather source (gpu_vision.c) */
    const char *const dn[3] = {"image_start", "image_end", "image_newline"};
    uint16_t *h = b->dry ? NULL : dsk_malloc(sizeof(uint16_t) * 3 * (size_t)c->dim);
    if (!b->dry && !h)
        return -1;
    for (int i = 0; i < 3; i++) {
        const st_tensor *t = tensor(b, dn[i], ST_BF16, ST_BF16);
        if (!t || t->nbytes != (size_t)c->dim * 2) {
            free(h);
            return t ? dsk_err("tensor %s holds %zu bytes, expected [%d] bf16", dn[i], t->nbytes, c->dim) : -1;
        }
        if (h)
            memcpy(h + (size_t)i * c->dim, t->data, (size_t)c->dim * 2);
    }
    v->delims = put(b, h, sizeof(uint16_t) * 3 * (size_t)c->dim);
    free(h);
    return b->dry || v->delims ? 0 : -1;
}

static int bind_all(binder *b)
{
    gpu_weights *w = b->w;
    const model_config *c = &w->cfg;
    TRY(up_bf16(b, "embed.weight", &w->embed));
    TRY(up_linear_slice(b, "head", -1, -1, w->split.v0, w->split.v1, &w->head)); /* the rank's vocabulary rows */
    TRY(up_bf16(b, "norm.weight", &w->norm));
    for (int l = 0; l < c->n_all_layers; l++)
        if (bind_block(b, l, &w->blocks[l]))
            return dsk_err_ctx("%s %d", l < c->n_layers ? "layer" : "DSpark stage",
                               l < c->n_layers ? l : l - c->n_layers);
    if (c->n_mtp_layers > 0) {
        int last = c->n_mtp_layers - 1;
        TRY(up_linear(b, "mtp.0.main_proj", &w->main_proj));
        TRY(up_bf16(b, "mtp.0.main_norm.weight", &w->main_norm));
        TRY(up_bf16(b, NAME("mtp.%d.norm.weight", last), &w->mtp_norm));
        TRY(up_bf16(b, NAME("mtp.%d.markov_head.embed.weight", last), &w->markov_embed));
        TRY(up_bf16(b, NAME("mtp.%d.markov_head.head.weight", last), &w->markov_head));
        TRY(up_bf16(b, NAME("mtp.%d.confidence_head.proj.weight", last), &w->confidence));
    }
    if (c->vision_n_layers > 0 && bind_vision(b))
        return dsk_err_ctx("the vision tower");
    return 0;
}

int gpu_split_init(const model_config *c, int tp, int rank, gpu_split *s)
{
    tp = tp > 0 ? tp : 1;
    if (rank < 0 || rank >= tp)
        return dsk_err("rank %d of %d", rank, tp);
    if (c->n_heads % tp || c->o_groups % tp)
        return dsk_err("%d heads in %d groups do not split over %d ranks", c->n_heads, c->o_groups, tp);
    if (c->vocab_size % (128 * tp))
        return dsk_err("the head's %d vocabulary rows do not split over %d ranks in multiples of 128", c->vocab_size, tp);
    if ((c->o_groups / tp) * c->o_lora_rank % 128 || (c->n_heads / tp) * c->head_dim % 128)
        return dsk_err("a rank's part of wq_b or wo_b is not a multiple of 128 wide");
    *s = (gpu_split){tp, rank, c->n_heads / tp * rank, c->n_heads / tp * (rank + 1), c->o_groups / tp * rank,
                     c->o_groups / tp * (rank + 1), c->vocab_size / tp * rank, c->vocab_size / tp * (rank + 1)};
    return 0;
}

int gpu_weights_bytes(const model_config *cfg, const st_set *ckpt, const gpu_weights_opts *o, size_t *bytes)
{
    gpu_weights w;
    memset(&w, 0, sizeof w);
    w.cfg = *cfg;
    if (gpu_split_init(cfg, o->tp, o->rank, &w.split))
        return -1;
    w.blocks = dsk_calloc((size_t)cfg->n_all_layers, sizeof *w.blocks);
    w.vision.blocks = cfg->vision_n_layers > 0 ? dsk_calloc((size_t)cfg->vision_n_layers, sizeof *w.vision.blocks) : NULL;
    if (!w.blocks || (cfg->vision_n_layers > 0 && !w.vision.blocks)) {
        free(w.blocks);
        free(w.vision.blocks);
        return -1;
    }
    binder b = {.w = &w, .st = ckpt, .o = o, .dry = 1};
    int rc = bind_all(&b);
    free(w.blocks);
    free(w.vision.blocks);
    *bytes = b.bytes;
    return rc;
}

int gpu_weights_load(const model_config *cfg, const st_set *ckpt, const gpu_weights_opts *o, gpu_weights *w)
{
    memset(w, 0, sizeof *w);
    w->cfg = *cfg;
    if (gpu_split_init(cfg, o->tp, o->rank, &w->split))
        return -1;
    size_t need;
    if (gpu_weights_bytes(cfg, ckpt, o, &need))
        return -1;
    size_t free_b = 0, total_b = 0;
    CU_TRY(cu.cuMemGetInfo(&free_b, &total_b));
    if (need > free_b)
        return dsk_err("not enough GPU memory for the weights: they need %.2f GiB, %.2f GiB of %.2f GiB are free",
                       need / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0);
    w->blocks = dsk_calloc((size_t)cfg->n_all_layers, sizeof *w->blocks);
    w->vision.blocks = cfg->vision_n_layers > 0 ? dsk_calloc((size_t)cfg->vision_n_layers, sizeof *w->vision.blocks) : NULL;
    if (!w->blocks || (cfg->vision_n_layers > 0 && !w->vision.blocks)) {
        gpu_weights_free(w);
        return -1;
    }
    if (cu.cuMemAlloc(&w->arena, need ? need : 16) != CUDA_SUCCESS) {
        w->arena = 0;
        gpu_weights_free(w);
        return dsk_err("allocating %.2f GiB of GPU memory for the weights failed", need / 1073741824.0);
    }
    w->arena_bytes = need;
    if (cfg->n_engram_layers > 0) {
        const st_tensor *tm = st_get(ckpt, "engram.token_map");
        if (!tm || tm->dtype != ST_I32 || tm->nbytes != sizeof(int32_t) * (size_t)cfg->vocab_size) {
            gpu_weights_free(w);
            return dsk_err("tensor engram.token_map is missing or not I32 [%d]", cfg->vocab_size);
        }
        if (!(w->token_map = dsk_malloc(tm->nbytes))) {
            gpu_weights_free(w);
            return -1;
        }
        memcpy(w->token_map, tm->data, tm->nbytes);
        if (engram_layout_init(&w->engram, cfg->engram_layer_ids, cfg->n_engram_layers, cfg->engram_max_ngram_size,
                               cfg->engram_n_heads, cfg->engram_vocab_size)) {
            gpu_weights_free(w);
            return -1;
        }
        w->engram.pad = w->token_map[cfg->engram_pad_id];
    }
    binder b = {.w = w, .st = ckpt, .o = o, .t0 = dsk_now()};
    b.last = b.t0;
    if (bind_all(&b)) {
        gpu_weights_free(w);
        return -1;
    }
    if (o->progress && isatty(2))
        fprintf(stderr, "\r");
    if (o->progress)
        fprintf(stderr, "weights: %.2f GiB uploaded in %.1f s (%.1f GiB/s)\n", b.copied / 1073741824.0,
                dsk_now() - b.t0, b.copied / 1073741824.0 / (dsk_now() - b.t0 + 1e-9));
    return 0;
}

void gpu_weights_free(gpu_weights *w)
{
    if (w->arena)
        cu.cuMemFree(w->arena);
    free(w->blocks);
    free(w->vision.blocks);
    free(w->token_map);
    memset(w, 0, sizeof *w);
}
