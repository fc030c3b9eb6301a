#include "runtime/model/config.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A field is looked up by its Hugging Face name, then by its inference/config.json name (§1.1). */
typedef struct {
    const json_t *obj;
    const char *name; /* for messages */
} cfg_src;

static const json_t *lookup(const cfg_src *s, const char *hf, const char *inf, const char **used)
{
    const json_t *v = hf ? json_object_get(s->obj, hf) : NULL;
    *used = hf;
    if (!v && inf) {
        v = json_object_get(s->obj, inf);
        *used = inf;
    }
    if (v && json_is_null(v))
        v = NULL;
    if (!v)
        *used = hf ? hf : inf;
    return v;
}

static int get_i64(const cfg_src *s, const char *hf, const char *inf, int has_def, int64_t def, int64_t lo,
                   int64_t hi, int64_t *out)
{
    const char *n;
    const json_t *v = lookup(s, hf, inf, &n);
    if (!v) {
        if (!has_def)
            return dsk_err("%s: field '%s' is missing", s->name, n);
        *out = def;
        return 0;
    }
    if (!json_is_integer(v))
        return dsk_err("%s: field '%s' must be an integer", s->name, n);
    int64_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return dsk_err("%s: field '%s' = %lld is out of range [%lld, %lld]", s->name, n, (long long)x,
                       (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int get_int(const cfg_src *s, const char *hf, const char *inf, int64_t lo, int64_t hi, int *out)
{
    int64_t x;
    if (get_i64(s, hf, inf, 0, 0, lo, hi, &x))
        return -1;
    *out = (int)x;
    return 0;
}

static int get_int_def(const cfg_src *s, const char *hf, const char *inf, int def, int64_t lo, int64_t hi,
                       int *out)
{
    int64_t x;
    if (get_i64(s, hf, inf, 1, def, lo, hi, &x))
        return -1;
    *out = (int)x;
    return 0;
}

static int get_num(const cfg_src *s, const char *hf, const char *inf, int has_def, double def, double lo,
                   double hi, double *out)
{
    const char *n;
    const json_t *v = lookup(s, hf, inf, &n);
    if (!v) {
        if (!has_def)
            return dsk_err("%s: field '%s' is missing", s->name, n);
        *out = def;
        return 0;
    }
    if (!json_is_number(v))
        return dsk_err("%s: field '%s' must be a number", s->name, n);
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || x > hi)
        return dsk_err("%s: field '%s' = %g is out of range [%g, %g]", s->name, n, x, lo, hi);
    *out = x;
    return 0;
}

static int get_f32(const cfg_src *s, const char *hf, const char *inf, double lo, double hi, float *out)
{
    double x;
    if (get_num(s, hf, inf, 0, 0, lo, hi, &x))
        return -1;
    *out = (float)x;
    return 0;
}

/* An optional string field that must equal want when present. */
static int check_str(const cfg_src *s, const char *key, const char *want, int required)
{
    const json_t *v = json_object_get(s->obj, key);
    if (!v || json_is_null(v))
        return required ? dsk_err("%s: field '%s' is missing (expected \"%s\")", s->name, key, want) : 0;
    if (!json_is_string(v) || strcmp(json_string_value(v), want))
        return dsk_err("%s: field '%s' must be \"%s\"%s%s", s->name, key, want,
                       json_is_string(v) ? ", not " : "", json_is_string(v) ? json_string_value(v) : "");
    return 0;
}

/* An integer list of length [min_len, max_len] with values in [lo, hi]. */
static int get_list(const cfg_src *s, const char *hf, const char *inf, int min_len, int max_len, int64_t lo,
                    int64_t hi, int64_t *vals, int *n_out)
{
    const char *n;
    const json_t *v = lookup(s, hf, inf, &n);
    if (!v)
        return dsk_err("%s: field '%s' is missing", s->name, n);
    if (!json_is_array(v))
        return dsk_err("%s: field '%s' must be a list of integers", s->name, n);
    int len = (int)json_array_size(v);
    if (len < min_len || len > max_len)
        return dsk_err("%s: field '%s' has %d entries, expected %d..%d", s->name, n, len, min_len, max_len);
    for (int i = 0; i < len; i++) {
        const json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_integer(e))
            return dsk_err("%s: field '%s'[%d] must be an integer", s->name, n, i);
        int64_t x = json_integer_value(e);
        if (x < lo || x > hi)
            return dsk_err("%s: field '%s'[%d] = %lld is out of range [%lld, %lld]", s->name, n, i,
                           (long long)x, (long long)lo, (long long)hi);
        vals[i] = x;
    }
    *n_out = len;
    return 0;
}

static int get_int_list(const cfg_src *s, const char *hf, const char *inf, int min_len, int max_len,
                        int64_t lo, int64_t hi, int *vals, int *n_out)
{
    int64_t tmp[MODEL_MAX_LAYERS];
    if (get_list(s, hf, inf, min_len, max_len, lo, hi, tmp, n_out))
        return -1;
    for (int i = 0; i < *n_out; i++)
        vals[i] = (int)tmp[i];
    return 0;
}

static int read_top_level(const cfg_src *top, model_config *c)
{
    if (get_int_def(top, "bos_token_id", NULL, 0, 0, INT32_MAX, &c->bos_token_id) ||
        get_int_def(top, "eos_token_id", NULL, 1, 0, INT32_MAX, &c->eos_token_id) ||
        get_int_def(top, "pad_token_id", NULL, 2, 0, INT32_MAX, &c->pad_token_id) ||
        get_int_def(top, "image_token_id", NULL, 129264, 0, INT32_MAX, &c->image_token_id))
        return -1;
    const json_t *tie = json_object_get(top->obj, "tie_word_embeddings");
    if (tie && !json_is_false(tie))
        return dsk_err("%s: field 'tie_word_embeddings' must be false (the model has its own head)",
                       top->name);
    c->quant_method[0] = 0;
    const json_t *q = json_object_get(top->obj, "quantization_config");
    if (q && json_is_object(q)) {
        const json_t *m = json_object_get(q, "quant_method");
        if (!json_is_string(m))
            return dsk_err("%s: field 'quantization_config.quant_method' must be a string", top->name);
        snprintf(c->quant_method, sizeof c->quant_method, "%s", json_string_value(m));
    } else if (q && !json_is_null(q)) {
        return dsk_err("%s: field 'quantization_config' must be an object", top->name);
    }
    return 0;
}

static int read_rope(const cfg_src *t, model_config *c)
{
    if (get_num(t, "rope_theta", "rope_theta", 0, 0, 1.0, 1e12, &c->rope_theta) ||
        get_num(t, "compress_rope_theta", "compress_rope_theta", 0, 0, 1.0, 1e12, &c->compress_rope_theta))
        return -1;
    const json_t *rs = json_object_get(t->obj, "rope_scaling");
    if (rs && json_is_object(rs)) {
        cfg_src r = {rs, "rope_scaling"};
        char nm[160];
        snprintf(nm, sizeof nm, "%s: rope_scaling", t->name);
        r.name = nm;
        int64_t osl;
        if (check_str(&r, "rope_type", "yarn", 0) ||
            get_num(&r, "factor", NULL, 0, 0, 1.0, 1e6, &c->rope_factor) ||
            get_num(&r, "beta_fast", NULL, 0, 0, 1e-6, 1e6, &c->beta_fast) ||
            get_num(&r, "beta_slow", NULL, 0, 0, 1e-6, 1e6, &c->beta_slow) ||
            get_i64(&r, "original_max_position_embeddings", NULL, 0, 0, 1, INT64_C(1) << 40, &osl))
            return -1;
        c->original_seq_len = osl;
    } else if (rs && !json_is_null(rs)) {
        return dsk_err("%s: field 'rope_scaling' must be an object or null", t->name);
    } else if (json_object_get(t->obj, "rope_factor")) {
        int64_t osl;
        if (get_num(t, NULL, "rope_factor", 0, 0, 0.0, 1e6, &c->rope_factor) ||
            get_num(t, NULL, "beta_fast", 1, 32, 1e-6, 1e6, &c->beta_fast) ||
            get_num(t, NULL, "beta_slow", 1, 1, 1e-6, 1e6, &c->beta_slow) ||
            get_i64(t, NULL, "original_seq_len", 1, 0, 0, INT64_C(1) << 40, &osl))
            return -1;
        c->original_seq_len = osl;
    } else {
        c->rope_factor = 0; /* no YaRN */
        c->beta_fast = 32;
        c->beta_slow = 1;
        c->original_seq_len = 0;
    }
    return 0;
}

/* Upper bounds of the size fields (docs/model.md "Config"): each far above the real model's value and
 * small enough that the sums and products the model forms of them (window + index_topk, dim +
 * dspark_markov_rank, heads x head widths, rows x widths in size_t) cannot overflow. */
#define CFG_MAX_VOCAB (1 << 21) /* the tokenizer's id limit */
#define CFG_MAX_WIDTH (1 << 16) /* hidden_size, LoRA ranks, index_topk, dspark_markov_rank */
#define CFG_MAX_FFN (1 << 18)   /* moe_intermediate_size */
#define CFG_MAX_BLOCKS (1 << 20) /* candidate_topk_blocks, candidate_block_size, sliding_window */

static int read_text(const cfg_src *t, model_config *c)
{
    const int64_t big = INT32_MAX;
    int kvh, n_layers_all;
    int64_t tmp[MODEL_MAX_LIST];
    double d;
    if (get_int(t, "vocab_size", "vocab_size", 1, CFG_MAX_VOCAB, &c->vocab_size) ||
        get_int(t, "hidden_size", "dim", 1, CFG_MAX_WIDTH, &c->dim) ||
        get_int(t, "num_hidden_layers", "n_layers", 1, MODEL_MAX_LAYERS - 8, &c->n_layers) ||
        get_int(t, "num_attention_heads", "n_heads", 1, 4096, &c->n_heads) ||
        get_int_def(t, "num_key_value_heads", NULL, 1, 1, 1, &kvh) ||
        get_int(t, "head_dim", "head_dim", 2, 1024, &c->head_dim) ||
        get_int(t, "qk_rope_head_dim", "rope_head_dim", 2, 65536, &c->rope_head_dim) ||
        get_int(t, "q_lora_rank", "q_lora_rank", 1, CFG_MAX_WIDTH, &c->q_lora_rank) ||
        get_int(t, "o_lora_rank", "o_lora_rank", 1, CFG_MAX_WIDTH, &c->o_lora_rank) ||
        get_int(t, "o_groups", "o_groups", 1, 4096, &c->o_groups) ||
        get_f32(t, "swiglu_limit", "swiglu_limit", 0.0, 1e30, &c->swiglu_limit) ||
        get_f32(t, "rms_norm_eps", "norm_eps", 0.0, 1.0, &c->norm_eps) ||
        get_i64(t, "max_position_embeddings", "max_seq_len", 0, 0, 1, INT64_C(1) << 40, &c->max_seq_len))
        return -1;
    if (check_str(t, "hidden_act", "silu", 0) || check_str(t, "topk_method", "noaux_tc", 0))
        return -1;
    if (json_object_get(t->obj, "scoring_func")) {
        if (check_str(t, "scoring_func", "sqrtsoftplus", 1))
            return -1;
    } else if (check_str(t, "score_func", "sqrtsoftplus", 1)) {
        return -1;
    }
    if (read_rope(t, c))
        return -1;
    if (get_int(t, "moe_intermediate_size", "moe_inter_dim", 1, CFG_MAX_FFN, &c->moe_inter_dim) ||
        get_int(t, "n_routed_experts", "n_routed_experts", 1, 4096, &c->n_routed_experts) ||
        get_int_def(t, "n_shared_experts", "n_shared_experts", 1, 1, 1, &c->n_shared_experts) ||
        get_int(t, "num_experts_per_tok", "n_activated_experts", 1, 64, &c->n_activated_experts) ||
        get_f32(t, "routed_scaling_factor", "route_scale", 0.0, 1e6, &c->route_scale))
        return -1;
    const json_t *ntp = json_object_get(t->obj, "norm_topk_prob");
    if (ntp && !json_is_true(ntp))
        return dsk_err("%s: field 'norm_topk_prob' must be true (the only form REF implements)", t->name);
    c->norm_topk_prob = 1;
    if (get_int(t, "sliding_window", "window_size", 1, CFG_MAX_BLOCKS, &c->window_size) ||
        get_int(t, "num_nextn_predict_layers", "n_mtp_layers", 0, 8, &c->n_mtp_layers))
        return -1;
    n_layers_all = c->n_layers + c->n_mtp_layers;
    if (get_int_list(t, "compress_ratios", "compress_ratios", n_layers_all, n_layers_all, 0, 2,
                     c->compress_ratios, &c->n_compress_ratios))
        return dsk_err_ctx("compress_ratios needs num_hidden_layers + num_nextn_predict_layers = %d entries",
                           n_layers_all);
    if (get_int_list(t, "kv_source_layer_ids", "kv_source_layers", 0, MODEL_MAX_LIST, 0, c->n_layers - 1,
                     c->kv_source_layers, &c->n_kv_source_layers) ||
        get_int_list(t, "index_source_layer_ids", "index_source_layers", 0, MODEL_MAX_LIST, 0,
                     c->n_layers - 1, c->index_source_layers, &c->n_index_source_layers) ||
        get_int(t, "index_n_heads", "index_n_heads", 1, 4096, &c->index_n_heads) ||
        get_int(t, "index_head_dim", "index_head_dim", 2, 65536, &c->index_head_dim) ||
        get_int(t, "index_topk", "index_topk", 1, CFG_MAX_WIDTH, &c->index_topk) ||
        get_int(t, "candidate_source_layer_id", "candidate_source_layer", -1, c->n_layers - 1,
                &c->candidate_source_layer) ||
        get_int(t, "candidate_topk_blocks", "candidate_topk_blocks", 1, CFG_MAX_BLOCKS, &c->candidate_topk_blocks) ||
        get_int(t, "candidate_block_size", "candidate_block_size", 1, CFG_MAX_BLOCKS, &c->candidate_block_size))
        return -1;
    if (get_int(t, "hc_mult", "hc_mult", 1, 16, &c->hc_mult) ||
        get_int(t, "hc_sinkhorn_iters", "hc_sinkhorn_iters", 1, 1000, &c->hc_sinkhorn_iters) ||
        get_num(t, "hc_eps", "hc_eps", 0, 0, 0.0, 1.0, &d))
        return -1;
    c->hc_eps = (float)d;
    if (get_int_list(t, "engram_layer_ids", "engram_layer_ids", 0, MODEL_MAX_LIST, 0, c->n_layers - 1,
                     c->engram_layer_ids, &c->n_engram_layers) ||
        get_list(t, "engram_num_embeddings", "engram_num_embeddings", c->n_engram_layers, c->n_engram_layers,
                 1, INT64_C(1) << 40, tmp, &kvh))
        return dsk_err_ctx("engram_num_embeddings needs one entry per engram_layer_ids entry (%d)",
                           c->n_engram_layers);
    for (int i = 0; i < c->n_engram_layers; i++)
        c->engram_num_embeddings[i] = tmp[i];
    if (c->n_engram_layers > 0) {
        if (get_int(t, "engram_max_ngram_size", "engram_max_ngram_size", 2, 16, &c->engram_max_ngram_size) ||
            get_i64(t, "engram_vocab_size", "engram_vocab_size", 0, 0, 2, INT64_C(1) << 40,
                    &c->engram_vocab_size) ||
            get_int(t, "engram_n_heads", "engram_n_heads", 1, 1024, &c->engram_n_heads) ||
            get_int(t, "engram_head_dim", "engram_head_dim", 32, 1 << 16, &c->engram_head_dim) ||
            get_int(t, "engram_pad_token_id", "engram_pad_id", 0, CFG_MAX_VOCAB, &c->engram_pad_id) ||
            get_int(t, "engram_compressed_vocab_size", "engram_compressed_vocab_size", 1, CFG_MAX_VOCAB,
                    &c->engram_compressed_vocab_size))
            return -1;
    }
    if (c->n_mtp_layers > 0) {
        if (get_int(t, "dspark_block_size", "dspark_block_size", 1, 64, &c->dspark_block_size) ||
            get_int(t, "dspark_noise_token_id", "dspark_noise_token_id", 0, big, &c->dspark_noise_token_id) ||
            get_int_list(t, "dspark_target_layer_ids", "dspark_target_layer_ids", 1, MODEL_MAX_LIST, 0,
                         c->n_layers - 1, c->dspark_target_layer_ids, &c->n_dspark_targets) ||
            get_int(t, "dspark_markov_rank", "dspark_markov_rank", 1, CFG_MAX_WIDTH, &c->dspark_markov_rank) ||
            get_int(t, "dspark_n_routed_experts", "dspark_n_routed_experts", 1, 4096,
                    &c->dspark_n_routed_experts) ||
            get_int(t, "dspark_num_experts_per_tok", "dspark_n_activated_experts", 1, 64,
                    &c->dspark_n_activated_experts))
            return -1;
    }
    return 0;
}

static int in_list(const int *list, int n, int v)
{
    for (int i = 0; i < n; i++)
        if (list[i] == v)
            return i;
    return -1;
}

static int check_ascending(const int *list, int n, const char *field)
{
    for (int i = 1; i < n; i++)
        if (list[i] <= list[i - 1])
            return dsk_err("config: field '%s' must be strictly ascending (entry %d = %d after %d)", field, i,
                           list[i], list[i - 1]);
    return 0;
}

/* Cross-field rules and the role table of §1.2. */
int model_config_finish(model_config *c)
{
    c->n_all_layers = c->n_layers + c->n_mtp_layers;
    if (c->n_all_layers > MODEL_MAX_LAYERS)
        return dsk_err("config: %d layers in all (backbone + MTP) exceed the supported %d", c->n_all_layers,
                       MODEL_MAX_LAYERS);
    if (c->n_compress_ratios != c->n_all_layers)
        return dsk_err("config: field 'compress_ratios' has %d entries, expected %d (layers + MTP stages)",
                       c->n_compress_ratios, c->n_all_layers);
    if (c->head_dim % 2 || c->rope_head_dim % 2 || c->rope_head_dim > c->head_dim)
        return dsk_err("config: field 'qk_rope_head_dim' (%d) must be even and at most head_dim (%d)",
                       c->rope_head_dim, c->head_dim);
    if (c->rope_head_dim > c->index_head_dim)
        return dsk_err("config: field 'qk_rope_head_dim' (%d) must be at most index_head_dim (%d)",
                       c->rope_head_dim, c->index_head_dim);
    if (c->n_heads % c->o_groups)
        return dsk_err("config: field 'o_groups' (%d) must divide num_attention_heads (%d)", c->o_groups,
                       c->n_heads);
    if (c->n_activated_experts > c->n_routed_experts)
        return dsk_err("config: field 'num_experts_per_tok' (%d) exceeds n_routed_experts (%d)",
                       c->n_activated_experts, c->n_routed_experts);
    if (c->max_seq_len > INT32_MAX)
        return dsk_err("config: field 'max_position_embeddings' (%lld) exceeds 2^31-1",
                       (long long)c->max_seq_len);
    int hi_id = c->bos_token_id > c->eos_token_id ? c->bos_token_id : c->eos_token_id;
    hi_id = c->pad_token_id > hi_id ? c->pad_token_id : hi_id;
    if (hi_id >= c->vocab_size)
        return dsk_err("config: bos/eos/pad token id %d is outside the vocabulary (%d)", hi_id, c->vocab_size);
    if (check_ascending(c->kv_source_layers, c->n_kv_source_layers, "kv_source_layer_ids") ||
        check_ascending(c->index_source_layers, c->n_index_source_layers, "index_source_layer_ids") ||
        check_ascending(c->engram_layer_ids, c->n_engram_layers, "engram_layer_ids"))
        return -1;
    for (int l = c->n_layers; l < c->n_all_layers; l++)
        if (c->compress_ratios[l])
            return dsk_err("config: field 'compress_ratios'[%d] must be 0 (a DSpark stage never compresses)", l);

    for (int l = 0; l < c->n_all_layers; l++) {
        layer_role *r = &c->roles[l];
        memset(r, 0, sizeof *r);
        r->ratio = c->compress_ratios[l];
        r->kv_source = r->topk_source = -1;
        r->engram = l < c->n_layers ? in_list(c->engram_layer_ids, c->n_engram_layers, l) : -1;
        r->dspark_tap = l < c->n_layers && c->n_mtp_layers ? in_list(c->dspark_target_layer_ids,
                                                                     c->n_dspark_targets, l)
                                                           : -1;
        if (l >= c->n_layers) {
            r->mode = LAYER_DSPARK;
            continue;
        }
        r->is_kv_source = in_list(c->kv_source_layers, c->n_kv_source_layers, l) >= 0;
        r->is_index_source = in_list(c->index_source_layers, c->n_index_source_layers, l) >= 0;
        if (r->ratio == 0) {
            if (r->is_kv_source || r->is_index_source)
                return dsk_err("config: layer %d has compress ratio 0 but is listed in %s", l,
                               r->is_kv_source ? "kv_source_layer_ids" : "index_source_layer_ids");
            r->mode = LAYER_SWA;
            continue;
        }
        for (int s = l; s >= 0 && r->kv_source < 0; s--)
            if (in_list(c->kv_source_layers, c->n_kv_source_layers, s) >= 0)
                r->kv_source = s;
        for (int s = l; s >= 0 && r->topk_source < 0; s--)
            if (in_list(c->index_source_layers, c->n_index_source_layers, s) >= 0)
                r->topk_source = s;
        if (r->kv_source < 0)
            return dsk_err("config: layer %d (ratio %d) has no kv source at or before it in kv_source_layer_ids",
                           l, r->ratio);
        if (c->compress_ratios[r->kv_source] != r->ratio)
            return dsk_err("config: layer %d has ratio %d but its kv source %d has ratio %d (compress_ratios)", l,
                           r->ratio, r->kv_source, c->compress_ratios[r->kv_source]);
        if (r->topk_source < 0)
            return dsk_err("config: layer %d (ratio %d) has no index source at or before it in "
                           "index_source_layer_ids",
                           l, r->ratio);
        if (r->is_kv_source && !r->is_index_source)
            return dsk_err("config: layer %d is a kv source but not an index source (index_source_layer_ids)", l);
        if (r->topk_source < r->kv_source)
            return dsk_err("config: layer %d would reuse the top-k of layer %d, which indexes an older cache than "
                           "its kv source %d (index_source_layer_ids)",
                           l, r->topk_source, r->kv_source);
        r->is_candidate_source = l == c->candidate_source_layer;
        r->uses_candidates = r->is_index_source && c->candidate_source_layer >= 0 &&
                             c->candidate_source_layer < l;
        if (r->uses_candidates && c->roles[c->candidate_source_layer].kv_source != r->kv_source)
            return dsk_err("config: layer %d would mask its scores with candidates of layer %d, which indexes "
                           "another cache (candidate_source_layer_id)",
                           l, c->candidate_source_layer);
        r->mode = r->is_kv_source ? LAYER_FULL : r->is_index_source ? LAYER_REINDEX : LAYER_REUSE;
    }
    if (c->candidate_source_layer >= 0 && !c->roles[c->candidate_source_layer].is_index_source)
        return dsk_err("config: field 'candidate_source_layer_id' (%d) must name an index source layer",
                       c->candidate_source_layer);
    for (int i = 0; i < c->n_kv_source_layers; i++)
        if (!c->compress_ratios[c->kv_source_layers[i]])
            return dsk_err("config: kv source layer %d has compress ratio 0", c->kv_source_layers[i]);
    if (c->n_engram_layers > 0) {
        if (c->engram_head_dim % 32)
            return dsk_err("config: field 'engram_head_dim' (%d) must be a multiple of 32 (one e8m0 scale per "
                           "32 values)",
                           c->engram_head_dim);
        if (c->engram_pad_id >= c->vocab_size)
            return dsk_err("config: field 'engram_pad_token_id' (%d) is outside the vocabulary",
                           c->engram_pad_id);
        if (c->engram_compressed_vocab_size > c->vocab_size)
            return dsk_err("config: field 'engram_compressed_vocab_size' (%d) exceeds vocab_size (%d)",
                           c->engram_compressed_vocab_size, c->vocab_size);
    }
    if (c->n_mtp_layers > 0) {
        if (check_ascending(c->dspark_target_layer_ids, c->n_dspark_targets, "dspark_target_layer_ids"))
            return -1;
        if (c->dspark_noise_token_id >= c->vocab_size)
            return dsk_err("config: field 'dspark_noise_token_id' (%d) is outside the vocabulary",
                           c->dspark_noise_token_id);
        if (c->dspark_n_activated_experts > c->dspark_n_routed_experts)
            return dsk_err("config: field 'dspark_num_experts_per_tok' (%d) exceeds dspark_n_routed_experts (%d)",
                           c->dspark_n_activated_experts, c->dspark_n_routed_experts);
    }
    return 0;
}

int model_config_parse(const char *json_text, const char *name, model_config *out)
{
    json_error_t je;
    json_t *root = json_loads(json_text, 0, &je);
    if (!root)
        return dsk_err("%s: not valid JSON (line %d: %s)", name, je.line, je.text);
    int rc = -1;
    model_config c;
    memset(&c, 0, sizeof c);
    if (!json_is_object(root)) {
        dsk_err("%s: the top level must be a JSON object", name);
        goto done;
    }
    cfg_src top = {root, name};
    const json_t *tc = json_object_get(root, "text_config");
    char tname[512];
    snprintf(tname, sizeof tname, "%s: text_config", name);
    cfg_src text = {tc, tname};
    if (tc) {
        if (!json_is_object(tc)) {
            dsk_err("%s: field 'text_config' must be an object", name);
            goto done;
        }
        if (check_str(&top, "model_type", "deepseek_v41", 1) || check_str(&text, "model_type", "deepseek_v41_text", 0))
            goto done;
    } else {
        /* inference/config.json layout: the text fields sit at the top level */
        text.obj = root;
        text.name = name;
        const json_t *mt = json_object_get(root, "model_type");
        if (mt && !(json_is_string(mt) && (!strcmp(json_string_value(mt), "deepseek_v41") ||
                                           !strcmp(json_string_value(mt), "deepseek_v41_text")))) {
            dsk_err("%s: field 'model_type' must be \"deepseek_v41\"%s%s", name, json_is_string(mt) ? ", not " : "",
                    json_is_string(mt) ? json_string_value(mt) : "");
            goto done;
        }
    }
    if (read_top_level(&top, &c) || read_text(&text, &c))
        goto done;
    if (model_config_finish(&c)) {
        dsk_err_ctx("%s", name);
        goto done;
    }
    *out = c;
    rc = 0;
done:
    json_decref(root);
    return rc;
}

int model_config_load(const char *dir_or_file, model_config *out)
{
    struct stat st;
    char path[4096];
    if (stat(dir_or_file, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/config.json", dir_or_file);
    else
        snprintf(path, sizeof path, "%s", dir_or_file);
    char *text;
    size_t len;
    if (dsk_read_file_max(path, MODEL_CONFIG_MAX_BYTES, "model config", &text, &len))
        return dsk_err_ctx("reading the model config");
    int rc = model_config_parse(text, path, out);
    free(text);
    return rc;
}
