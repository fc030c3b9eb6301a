/* Binding a checkpoint to the model's weights: every tensor of the schema is checked (dtype, shape),
 * then pointed into the mapping. Copies are made only where the stored form is not what the CPU
 * computes with: f32 norm weights (rounded to bf16 as REF holds them), misaligned tensors, and the
 * Engram q ⊙ k product. */
#include "runtime/common/error.h"
#include "runtime/common/numerics.h"
#include "runtime/cpu/cpu_model.h"
#include "runtime/model/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int own(cpu_model *m, void *p)
{
    void **o = dsk_realloc(m->owned, sizeof *o * (size_t)(m->n_owned + 1));
    if (!o) {
        free(p);
        return -1;
    }
    m->owned = o;
    m->owned[m->n_owned++] = p;
    return 0;
}

/* The tensor's data, copied into an owned buffer when it is not aligned for its element type. */
static const void *aligned_data(cpu_model *m, const st_tensor *t)
{
    size_t a = st_dtype_size(t->dtype);
    if (((uintptr_t)t->data & (a - 1)) == 0)
        return t->data;
    void *p = dsk_malloc(t->nbytes ? t->nbytes : 1);
    if (!p || own(m, p))
        return NULL;
    memcpy(p, t->data, t->nbytes);
    return p;
}

static int check_entry(const cpu_model *m, const schema_tensor *e)
{
    const st_set *st = m->st;
    const st_tensor *t;
    char name[160];
    switch (e->kind) {
    case TENSOR_EXL3: {
        exl3_linear q;
        if (exl3_linear_get(st, e->name, &q))
            return -1;
        if (q.k != e->shape[0] || q.n != e->shape[1])
            return dsk_err("tensor %s: EXL3 linear is %lld x %lld (in x out), the config needs %lld x %lld", e->name,
                           (long long)q.k, (long long)q.n, (long long)e->shape[0], (long long)e->shape[1]);
        return 0;
    }
    case TENSOR_BF16: {
        const st_tensor *g = st_get(st, e->name);
        st_dtype dt = g && g->dtype == ST_F32 && e->allow_f32 ? ST_F32 : ST_BF16;
        return st_require(st, e->name, dt, e->ndim, e->shape, &t);
    }
    case TENSOR_F32:
        return st_require(st, e->name, ST_F32, e->ndim, e->shape, &t);
    case TENSOR_I32:
        return st_require(st, e->name, ST_I32, e->ndim, e->shape, &t);
    case TENSOR_I64:
        return st_require(st, e->name, ST_I64, e->ndim, e->shape, &t);
    case TENSOR_F8_ROWS: {
        int64_t sc[2] = {e->shape[0], e->shape[1] / 32};
        snprintf(name, sizeof name, "%s.weight", e->name);
        if (st_require(st, name, ST_F8_E4M3, 2, e->shape, &t))
            return -1;
        snprintf(name, sizeof name, "%s.scale", e->name);
        return st_require(st, name, ST_F8_E8M0, 2, sc, &t);
    }
    }
    return dsk_err("schema: unknown tensor kind for %s", e->name);
}

/* A bf16 tensor already checked; f32 storage is rounded to bf16 into an owned copy. */
static const uint16_t *get_bf16(cpu_model *m, const char *name)
{
    const st_tensor *t = st_get(m->st, name);
    if (!t) {
        dsk_err("tensor %s is missing", name);
        return NULL;
    }
    if (t->dtype == ST_BF16)
        return aligned_data(m, t);
    size_t n = t->nbytes / 4;
    uint16_t *p = dsk_malloc(sizeof *p * (n ? n : 1));
    if (!p || own(m, p))
        return NULL;
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, (const char *)t->data + 4 * i, 4);
        p[i] = f32_to_bf16(f);
    }
    return p;
}

static const void *get_raw(cpu_model *m, const char *name)
{
    const st_tensor *t = st_get(m->st, name);
    if (!t) {
        dsk_err("tensor %s is missing", name);
        return NULL;
    }
    return aligned_data(m, t);
}

#define NAME(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)
#define NEED(ptr)                                                                                                \
    do {                                                                                                         \
        if (!(ptr))                                                                                              \
            return -1;                                                                                           \
    } while (0)

static int get_linear(cpu_model *m, const char *name, cpu_linear *l)
{
    memset(l, 0, sizeof *l);
    return exl3_linear_get(m->st, name, &l->q);
}

static int bind_block(cpu_model *m, int l, block_weights *b)
{
    const model_config *c = &m->cfg;
    const layer_role *r = &c->roles[l];
    char p[32], nm[160];
    if (l < c->n_layers)
        snprintf(p, sizeof p, "layers.%d.", l);
    else
        snprintf(p, sizeof p, "mtp.%d.", l - c->n_layers);
    NEED(b->attn_norm = get_bf16(m, NAME("%sattn_norm.weight", p)));
    NEED(b->ffn_norm = get_bf16(m, NAME("%sffn_norm.weight", p)));
    NEED(b->q_norm = get_bf16(m, NAME("%sattn.q_norm.weight", p)));
    NEED(b->kv_norm = get_bf16(m, NAME("%sattn.kv_norm.weight", p)));
    if (get_linear(m, NAME("%sattn.wq_a", p), &b->wq_a) || get_linear(m, NAME("%sattn.wq_b", p), &b->wq_b) ||
        get_linear(m, NAME("%sattn.wkv", p), &b->wkv) || get_linear(m, NAME("%sattn.wo_a", p), &b->wo_a) ||
        get_linear(m, NAME("%sattn.wo_b", p), &b->wo_b))
        return -1;
    NEED(b->attn_sink = get_raw(m, NAME("%sattn.attn_sink", p)));
    static const char *const sub[2] = {"attn", "ffn"};
    for (int i = 0; i < 2; i++) {
        NEED(b->hc_fn[i] = get_raw(m, NAME("%shc_%s_fn", p, sub[i])));
        NEED(b->hc_base[i] = get_raw(m, NAME("%shc_%s_base", p, sub[i])));
        NEED(b->hc_scale[i] = get_raw(m, NAME("%shc_%s_scale", p, sub[i])));
    }
    b->n_experts = l < c->n_layers ? c->n_routed_experts : c->dspark_n_routed_experts;
    b->n_active = l < c->n_layers ? c->n_activated_experts : c->dspark_n_activated_experts;
    NEED(b->gate = get_bf16(m, NAME("%sffn.gate.weight", p)));
    NEED(b->gate_bias = get_raw(m, NAME("%sffn.gate.bias", p)));
    if (get_linear(m, NAME("%sffn.shared_experts.w1", p), &b->sh_w1) ||
        get_linear(m, NAME("%sffn.shared_experts.w3", p), &b->sh_w3) ||
        get_linear(m, NAME("%sffn.shared_experts.w2", p), &b->sh_w2))
        return -1;
    b->w1 = dsk_calloc((size_t)b->n_experts * 3, sizeof(cpu_linear));
    if (!b->w1)
        return -1;
    b->w3 = b->w1 + b->n_experts;
    b->w2 = b->w3 + b->n_experts;
    for (int e = 0; e < b->n_experts; e++)
        if (get_linear(m, NAME("%sffn.experts.%d.w1", p, e), &b->w1[e]) ||
            get_linear(m, NAME("%sffn.experts.%d.w3", p, e), &b->w3[e]) ||
            get_linear(m, NAME("%sffn.experts.%d.w2", p, e), &b->w2[e]))
            return -1;
    if (r->is_kv_source) {
        if (get_linear(m, NAME("%sattn.compressor.wkv", p), &b->c_wkv) ||
            (r->ratio == 2 && get_linear(m, NAME("%sattn.compressor.wgate", p), &b->c_wgate)) ||
            get_linear(m, NAME("%sattn.indexer.wk", p), &b->ix_wk))
            return -1;
        NEED(b->c_norm = get_bf16(m, NAME("%sattn.compressor.norm.weight", p)));
        NEED(b->ix_k_norm = get_bf16(m, NAME("%sattn.indexer.k_norm.weight", p)));
    }
    if (r->is_index_source) {
        if (get_linear(m, NAME("%sattn.indexer.wq_b", p), &b->ix_wq_b))
            return -1;
        NEED(b->ix_wproj = get_bf16(m, NAME("%sattn.indexer.weights_proj.weight", p)));
    }
    if (r->engram >= 0) {
        if (get_linear(m, NAME("%sengram.wkv", p), &b->eg_wkv))
            return -1;
        const uint16_t *qw, *kw;
        NEED(qw = get_bf16(m, NAME("%sengram.q_weight", p)));
        NEED(kw = get_bf16(m, NAME("%sengram.k_weight", p)));
        size_t n = (size_t)c->hc_mult * (size_t)c->dim;
        b->eg_w = dsk_malloc(sizeof(float) * n);
        if (!b->eg_w || own(m, b->eg_w))
            return -1;
        /* REF uses only the fp32 product of the two bf16 weights (model.md §3.3 step 3, §4) */
        for (size_t i = 0; i < n; i++)
            b->eg_w[i] = bf16_to_f32(qw[i]) * bf16_to_f32(kw[i]);
        const int64_t *mult;
        NEED(mult = get_raw(m, NAME("%sengram.multipliers", p)));
        for (int k = 0; k < c->engram_max_ngram_size; k++) {
            if (mult[k] <= 0 || !(mult[k] & 1))
                return dsk_err("tensor %sengram.multipliers: entry %d = %lld is not a positive odd number", p, k,
                               (long long)mult[k]);
            m->engram.mult[r->engram][k] = mult[k];
        }
    }
    return 0;
}

static int bind_engram(cpu_model *m)
{
    const model_config *c = &m->cfg;
    if (engram_layout_init(&m->engram, c->engram_layer_ids, c->n_engram_layers, c->engram_max_ngram_size,
                           c->engram_n_heads, c->engram_vocab_size) ||
        engram_layout_check_rows(&m->engram, c->engram_num_embeddings))
        return dsk_err_ctx("config engram fields");
    NEED(m->token_map = get_raw(m, "engram.token_map"));
    for (int v = 0; v < c->vocab_size; v++)
        if (m->token_map[v] < 0 || m->token_map[v] >= c->engram_compressed_vocab_size)
            return dsk_err("tensor engram.token_map: entry %d = %d is outside [0, engram_compressed_vocab_size %d)",
                           v, m->token_map[v], c->engram_compressed_vocab_size);
    m->engram.pad = m->token_map[c->engram_pad_id];
    return 0;
}

static int cmp_size(const void *a, const void *b)
{
    const cpu_linear *x = *(cpu_linear *const *)a, *y = *(cpu_linear *const *)b;
    int64_t sx = x->q.k * x->q.n, sy = y->q.k * y->q.n;
    return (sx > sy) - (sx < sy);
}

/* Decode EXL3 weights once while the budget lasts: the head first (every token uses it), then the rest
 * smallest first. */
static int cache_linears(cpu_model *m, size_t budget)
{
    const model_config *c = &m->cfg;
    int cap = 8, n = 0;
    for (int l = 0; l < c->n_all_layers; l++)
        cap += 16 + 3 * m->blocks[l].n_experts;
    cpu_linear **all = dsk_malloc(sizeof *all * (size_t)cap);
    if (!all)
        return -1;
#define ADD(lin)                                                                                                 \
    do {                                                                                                         \
        if ((lin).q.trellis)                                                                                     \
            all[n++] = &(lin);                                                                                   \
    } while (0)
    ADD(m->main_proj);
    for (int l = 0; l < c->n_all_layers; l++) {
        block_weights *b = &m->blocks[l];
        cpu_linear *ls[] = {&b->wq_a,  &b->wq_b,    &b->wkv,   &b->wo_a,    &b->wo_b,  &b->sh_w1, &b->sh_w3,
                              &b->sh_w2, &b->c_wkv, &b->c_wgate, &b->ix_wk, &b->ix_wq_b, &b->eg_wkv};
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++)
            ADD(*ls[i]);
        for (int e = 0; e < 3 * b->n_experts; e++)
            ADD(b->w1[e]);
    }
#undef ADD
    qsort(all, (size_t)n, sizeof *all, cmp_size);
    size_t left = budget;
    int rc = linear_cache(&m->head, &left);
    for (int i = 0; i < n && rc == 0; i++)
        rc = linear_cache(all[i], &left);
    m->cache_bytes = budget - left;
    free(all);
    return rc;
}

int cpu_model_load(const char *dir, size_t cache_budget, cpu_model **out)
{
    cpu_model *m = dsk_calloc(1, sizeof *m);
    if (!m)
        return -1;
    schema_tensor *sch = NULL;
    int n_sch = 0;
    char nm[160];
    if (model_config_load(dir, &m->cfg))
        goto fail;
    if (m->cfg.quant_method[0] && strcmp(m->cfg.quant_method, "exl3")) {
        dsk_err("%s: quantization_config.quant_method is \"%s\"; the CPU model reads EXL3 checkpoints", dir,
                m->cfg.quant_method);
        goto fail;
    }
    m->xchg = rank_xchg_single();
    if (st_open(dir, &m->st) || model_schema(&m->cfg, &sch, &n_sch))
        goto fail;
    for (int i = 0; i < n_sch; i++)
        if (check_entry(m, &sch[i]))
            goto fail;
    const model_config *c = &m->cfg;
    if (!(m->embed = get_bf16(m, "embed.weight")) || !(m->norm = get_bf16(m, "norm.weight")) ||
        get_linear(m, "head", &m->head))
        goto fail;
    m->blocks = dsk_calloc((size_t)c->n_all_layers, sizeof *m->blocks);
    if (!m->blocks)
        goto fail;
    if (c->n_engram_layers > 0 && bind_engram(m))
        goto fail;
    for (int l = 0; l < c->n_all_layers; l++)
        if (bind_block(m, l, &m->blocks[l]))
            goto fail;
    if (c->n_mtp_layers > 0) {
        int last = c->n_mtp_layers - 1;
        if (get_linear(m, "mtp.0.main_proj", &m->main_proj) ||
            !(m->main_norm = get_bf16(m, "mtp.0.main_norm.weight")) ||
            !(m->mtp_norm = get_bf16(m, NAME("mtp.%d.norm.weight", last))) ||
            !(m->markov_embed = get_bf16(m, NAME("mtp.%d.markov_head.embed.weight", last))) ||
            !(m->markov_head = get_bf16(m, NAME("mtp.%d.markov_head.head.weight", last))) ||
            !(m->confidence = get_bf16(m, NAME("mtp.%d.confidence_head.proj.weight", last))))
            goto fail;
        /* transposed so the Markov bias vectorises across the vocabulary (each sum keeps its order) */
        size_t V = (size_t)c->vocab_size, R = (size_t)c->dspark_markov_rank;
        if (!(m->markov_head_t = dsk_malloc(sizeof(uint16_t) * V * R)) || own(m, m->markov_head_t))
            goto fail;
        for (size_t v = 0; v < V; v++)
            for (size_t r = 0; r < R; r++)
                m->markov_head_t[r * V + v] = m->markov_head[v * R + r];
    }
    if (cache_linears(m, cache_budget) || (c->n_engram_layers > 0 && cpu_model_engram(m, dir, "host", 0, 10000)))
        goto fail;
    free(sch);
    *out = m;
    return 0;
fail:
    dsk_err_ctx("loading the model from %s", dir);
    free(sch);
    cpu_model_free(m);
    return -1;
}

void cpu_model_free(cpu_model *m)
{
    if (!m)
        return;
    if (m->blocks) {
        for (int l = 0; l < m->cfg.n_all_layers; l++) {
            block_weights *b = &m->blocks[l];
            cpu_linear *ls[] = {&b->wq_a, &b->wq_b, &b->wkv, &b->wo_a, &b->wo_b, &b->sh_w1, &b->sh_w3,
                                  &b->sh_w2, &b->c_wkv, &b->c_wgate, &b->ix_wk, &b->ix_wq_b, &b->eg_wkv};
            for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++)
                linear_free(ls[i]);
            for (int e = 0; b->w1 && e < 3 * b->n_experts; e++)
                linear_free(&b->w1[e]);
            free(b->w1);
        }
        free(m->blocks);
    }
    linear_free(&m->head);
    linear_free(&m->main_proj);
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    engram_store_close(m->eg);
    st_close(m->st);
    free(m);
}

int cpu_model_engram(cpu_model *m, const char *dir, const char *placement, size_t cache_bytes, int timeout_ms)
{
    engram_store *s;
    engram_store_opts o = {.cache_bytes = cache_bytes};
    if ((!m->eg && engram_source_from_model(m->st, dir, &m->eg_src)) ||
        engram_store_open(placement, &m->eg_src, &o, &s))
        return dsk_err_ctx("Engram rows from '%s'", placement);
    engram_store_close(m->eg);
    m->eg = s;
    m->eg_timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
    return 0;
}
