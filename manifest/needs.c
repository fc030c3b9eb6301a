#include "manifest/needs.h"
#include "runtime/common/error.h"
#include "manifest/rules/rules.h"
#include "runtime/weights/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Add (family, NAME=value pairs...) unless already listed; `why` says which part of the model. */
static int add(need_list *l, const char *why, const char *family, int np, ...)
{
    need n;
    memset(&n, 0, sizeof n);
    snprintf(n.family, sizeof n.family, "%s", family);
    snprintf(n.why, sizeof n.why, "%s", why);
    va_list ap;
    va_start(ap, np);
    for (int i = 0; i < np; i++) {
        snprintf(n.param[i].name, sizeof n.param[i].name, "%s", va_arg(ap, const char *));
        n.param[i].value = va_arg(ap, int);
    }
    va_end(ap);
    n.nparams = np;
    for (int i = 0; i < l->n; i++) {
        need *o = &l->v[i];
        if (strcmp(o->family, n.family) || o->nparams != np)
            continue;
        int same = 1;
        for (int p = 0; p < np && same; p++)
            same = !strcmp(o->param[p].name, n.param[p].name) && o->param[p].value == n.param[p].value;
        if (same)
            return 0;
    }
    need *v = dsk_realloc(l->v, sizeof(need) * (size_t)(l->n + 1));
    if (!v)
        return -1;
    l->v = v;
    l->v[l->n++] = n;
    return 0;
}

/* The top-k of rows of up to N entries: one block per row (short rows), several (long rows). */
static int add_topk(need_list *l, const char *why, int N, int k)
{
    int npl = rule_topk_small_npl(N, k);
    if (npl)
        return add(l, why, "topk_small", 1, "NPL", npl);
    int rc = add(l, why, "topk", 1, "T", rule_topk_threads(N < RULE_TOPK_MB_MIN_N ? N : RULE_TOPK_MB_MIN_N - 1));
    if (rule_topk_blocks(N) > 1)
        rc |= add(l, why, "topk_mb", 1, "T", 256);
    return rc;
}

int needs_for_model(const model_config *c, const needs_settings *s, need_list *out)
{
    out->v = NULL;
    out->n = 0;
    int max_rows = s && s->max_rows > 0 ? s->max_rows : 64;
    int rc = 0;
    /* norms: residual width (attn/ffn/final/drafter), q_lora, the KV head, the indexer keys */
    rc |= add(out, "RMSNorm of the residual width", "rmsnorm", 1, "T", rule_rmsnorm_threads(c->dim));
    rc |= add(out, "RMSNorm q_norm", "rmsnorm", 1, "T", rule_rmsnorm_threads(c->q_lora_rank));
    rc |= add(out, "RMSNorm kv_norm / compressor norm", "rmsnorm", 1, "T", rule_rmsnorm_threads(c->head_dim));
    rc |= add(out, "RMSNorm indexer k_norm", "rmsnorm", 1, "T", rule_rmsnorm_threads(c->index_head_dim));
    rc |= add(out, "RoPE of queries, keys, compressed rows, indexer", "rope", 1, "R", c->rope_head_dim);
    /* router and indexer head weights: every row bucket a launch of <= max_rows rows uses */
    for (int r = 1; r <= (max_rows < 16 ? max_rows : 16); r++)
        rc |= add(out, "router gate, indexer weights_proj", "rowmm_bf16", 1, "M", rule_rowmm_bucket(r));
    rc |= add_topk(out, "router top-k", c->n_routed_experts, c->n_activated_experts);
    if (c->n_mtp_layers > 0)
        rc |= add_topk(out, "drafter router top-k", c->dspark_n_routed_experts, c->dspark_n_activated_experts);
    /* indexer top-k over 1 .. max_seq_len / ratio rows and candidate blocks: both radix sizes */
    int64_t max_rows_cache = c->max_seq_len;
    if (c->n_index_source_layers > 0) {
        int n_long = max_rows_cache > 1 << 30 ? 1 << 30 : (int)max_rows_cache;
        rc |= add(out, "indexer top-k", "topk", 1, "T", rule_topk_threads(c->index_topk));
        rc |= add_topk(out, "indexer top-k, long context", n_long, c->index_topk);
    }
    if (c->candidate_source_layer >= 0) {
        int64_t blocks = (max_rows_cache + c->candidate_block_size - 1) / c->candidate_block_size;
        rc |= add_topk(out, "candidate blocks", blocks > 1 << 30 ? 1 << 30 : (int)blocks, c->candidate_topk_blocks);
    }
    if (rc) {
        need_list_free(out);
        return -1;
    }
    return 0;
}

/* Add the variants of rule_exl3_variants for one (K, codebook, MoE or not). */
static int add_exl3(need_list *l, int K, int cb, int max_rows, int moe)
{
    rule_variant v[16];
    int n = rule_exl3_variants(K, cb, max_rows, moe, v, 16);
    if (n > 16)
        return dsk_err("needs: %d EXL3 variants for K %d, codebook %d (at most 16 expected)", n, K, cb);
    char why[96];
    snprintf(why, sizeof why, "EXL3 linears at %d bits, codebook %s%s", K, cb == 2 ? "MUL1" : cb == 1 ? "MCG" : "3INST",
             moe ? " (routed experts)" : "");
    for (int i = 0; i < n; i++) {
        need nd;
        memset(&nd, 0, sizeof nd);
        snprintf(nd.family, sizeof nd.family, "%s", v[i].family);
        snprintf(nd.why, sizeof nd.why, "%s", why);
        if (mf_params_parse(v[i].params, nd.param, MANIFEST_MAX_PARAMS, &nd.nparams))
            return -1;
        int dup = 0;
        for (int j = 0; j < l->n && !dup; j++)
            dup = need_matches_params(&l->v[j], nd.family, nd.param, nd.nparams);
        if (dup)
            continue;
        need *grown = dsk_realloc(l->v, sizeof(need) * (size_t)(l->n + 1));
        if (!grown)
            return -1;
        l->v = grown;
        l->v[l->n++] = nd;
    }
    return 0;
}

/* Every distinct (K, codebook, routed-expert) of the checkpoint's EXL3 linears. */
static int add_checkpoint(const char *dir, int max_rows, need_list *out)
{
    st_set *set;
    if (st_open(dir, &set))
        return dsk_err_ctx("reading the checkpoint in %s", dir);
    int seen[9][3][2] = {{{0}}}, rc = 0;
    for (int i = 0; i < st_count(set) && !rc; i++) {
        const st_tensor *t = st_at(set, i);
        size_t len = strlen(t->name);
        if (len < 8 || strcmp(t->name + len - 8, ".trellis"))
            continue;
        if (t->ndim != 3 || t->shape[2] % 16 || t->shape[2] / 16 < 1 || t->shape[2] / 16 > 8) {
            rc = dsk_err("%s: an EXL3 trellis must be [k/16, n/16, 16*K] with K in 1..8", t->name);
            break;
        }
        char prefix[512];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(len - 8), t->name);
        char mcg[540], mul1[540];
        snprintf(mcg, sizeof mcg, "%s.mcg", prefix);
        snprintf(mul1, sizeof mul1, "%s.mul1", prefix);
        int cb = st_get(set, mul1) ? 2 : st_get(set, mcg) ? 1 : 0;
        int K = (int)(t->shape[2] / 16), moe = strstr(t->name, ".ffn.experts.") != NULL;
        if (!seen[K][cb][moe]) {
            seen[K][cb][moe] = 1;
            rc = add_exl3(out, K, cb, max_rows, moe);
        }
    }
    st_close(set);
    return rc;
}

int needs_for_model_dir(const char *dir, const needs_settings *s, need_list *out)
{
    model_config cfg;
    if (model_config_load(dir, &cfg) || needs_for_model(&cfg, s, out))
        return -1;
    if (add_checkpoint(dir, s && s->max_rows > 0 ? s->max_rows : 64, out)) {
        need_list_free(out);
        return -1;
    }
    return 0;
}

int need_matches_params(const need *n, const char *family, const mf_param *p, int np)
{
    if (strcmp(n->family, family) || n->nparams != np)
        return 0;
    for (int i = 0; i < n->nparams; i++) {
        int found = 0;
        for (int j = 0; j < np && !found; j++)
            found = !strcmp(n->param[i].name, p[j].name) && n->param[i].value == p[j].value;
        if (!found)
            return 0;
    }
    return 1;
}

int need_matches(const need *n, const mf_kernel *k)
{
    return need_matches_params(n, k->family, k->param, k->nparams);
}

void need_describe(const need *n, char *out, size_t cap)
{
    size_t len = (size_t)snprintf(out, cap, "%s", n->family);
    for (int i = 0; i < n->nparams && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s=%lld", i ? "," : " ", n->param[i].name,
                                (long long)n->param[i].value);
}

void need_list_free(need_list *l)
{
    free(l->v);
    l->v = NULL;
    l->n = 0;
}
