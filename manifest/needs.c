#include "manifest/needs.h"
#include "runtime/common/error.h"
#include "runtime/common/kv_quant.h"
#include "manifest/rules/rules.h"
#include "runtime/weights/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of a sparse attention launch swept (a prompt chunk has at most this many). */
#define SPARSE_ATTN_NEEDS_ROWS 4096

/* Add a rule's pick unless already listed. */
static int add_variant(need_list *l, const char *why, const rule_variant *v)
{
    need nd;
    memset(&nd, 0, sizeof nd);
    snprintf(nd.family, sizeof nd.family, "%s", v->family);
    snprintf(nd.why, sizeof nd.why, "%s", why);
    if (mf_params_parse(v->params, nd.param, MANIFEST_MAX_PARAMS, &nd.nparams))
        return -1;
    for (int j = 0; j < l->n; j++)
        if (need_matches_params(&l->v[j], nd.family, nd.param, nd.nparams))
            return 0;
    need *grown = dsk_realloc(l->v, sizeof(need) * (size_t)(l->n + 1));
    if (!grown)
        return -1;
    l->v = grown;
    l->v[l->n++] = nd;
    return 0;
}

/* Add (family, "NAME=value,...") unless already listed; `why` says which part of the model. */
static int add(need_list *l, const char *why, const char *family, const char *fmt, int value)
{
    rule_variant v = {.family = family};
    snprintf(v.params, sizeof v.params, fmt, value);
    return add_variant(l, why, &v);
}

/* A top-k of k = min(k_cap, N) out of rows of N entries, for every N in 1..n_max: the rule's pick for
 * each (the picks change at a few breakpoints only, so consecutive equal picks are added once). */
static int add_topk_sweep(need_list *l, const char *why, int64_t n_max, int k_cap)
{
    char last[80] = "";
    if (n_max > 1 << 30)
        n_max = 1 << 30;
    for (int N = 1; N <= n_max; N++) {
        rule_variant v;
        int blocks = rule_topk_pick(N, N < k_cap ? N : k_cap, &v);
        char key[80];
        snprintf(key, sizeof key, "%s %s", v.family, v.params);
        if (strcmp(key, last)) {
            if (add_variant(l, why, &v))
                return -1;
            snprintf(last, sizeof last, "%s", key);
        }
        /* from the first N that takes topk_mb on, every larger N does too (the blocks rule never
         * decreases) with its one variant: the sweep ends there, not at the context (a config.json of 2^31
         * positions swept 2^29 rows, a minute of `dskit-build --for`) */
        if (blocks > 1 && !strcmp(v.family, "topk_mb"))
            break;
    }
    return 0;
}

int needs_for_model(const model_config *c, const needs_settings *s, need_list *out)
{
    out->v = NULL;
    out->n = 0;
    int max_rows = s && s->max_rows > 0 ? s->max_rows : 64;
    int rc = 0;
    /* norms: residual width (attn/ffn/final/drafter), q_lora, the KV head, the indexer keys */
    rc |= add(out, "RMSNorm of the residual width", "rmsnorm", "T=%d", rule_rmsnorm_threads(c->dim));
    rc |= add(out, "RMSNorm q_norm", "rmsnorm", "T=%d", rule_rmsnorm_threads(c->q_lora_rank));
    rc |= add(out, "RMSNorm kv_norm / compressor norm", "rmsnorm", "T=%d", rule_rmsnorm_threads(c->head_dim));
    rc |= add(out, "RMSNorm indexer k_norm", "rmsnorm", "T=%d", rule_rmsnorm_threads(c->index_head_dim));
    rule_variant v;
    rule_rope_pick(c->rope_head_dim, &v);
    rc |= add_variant(out, "RoPE of queries, keys, compressed rows, indexer", &v);
    /* router and indexer head weights: every row bucket a launch of <= max_rows rows uses */
    for (int r = 1; r <= (max_rows < 16 ? max_rows : 16); r++)
        rc |= add(out, "router gate, indexer weights_proj", "rowmm_bf16", "M=%d", rule_rowmm_bucket(r));
    /* (no casts: mhc_post rounds the fp32 sums itself, rowmm_bf16 scales the indexer's head weights; the
     * cast family stays in the kit for tests and benchmarks) */
    /* router top-k: k of E, fixed */
    rule_topk_pick(c->n_routed_experts, c->n_activated_experts, &v);
    rc |= add_variant(out, "router top-k", &v);
    if (c->n_mtp_layers > 0) {
        rule_topk_pick(c->dspark_n_routed_experts, c->dspark_n_activated_experts, &v);
        rc |= add_variant(out, "drafter router top-k", &v);
    }
    /* indexer top-k: min(index_topk, N) of the N compressed rows reachable, N = 1 .. context / ratio; the
     * candidate blocks likewise over N = 1 .. ceil(rows / block) blocks */
    int min_ratio = 0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->roles[l].is_index_source && (min_ratio == 0 || c->roles[l].ratio < min_ratio))
            min_ratio = c->roles[l].ratio;
    if (min_ratio > 0)
        rc |= add_topk_sweep(out, "indexer top-k", c->max_seq_len / min_ratio, c->index_topk);
    if (c->candidate_source_layer >= 0) {
        int64_t rows = c->max_seq_len / c->roles[c->candidate_source_layer].ratio;
        rc |= add_topk_sweep(out, "candidate blocks", (rows + c->candidate_block_size - 1) / c->candidate_block_size,
                             c->candidate_topk_blocks);
    }
    /* indexer scores of the index sources (their candidate blocks: block scores, then the kept set;
     * the top-k between them is the candidate-blocks sweep above) */
    if (min_ratio > 0) {
        if (rule_index_score_pick(c->index_n_heads, c->index_head_dim, &v))
            rc = -1;
        else
            rc |= add_variant(out, "indexer scores", &v);
    }
    if (c->candidate_source_layer >= 0) {
        rule_variant vm;
        rule_cand_blocks_pick(&v, &vm);
        rc |= add_variant(out, "candidate block scores", &v);
        rc |= add_variant(out, "candidate blocks kept", &vm);
    }
    /* MoE routing (the router's scores, top-k and weights), backbone and drafter */
    if (rule_moe_route_pick(c->n_routed_experts, c->n_activated_experts, &v))
        rc = -1;
    else
        rc |= add_variant(out, "MoE routing", &v);
    if (rule_moe_route_plan_pick(c->n_routed_experts, c->n_activated_experts, &v))
        rc = -1;
    else
        rc |= add_variant(out, "MoE routing in the plan launch (decode rounds)", &v);
    if (c->n_mtp_layers > 0) {
        if (rule_moe_route_pick(c->dspark_n_routed_experts, c->dspark_n_activated_experts, &v))
            rc = -1;
        else
            rc |= add_variant(out, "drafter MoE routing", &v);
        if (rule_moe_route_plan_pick(c->dspark_n_routed_experts, c->dspark_n_activated_experts, &v))
            rc = -1;
        else
            rc |= add_variant(out, "drafter MoE routing in the plan launch", &v);
    }
    /* sampling, and the top-k of its candidates over the vocabulary */
    rule_sample_pick(&v);
    rc |= add_variant(out, "sampling", &v);
    rule_topk_pick(c->vocab_size, rule_sample_candidates(c->vocab_size), &v);
    rc |= add_variant(out, "sampling candidates (top-k of the vocabulary)", &v);
    /* the drafter's confidence and Markov bias (a rowmm_bf16 of K = markov rank, per draft step) */
    if (c->n_mtp_layers > 0) {
        rule_dspark_conf_pick(&v);
        rc |= add_variant(out, "DSpark confidence, Markov bias add", &v);
        for (int r = 1; r <= (max_rows < 16 ? max_rows : 16); r++)
            rc |= add(out, "DSpark Markov bias", "rowmm_bf16", "M=%d", rule_rowmm_bucket(r));
    }
    /* embed: the backbone's and the drafter's token rows into hc streams */
    rule_embed_pick(c->hc_mult, &v);
    rc |= add_variant(out, "embedding into the hc streams", &v);
    /* mhc_mix: the coefficients of every sublayer (backbone and DSpark stages) */
    rule_mhc_mix_pick(c->hc_mult, &v);
    rc |= add_variant(out, "mHC mixes and Sinkhorn of every sublayer", &v);
    /* mhc_pre: every sublayer input (with attn_norm / ffn_norm) and the head's u (final norm), width dim */
    rule_mhc_pre_pick(c->hc_mult, c->dim, &v);
    rc |= add_variant(out, "mHC pre with the sublayer or final RMSNorm", &v);
    /* mhc_post: every sublayer output back into the streams */
    rule_mhc_post_pick(c->hc_mult, &v);
    rc |= add_variant(out, "mHC post of every sublayer", &v);
    /* tap_mean: the streams' mean at the DSpark target layers */
    if (c->n_mtp_layers > 0 && c->n_dspark_targets > 0) {
        rule_tap_mean_pick(c->hc_mult, &v);
        rc |= add_variant(out, "DSpark taps (mean of the streams)", &v);
    }
    /* xchg: the exchanges of tensor-parallel ranks (the wo_b and MoE partials, the head's logits): whether
     * the engine runs tp > 1 is a serving setting needs does not see, so both modes */
    rule_xchg_pick(0, &v);
    rc |= add_variant(out, "tensor-parallel exchange: the sum of the ranks' partials", &v);
    rule_xchg_pick(1, &v);
    rc |= add_variant(out, "tensor-parallel exchange: the gather of the ranks' logits", &v);
    rule_xchg_pick(2, &v);
    rc |= add_variant(out, "tensor-parallel exchange through NCCL: the sum of the gathered partials", &v);
    rule_xchg_pick(3, &v);
    rc |= add_variant(out, "tensor-parallel exchange through NCCL: the gathered logits placed", &v);
    /* vec_glue: every layer's q_norm beside its window keys (RMSNorm, RoPE, FP8) and a ratio-1 kv source's
     * latent norm, in one launch of ops of several QDQ kinds (the mixed variant; Q's RoPE is sparse_attn's);
     * a kv source's index keys (norm, RoPE, FP4/e8m0) beside its latents' RoPE + FP4/e4m3, mixed too; alone:
     * the drafter's main KV (as the window keys), a ratio-2 latent's norm, an index source's queries (RoPE,
     * FP4/e8m0). The pick depends on the widest op and the QDQ kinds only, never on the rows. */
    {
        int kv_source = 0, index_source = 0, ratio2 = 0;
        for (int l = 0; l < c->n_layers; l++) {
            kv_source |= c->roles[l].is_kv_source;
            index_source |= c->roles[l].is_index_source;
            ratio2 |= c->roles[l].is_kv_source && c->roles[l].ratio == 2;
        }
        struct {
            const char *why;
            int width, qdq, on;
        } glue[] = {
            {"q_norm + window keys (kv_norm, RoPE, FP8) + a ratio-1 latent's norm",
             c->q_lora_rank > c->head_dim ? c->q_lora_rank : c->head_dim, RULE_VEC_GLUE_MIXED, 1},
            {"the drafter's main KV (kv_norm, RoPE, FP8)", c->head_dim, KVQ_FP8_E4M3, 1},
            {"ratio-2 compressor norm", c->head_dim, KVQ_NONE, ratio2},
            {"index keys (k_norm, RoPE, FP4/e8m0) + compressed latents (RoPE, FP4/e4m3)",
             c->head_dim > c->index_head_dim ? c->head_dim : c->index_head_dim, RULE_VEC_GLUE_MIXED, kv_source},
            {"index queries (RoPE, FP4/e8m0)", c->index_head_dim, KVQ_FP4_E8M0, index_source},
        };
        for (size_t i = 0; i < sizeof glue / sizeof glue[0]; i++)
            if (glue[i].on) {
                rule_vec_glue_pick(glue[i].width, glue[i].qdq, &v);
                rc |= add_variant(out, glue[i].why, &v);
            }
        /* rows_copy: window-ring writes, compressed-row and index-key stores, the ratio-2 state */
        rule_rows_copy_pick(&v);
        rc |= add_variant(out, "ring writes, compressed-row stores, compressor state", &v);
        /* compress_pool: the ratio-2 compressors' pooling */
        if (ratio2) {
            rule_compress_pool_pick(&v);
            rc |= add_variant(out, "ratio-2 compressor pooling", &v);
        }
    }
    /* engram_rows: records from the row store (host or NVMe) and rows of a device-resident table (where the
     * table lives is a serving setting needs does not see, so both); engram_gate at the residual width */
    if (c->n_engram_layers > 0) {
        rule_engram_rows_pick(0, &v);
        rc |= add_variant(out, "Engram rows from the row store's records", &v);
        rule_engram_rows_pick(1, &v);
        rc |= add_variant(out, "Engram rows from a device-resident table", &v);
        rule_engram_gate_pick(c->dim, &v);
        rc |= add_variant(out, "Engram gate", &v);
    }
    /* sparse attention: each layer's lists (the window, plus the top-k on ratio > 0 layers, plus a block on
     * the DSpark stages) at every row count of a decode round or a prompt chunk; the whole-list form or the
     * two steps of the split form, as rule_sparse_attn_split decides */
    for (int l = 0; l < c->n_layers + (c->n_mtp_layers > 0); l++) {
        int list = c->window_size + (l == c->n_layers ? c->dspark_block_size : c->roles[l].ratio > 0 ? c->index_topk : 0);
        for (int rows = 1; rows <= SPARSE_ATTN_NEEDS_ROWS; rows++) {
            int split = rule_sparse_attn_split(rows, c->n_heads, list);
            for (int mode = split ? 1 : 0; mode <= (split ? 2 : 0); mode++) {
                rule_sparse_attn_pick(c->head_dim, mode, &v);
                rc |= add_variant(out, "sparse attention", &v);
            }
        }
    }
    /* the vision tower (vision.md §3): its linears at every patch count an image can give, 1 to r² per
     * position of the budget (the tile rule is monotone in the rows: both ends give every pick), and its
     * glue */
    if (c->vision_n_layers > 0) {
        int r = c->vision_downsample_ratio, D = c->vision_dim, I = c->vision_inter_dim;
        int64_t most = (int64_t)r * r * c->vision_max_n_token;
        int patches = most > (1 << 24) ? 1 << 24 : (int)most, cells = c->vision_max_n_token;
        struct {
            int rows, N;
        } mm[] = {{patches, D}, {patches, 3 * D}, {patches, 2 * I}, {cells, c->dim}};
        for (size_t i = 0; i < sizeof mm / sizeof mm[0]; i++)
            for (int end = 0; end < 2; end++) {
                rule_vision_mm_pick(s ? s->sm : 0, end ? mm[i].rows : 1, mm[i].N, &v);
                rc |= add_variant(out, "vision tower linears", &v);
            }
        for (int op = 0; op < 3; op++) {
            rule_vision_glue_pick(op, &v);
            rc |= add_variant(out, "vision tower norms, 2-D RoPE, space-to-depth", &v);
        }
        /* its attention: one variant by its head dim */
        if (rule_vision_attn_pick(c->vision_dim / c->vision_n_heads, &v))
            rc = -1;
        else
            rc |= add_variant(out, "vision tower attention", &v);
    }
    if (rc) {
        need_list_free(out);
        return -1;
    }
    return 0;
}

int needs_add_exl3(need_list *l, int K, int cb, int max_rows, int moe)
{
    rule_variant v[16];
    int n = rule_exl3_variants(K, cb, max_rows, moe, v, 16);
    if (n > 16)
        return dsk_err("needs: %d EXL3 variants for K %d, codebook %d (at most 16 expected)", n, K, cb);
    char why[96];
    snprintf(why, sizeof why, "EXL3 linears at %d bits, codebook %s%s", K, cb == 2 ? "MUL1" : cb == 1 ? "MCG" : "3INST",
             moe ? " (routed experts)" : "");
    for (int i = 0; i < n; i++)
        if (add_variant(l, why, &v[i]))
            return -1;
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
            rc = needs_add_exl3(out, K, cb, max_rows, moe);
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
