/* The config.json of each `dskit mkmodel` preset: model.md §7.1 (tiny) and §7.2 (one full-width layer,
 * variants A, B, C). Written in the Hugging Face layout of §1.1; the generator then reads it back with
 * the model's own parser, so the checkpoint is shaped by exactly what the loader will see. */
#include "runtime/common/error.h"
#include "runtime/model/engram_layout.h"
#include "runtime/mkmodel/mkmodel.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXL 12 /* longest id list of a preset */

/* The fields in which presets differ; everything else is the release's value (model.md §1.1). */
typedef struct {
    const char *name;
    const char *summary;
    int dim, n_layers, n_heads, head_dim, rope_dim, q_lora, o_groups, o_lora, window;
    int n_ratios, ratios[MAXL]; /* n_layers + n_mtp entries, DSpark stages last */
    int n_kv, kv[MAXL], n_idx, idx[MAXL], cand_source, cand_blocks, cand_block_size;
    int idx_heads, idx_head_dim, idx_topk;
    int experts, experts_per_tok, inter;
    int n_engram, engram[MAXL], engram_heads, engram_head_dim, engram_cv;
    int64_t engram_vocab;
    int n_mtp, n_targets, targets[MAXL], markov_rank, dspark_experts, dspark_per_tok;
    int vision; /* 1: vision.md §5's tiny tower (vision_config); 2: the release's tower (§3.1); 0: text-only */
} preset;

/* Full width of §7.2: the release's per-layer sizes, the Engram table cut to engram_vocab_size 10^6
 * (24 × ~10^6 rows, 6.3 GB) and the token map id mod 99092 (the release's compressed size). */
#define FULL_WIDTH                                                                                     \
    .dim = 5120, .n_heads = 64, .head_dim = 512, .rope_dim = 64, .q_lora = 1280, .o_groups = 8,        \
    .o_lora = 1024, .window = 128, .cand_blocks = 2048, .cand_block_size = 8, .idx_heads = 32,         \
    .idx_head_dim = 128, .idx_topk = 512, .experts = 384, .experts_per_tok = 6, .inter = 2304,          \
    .engram_heads = 8, .engram_head_dim = 256, .engram_cv = 99092, .engram_vocab = 1000000, .n_mtp = 1, \
    .markov_rank = 256, .dspark_experts = 128, .dspark_per_tok = 3

/* model.md §7.1, shared by tiny and tiny-vision (which adds the tower and nothing else: vision.md §5). */
#define TINY_LM .dim = 128, .n_layers = 8, .n_heads = 8, .head_dim = 128, .rope_dim = 32, .q_lora = 128, .o_groups = 4, \
   .o_lora = 128, .window = 8, \
   .n_ratios = 9, .ratios = {0, 0, 2, 2, 1, 1, 1, 1, 0}, \
   .n_kv = 2, .kv = {2, 4}, .n_idx = 3, .idx = {2, 4, 6}, .cand_source = 4, .cand_blocks = 3, \
   .cand_block_size = 2, .idx_heads = 4, .idx_head_dim = 128, .idx_topk = 4, \
   .experts = 8, .experts_per_tok = 3, .inter = 128, \
   .n_engram = 2, .engram = {1, 2}, .engram_heads = 4, .engram_head_dim = 32, .engram_cv = 1000, \
   .engram_vocab = 32, \
   .n_mtp = 1, .n_targets = 3, .targets = {5, 6, 7}, .markov_rank = 128, .dspark_experts = 4, \
   .dspark_per_tok = 2

static const preset presets[] = {
    {
        .name = "tiny",
        .summary = "model.md §7.1: 8 layers (SWA, SWA, Full r2, Reuse r2, Full r1 + candidates, Reuse, "
                   "Reindex, Reuse), Engram before 1 and 2, one DSpark stage, real vocabulary",
        TINY_LM,
    },
    {
        .name = "tiny-vision",
        .summary = "tiny plus vision.md §5's tower: 2 ViT blocks (dim 64, 4 heads, patch 4), the 3x3 "
                   "aligner, at most 32 positions an image; vision weights from §6's formula",
        TINY_LM, .vision = 1,
    },
    {
        .name = "layer-a",
        .summary = "model.md §7.2 A: one Full ratio-1 layer that is its own candidate source, Engram before "
                   "it, one DSpark stage (main_proj 5120 wide: one tapped layer)",
        FULL_WIDTH, .n_layers = 1, .n_ratios = 2, .ratios = {1, 0}, .n_kv = 1, .kv = {0}, .n_idx = 1,
        .idx = {0}, .cand_source = 0, .n_engram = 1, .engram = {0}, .n_targets = 1, .targets = {0},
    },
    {
        .name = "layer-b",
        .summary = "model.md §7.2 B: one Full ratio-2 layer (encoder source, no candidates, no Engram), one "
                   "DSpark stage (main_proj 5120 wide)",
        FULL_WIDTH, .n_layers = 1, .n_ratios = 2, .ratios = {2, 0}, .n_kv = 1, .kv = {0}, .n_idx = 1,
        .idx = {0}, .cand_source = -1, .n_engram = 0, .n_targets = 1, .targets = {0},
    },
    {
        .name = "layer-c",
        .summary = "model.md §7.2 C plus one Reuse layer: Full r1 + candidates, Reindex, Reuse; no Engram; "
                   "one DSpark stage tapping all three (the real 15360-wide main_proj)",
        FULL_WIDTH, .n_layers = 3, .n_ratios = 4, .ratios = {1, 1, 1, 0}, .n_kv = 1, .kv = {0}, .n_idx = 2,
        .idx = {0, 1}, .cand_source = 0, .n_engram = 0, .n_targets = 3, .targets = {0, 1, 2},
    },
    {
        .name = "layer-vision",
        .summary = "layer-b plus the release's vision tower (vision.md §3.1: 32 ViT blocks of width 1024, 16 "
                   "heads, patch 14, the 3x3 aligner into 5120, 1024 positions an image): the tower's speed",
        FULL_WIDTH, .n_layers = 1, .n_ratios = 2, .ratios = {2, 0}, .n_kv = 1, .kv = {0}, .n_idx = 1,
        .idx = {0}, .cand_source = -1, .n_engram = 0, .n_targets = 1, .targets = {0}, .vision = 2,
    },
};

static const preset *find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, name))
            return &presets[i];
    return NULL;
}

const char *mkmodel_preset_name(int i)
{
    return i >= 0 && (size_t)i < sizeof presets / sizeof presets[0] ? presets[i].name : NULL;
}

const char *mkmodel_preset_names(void)
{
    static char list[256]; /* the table's names, joined once */
    if (!list[0])
        for (int i = 0; mkmodel_preset_name(i); i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", mkmodel_preset_name(i));
    return list;
}

const char *mkmodel_preset_summary(const char *name)
{
    const preset *p = find_preset(name);
    return p ? p->summary : NULL;
}

static json_t *int_list(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *text_config(const preset *p)
{
    int64_t rows[MAXL] = {0};
    engram_layout lay;
    if (p->n_engram && engram_layout_init(&lay, p->engram, p->n_engram, 4, p->engram_heads, p->engram_vocab))
        return NULL;
    json_t *num = json_array();
    for (int i = 0; num && i < p->n_engram; i++) {
        rows[i] = lay.rows[i];
        json_array_append_new(num, json_integer(rows[i]));
    }
    json_t *t = json_pack(
        "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f, s:I, s:f,"
        " s:{s:s, s:f, s:f, s:f, s:I}, s:f}",
        "model_type", "deepseek_v41_text", "vocab_size", 129280, "hidden_size", p->dim, "num_hidden_layers",
        p->n_layers, "num_attention_heads", p->n_heads, "num_key_value_heads", 1, "head_dim", p->head_dim,
        "qk_rope_head_dim", p->rope_dim, "q_lora_rank", p->q_lora, "o_lora_rank", p->o_lora, "o_groups",
        p->o_groups, "hidden_act", "silu", "swiglu_limit", 10.0, "rms_norm_eps", 1e-20,
        "max_position_embeddings", (json_int_t)1048576, "rope_theta", 10000.0, "rope_scaling", "rope_type",
        "yarn", "factor", 16.0, "beta_fast", 32.0, "beta_slow", 1.0, "original_max_position_embeddings",
        (json_int_t)65536, "compress_rope_theta", 160000.0);
    json_t *moe = json_pack("{s:i, s:i, s:i, s:i, s:s, s:s, s:b, s:f, s:i}", "moe_intermediate_size", p->inter,
                            "n_routed_experts", p->experts, "n_shared_experts", 1, "num_experts_per_tok",
                            p->experts_per_tok, "scoring_func", "sqrtsoftplus", "topk_method", "noaux_tc",
                            "norm_topk_prob", 1, "routed_scaling_factor", 1.5, "sliding_window", p->window);
    json_t *csa = json_pack("{s:o, s:o, s:o, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f}", "compress_ratios",
                            int_list(p->ratios, p->n_ratios), "kv_source_layer_ids", int_list(p->kv, p->n_kv),
                            "index_source_layer_ids", int_list(p->idx, p->n_idx), "index_n_heads",
                            p->idx_heads, "index_head_dim", p->idx_head_dim, "index_topk", p->idx_topk,
                            "candidate_source_layer_id", p->cand_source, "candidate_topk_blocks",
                            p->cand_blocks, "candidate_block_size", p->cand_block_size, "hc_mult", 4,
                            "hc_sinkhorn_iters", 20, "hc_eps", 1e-6);
    json_t *eng = json_pack("{s:o, s:o, s:i, s:I, s:i, s:i, s:i, s:i}", "engram_layer_ids",
                            int_list(p->engram, p->n_engram), "engram_num_embeddings", num ? num : json_null(),
                            "engram_max_ngram_size", 4, "engram_vocab_size", (json_int_t)p->engram_vocab,
                            "engram_n_heads", p->engram_heads, "engram_head_dim", p->engram_head_dim,
                            "engram_pad_token_id", 2, "engram_compressed_vocab_size", p->engram_cv);
    json_t *mtp = json_pack("{s:i, s:i, s:i, s:o, s:i, s:i, s:i}", "num_nextn_predict_layers", p->n_mtp,
                            "dspark_block_size", 5, "dspark_noise_token_id", 128799, "dspark_target_layer_ids",
                            int_list(p->targets, p->n_targets), "dspark_markov_rank", p->markov_rank,
                            "dspark_n_routed_experts", p->dspark_experts, "dspark_num_experts_per_tok",
                            p->dspark_per_tok);
    int bad = !t || !moe || !csa || !eng || !mtp || json_object_update(t, moe) || json_object_update(t, csa) ||
              json_object_update(t, eng) || json_object_update(t, mtp);
    json_decref(moe);
    json_decref(csa);
    json_decref(eng);
    json_decref(mtp);
    if (bad) {
        json_decref(t);
        dsk_err("mkmodel: cannot build the text_config of preset %s", p->name);
        return NULL;
    }
    return t;
}

/* vision.md §5 for tiny-vision, §3.1 (the release) for layer-vision (max_wh_ratio null as released);
 * num_hidden_layers 0 otherwise. */
static json_t *vision_config(const preset *p)
{
    if (!p->vision)
        return json_pack("{s:s, s:i}", "model_type", "deepseek_v41_vision", "num_hidden_layers", 0);
    if (p->vision == 2)
        return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:n, s:f}", "model_type",
                         "deepseek_v41_vision", "num_hidden_layers", 32, "hidden_size", 1024, "num_attention_heads", 16,
                         "intermediate_size", 2816, "patch_size", 14, "downsample_ratio", 3, "max_image_tokens", 1024,
                         "min_pixels", (json_int_t)295936, "max_wh_ratio", "rope_theta", 10000.0);
    return json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:n, s:f}", "model_type", "deepseek_v41_vision",
                     "num_hidden_layers", 2, "hidden_size", 64, "num_attention_heads", 4, "intermediate_size", 96,
                     "patch_size", 4, "downsample_ratio", 3, "max_image_tokens", 32, "min_pixels", 1024,
                     "max_wh_ratio", "rope_theta", 10000.0);
}

int mkmodel_preset_config(const char *name, const char *codebook, uint64_t seed, char **json_text)
{
    const preset *p = find_preset(name);
    if (!p)
        return dsk_err("mkmodel: unknown preset '%s' (presets: %s)", name, mkmodel_preset_names());
    json_t *text = text_config(p);
    if (!text)
        return dsk_err_ctx("preset %s", name);
    json_t *root = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:b, s:{s:s, s:s, s:s, s:i}, s:o,"
                             " s:o, s:{s:s, s:I}}",
                             "architectures", "DeepseekV41ForCausalLM", "model_type", "deepseek_v41",
                             "bos_token_id", 0, "eos_token_id", 1, "pad_token_id", 2, "image_token_id", 129264,
                             "tie_word_embeddings", 0, "quantization_config", "quant_method", "exl3", "version",
                             "dskit-mkmodel", "codebook", codebook, "head_bits", 6, "text_config", text,
                             "vision_config", vision_config(p), "dskit_synthetic", "preset", name, "seed",
                             (json_int_t)seed);
    if (!root)
        return dsk_err("mkmodel: cannot build config.json of preset %s", name);
    *json_text = json_dumps(root, JSON_INDENT(2));
    json_decref(root);
    if (!*json_text)
        return dsk_err("mkmodel: cannot serialize config.json of preset %s", name);
    return 0;
}
