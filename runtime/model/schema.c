#include "runtime/model/schema.h"
#include "runtime/common/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* EXL3 bit widths of the seeded quant (model.md §4.1), decided by the lead; all in one place. */
enum {
    BITS_ATTN = 4,          /* wq_a, wq_b, wkv, wo_a, wo_b */
    BITS_SHARED = 4,        /* shared expert */
    BITS_COMPRESSOR = 4,    /* compressor wkv, wgate */
    BITS_INDEX_Q = 4,       /* indexer wq_b */
    BITS_INDEX_K = 8,       /* indexer wk */
    BITS_ENGRAM = 4,        /* engram wkv */
    BITS_HEAD = 6,          /* head */
    BITS_DRAFTER = 4,       /* every mtp.* linear but main_proj */
    BITS_MAIN_PROJ = 6,     /* mtp.0.main_proj */
};

int schema_expert_bits(int layer)
{
    return layer % 2 ? 3 : 2;
}

typedef struct {
    schema_tensor *t;
    int n, cap;
    int failed;
} schema_list;

static schema_tensor *add(schema_list *s, tensor_kind kind, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

static schema_tensor *add(schema_list *s, tensor_kind kind, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
{
    if (s->failed)
        return NULL;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 1024;
        schema_tensor *t = dsk_realloc(s->t, sizeof *t * (size_t)cap);
        if (!t) {
            s->failed = 1;
            return NULL;
        }
        s->t = t;
        s->cap = cap;
    }
    schema_tensor *e = &s->t[s->n++];
    memset(e, 0, sizeof *e);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->kind = kind;
    e->ndim = ndim;
    e->shape[0] = d0;
    e->shape[1] = d1;
    return e;
}

static void exl3(schema_list *s, int64_t in, int64_t out, int bits, const char *prefix, const char *name)
{
    schema_tensor *e = add(s, TENSOR_EXL3, 2, in, out, "%s%s", prefix, name);
    if (!e)
        return;
    e->bits = bits;
    if (in % 128 || out % 128) {
        dsk_err("schema: EXL3 linear %s has in = %lld, out = %lld; both must be multiples of 128 (the "
                "Hadamard block); change the config",
                e->name, (long long)in, (long long)out);
        s->failed = 1;
    }
}

static void vec(schema_list *s, tensor_kind kind, int64_t n, const char *prefix, const char *name)
{
    add(s, kind, 1, n, 0, "%s%s", prefix, name);
}

static void norm(schema_list *s, int64_t n, const char *prefix, const char *name)
{
    schema_tensor *e = add(s, TENSOR_BF16, 1, n, 0, "%s%s", prefix, name);
    if (e)
        e->allow_f32 = 1;
}

static void mat(schema_list *s, tensor_kind kind, int64_t rows, int64_t cols, const char *prefix, const char *name)
{
    add(s, kind, 2, rows, cols, "%s%s", prefix, name);
}

/* Attention, mHC, norms, gate, shared and routed experts: what every layer and DSpark stage has. */
static void block(schema_list *s, const model_config *c, const char *p, int n_experts, int expert_bits,
                  int attn_bits, int shared_bits)
{
    int64_t d = c->dim, hd = c->head_dim, nh = c->n_heads;
    int64_t mix = model_hc_mix_dim(c), hcd = (int64_t)c->hc_mult * d;
    norm(s, d, p, "attn_norm.weight");
    norm(s, d, p, "ffn_norm.weight");
    exl3(s, d, c->q_lora_rank, attn_bits, p, "attn.wq_a");
    norm(s, c->q_lora_rank, p, "attn.q_norm.weight");
    exl3(s, c->q_lora_rank, nh * hd, attn_bits, p, "attn.wq_b");
    exl3(s, d, hd, attn_bits, p, "attn.wkv");
    norm(s, hd, p, "attn.kv_norm.weight");
    /* grouped: k = one group's input (its heads), n = the groups' outputs concatenated (docs/model.md) */
    exl3(s, nh * hd / c->o_groups, (int64_t)c->o_groups * c->o_lora_rank, attn_bits, p, "attn.wo_a");
    exl3(s, (int64_t)c->o_groups * c->o_lora_rank, d, attn_bits, p, "attn.wo_b");
    vec(s, TENSOR_F32, nh, p, "attn.attn_sink");
    mat(s, TENSOR_F32, mix, hcd, p, "hc_attn_fn");
    vec(s, TENSOR_F32, mix, p, "hc_attn_base");
    vec(s, TENSOR_F32, 3, p, "hc_attn_scale");
    mat(s, TENSOR_F32, mix, hcd, p, "hc_ffn_fn");
    vec(s, TENSOR_F32, mix, p, "hc_ffn_base");
    vec(s, TENSOR_F32, 3, p, "hc_ffn_scale");
    mat(s, TENSOR_BF16, n_experts, d, p, "ffn.gate.weight");
    vec(s, TENSOR_F32, n_experts, p, "ffn.gate.bias");
    vec(s, TENSOR_F32, n_experts, p, "ffn.gate.bias_vl");
    exl3(s, d, c->moe_inter_dim, shared_bits, p, "ffn.shared_experts.w1");
    exl3(s, d, c->moe_inter_dim, shared_bits, p, "ffn.shared_experts.w3");
    exl3(s, c->moe_inter_dim, d, shared_bits, p, "ffn.shared_experts.w2");
    for (int e = 0; e < n_experts; e++) {
        char name[64];
        snprintf(name, sizeof name, "ffn.experts.%d.w1", e);
        exl3(s, d, c->moe_inter_dim, expert_bits, p, name);
        snprintf(name, sizeof name, "ffn.experts.%d.w3", e);
        exl3(s, d, c->moe_inter_dim, expert_bits, p, name);
        snprintf(name, sizeof name, "ffn.experts.%d.w2", e);
        exl3(s, c->moe_inter_dim, d, expert_bits, p, name);
    }
}

static void backbone_layer(schema_list *s, const model_config *c, int l)
{
    char p[32];
    snprintf(p, sizeof p, "layers.%d.", l);
    const layer_role *r = &c->roles[l];
    int64_t d = c->dim, hd = c->head_dim;
    block(s, c, p, c->n_routed_experts, schema_expert_bits(l), BITS_ATTN, BITS_SHARED);
    if (r->is_kv_source) {
        exl3(s, d, hd, BITS_COMPRESSOR, p, "attn.compressor.wkv");
        if (r->ratio == 2)
            exl3(s, d, hd, BITS_COMPRESSOR, p, "attn.compressor.wgate");
        norm(s, hd, p, "attn.compressor.norm.weight");
        exl3(s, hd, c->index_head_dim, BITS_INDEX_K, p, "attn.indexer.wk");
        norm(s, c->index_head_dim, p, "attn.indexer.k_norm.weight");
    }
    if (r->is_index_source) {
        exl3(s, c->q_lora_rank, (int64_t)c->index_n_heads * c->index_head_dim, BITS_INDEX_Q, p,
             "attn.indexer.wq_b");
        mat(s, TENSOR_BF16, c->index_n_heads, d, p, "attn.indexer.weights_proj.weight");
    }
    if (r->engram >= 0) {
        int64_t cols = model_engram_cols(c);
        mat(s, TENSOR_F8_ROWS, c->engram_num_embeddings[r->engram], c->engram_head_dim, p, "engram.embed");
        exl3(s, cols * c->engram_head_dim, (int64_t)(c->hc_mult + 1) * d, BITS_ENGRAM, p, "engram.wkv");
        schema_tensor *q = add(s, TENSOR_BF16, 2, c->hc_mult, d, "%sengram.q_weight", p);
        schema_tensor *k = add(s, TENSOR_BF16, 2, c->hc_mult, d, "%sengram.k_weight", p);
        if (q && k)
            q->allow_f32 = k->allow_f32 = 1;
        vec(s, TENSOR_I64, c->engram_max_ngram_size, p, "engram.multipliers");
    }
}

static void dspark_stage(schema_list *s, const model_config *c, int k)
{
    char p[32];
    snprintf(p, sizeof p, "mtp.%d.", k);
    block(s, c, p, c->dspark_n_routed_experts, BITS_DRAFTER, BITS_DRAFTER, BITS_DRAFTER);
    if (k == 0) {
        exl3(s, (int64_t)c->n_dspark_targets * c->dim, c->dim, BITS_MAIN_PROJ, p, "main_proj");
        norm(s, c->dim, p, "main_norm.weight");
    }
    if (k == c->n_mtp_layers - 1) {
        norm(s, c->dim, p, "norm.weight");
        mat(s, TENSOR_BF16, c->vocab_size, c->dspark_markov_rank, p, "markov_head.embed.weight");
        mat(s, TENSOR_BF16, c->vocab_size, c->dspark_markov_rank, p, "markov_head.head.weight");
        mat(s, TENSOR_BF16, 1, (int64_t)c->dim + c->dspark_markov_rank, p, "confidence_head.proj.weight");
    }
}

/* The vision tower, aligner and delimiters (vision.md §4), in the order of §6's weight table. They stay
 * 16-bit (no EXL3: §4 "seeded EXL3 quants"); the norm weights are fp32 (§3.2) and may be stored bf16. */
static void vision_tower(schema_list *s, const model_config *c)
{
    int64_t D = c->vision_dim, I = c->vision_inter_dim, p = c->vision_patch_size;
    int64_t cell = D * c->vision_downsample_ratio * c->vision_downsample_ratio;
    mat(s, TENSOR_BF16, D, 3 * p * p, "", "vision.patch_embed.proj.weight");
    vec(s, TENSOR_BF16, D, "", "vision.patch_embed.proj.bias");
    for (int b = 0; b < c->vision_n_layers; b++) {
        char pre[48];
        snprintf(pre, sizeof pre, "vision.blocks.%d.", b);
        schema_tensor *n1 = add(s, TENSOR_F32, 1, D, 0, "%snorm1.weight", pre);
        mat(s, TENSOR_BF16, 3 * D, D, pre, "attn.wqkv.weight");
        vec(s, TENSOR_BF16, 3 * D, pre, "attn.wqkv.bias");
        mat(s, TENSOR_BF16, D, D, pre, "attn.wo.weight");
        vec(s, TENSOR_BF16, D, pre, "attn.wo.bias");
        schema_tensor *n2 = add(s, TENSOR_F32, 1, D, 0, "%snorm2.weight", pre);
        mat(s, TENSOR_BF16, 2 * I, D, pre, "mlp.w1.weight");
        mat(s, TENSOR_BF16, D, I, pre, "mlp.w2.weight");
        if (n1 && n2)
            n1->allow_bf16 = n2->allow_bf16 = 1;
    }
    schema_tensor *n = add(s, TENSOR_F32, 1, D, 0, "vision.norm.weight");
    if (n)
        n->allow_bf16 = 1;
    mat(s, TENSOR_BF16, c->dim, cell, "", "aligner.w1.weight");
    vec(s, TENSOR_BF16, c->dim, "", "aligner.w1.bias");
    mat(s, TENSOR_BF16, c->dim, c->dim, "", "aligner.w2.weight");
    vec(s, TENSOR_BF16, c->dim, "", "aligner.w2.bias");
    vec(s, TENSOR_BF16, c->dim, "", "image_start");
    vec(s, TENSOR_BF16, c->dim, "", "image_end");
    vec(s, TENSOR_BF16, c->dim, "", "image_newline");
}

int model_schema(const model_config *c, schema_tensor **out, int *n_out)
{
    schema_list s = {0};
    mat(&s, TENSOR_BF16, c->vocab_size, c->dim, "", "embed.weight");
    exl3(&s, c->dim, c->vocab_size, BITS_HEAD, "", "head");
    norm(&s, c->dim, "", "norm.weight");
    if (c->n_engram_layers > 0)
        vec(&s, TENSOR_I32, c->vocab_size, "", "engram.token_map");
    for (int l = 0; l < c->n_layers; l++)
        backbone_layer(&s, c, l);
    for (int k = 0; k < c->n_mtp_layers; k++)
        dspark_stage(&s, c, k);
    if (c->vision_n_layers > 0)
        vision_tower(&s, c);
    if (s.failed) {
        free(s.t);
        return -1;
    }
    *out = s.t;
    *n_out = s.n;
    return 0;
}
