/* DeepSeek-V4.1-Flash configuration (model.md §1.1) read from a Hugging Face config.json, validated
 * field by field, and the per-layer role table it implies (model.md §1.2). Everything downstream
 * (schema, loader, forward, generator) reads the model's shape from here and nowhere else. */
#ifndef DSK_MODEL_CONFIG_H
#define DSK_MODEL_CONFIG_H

#include <stdint.h>

#define MODEL_MAX_LAYERS 64 /* backbone + DSpark stages */
#define MODEL_MAX_LIST 16   /* source / engram / dspark id lists */
#define MODEL_CONFIG_MAX_BYTES (1 << 20) /* of config.json (the real one: 2 KB) */

/* What a layer does with compressed KV ("CSA2" modes, model.md §1.2). */
typedef enum {
    LAYER_SWA,     /* ratio 0: window attention only */
    LAYER_FULL,    /* own compressor, index keys and indexer (kv source and index source) */
    LAYER_REUSE,   /* reads the last kv source's cache and the last index source's top-k */
    LAYER_REINDEX, /* own indexer query over the last kv source's index keys (candidate-masked) */
    LAYER_DSPARK,  /* a DSpark drafter stage (window attention over the main-KV ring) */
} layer_mode;

typedef struct {
    layer_mode mode;
    int ratio;               /* compress ratio r: 0 (none), 1 or 2 */
    int kv_source;           /* layer whose compressed KV and index keys this layer reads; -1 if r = 0 */
    int topk_source;         /* layer whose top-k selection this layer attends with; -1 if r = 0 */
    int is_kv_source;        /* runs the compressor and the index-key projection */
    int is_index_source;     /* runs the indexer query, scores and top-k */
    int is_candidate_source; /* publishes candidate blocks (layer 20); does not apply them itself */
    int uses_candidates;     /* index source after the candidate source: scores masked to candidates */
    int engram;              /* position in engram_layer_ids of the Engram run before this layer, or -1 */
    int dspark_tap;          /* position in dspark_target_layer_ids if the drafter taps this layer, or -1 */
} layer_role;

typedef struct {
    /* top level */
    int bos_token_id, eos_token_id, pad_token_id; /* 0, 1, 2 */
    int image_token_id;                           /* 129264 */
    char quant_method[16];                        /* quantization_config.quant_method ("exl3"; "" if none) */

    /* trunk */
    int vocab_size;    /* V: 129280 */
    int dim;           /* d: hidden_size 5120 */
    int n_layers;      /* backbone layers L: 40 */
    int n_heads;       /* 64 */
    int head_dim;      /* 512: the single shared KV head has the same width */
    int rope_head_dim; /* R: 64 rotated dims at the end of each vector */
    int q_lora_rank;   /* 1280 */
    int o_lora_rank;   /* 1024: output width of one wo_a group */
    int o_groups;      /* 8 head groups of wo_a */
    float swiglu_limit;   /* 10 */
    float norm_eps;       /* 1e-20, every RMSNorm and the mHC mixes */
    int64_t max_seq_len;  /* max_position_embeddings: the context limit */

    /* RoPE (model.md §3.5) */
    double rope_theta;          /* 10000: ratio-0 layers and DSpark, no YaRN */
    double compress_rope_theta; /* 160000: ratio > 0 layers, with YaRN */
    double rope_factor;         /* YaRN factor 16 (0: no YaRN) */
    double beta_fast, beta_slow;   /* 32, 1 */
    int64_t original_seq_len;      /* 65536 (0: no YaRN) */

    /* MoE (model.md §3.7) */
    int moe_inter_dim;       /* 2304 */
    int n_routed_experts;    /* 384 */
    int n_shared_experts;    /* 1 (the only supported value) */
    int n_activated_experts; /* 6 */
    float route_scale;       /* 1.5 */
    int norm_topk_prob;      /* 1 */

    /* attention and CSA2 (model.md §3.5) */
    int window_size;                           /* 128 */
    int n_compress_ratios;                     /* n_layers + n_mtp_layers */
    int compress_ratios[MODEL_MAX_LAYERS];     /* per layer, MTP stages last (all 0) */
    int n_kv_source_layers;
    int kv_source_layers[MODEL_MAX_LIST];      /* ascending */
    int n_index_source_layers;
    int index_source_layers[MODEL_MAX_LIST];   /* ascending */
    int index_n_heads;        /* 32 */
    int index_head_dim;       /* 128 */
    int index_topk;           /* 512 */
    int candidate_source_layer; /* 20; -1: none */
    int candidate_topk_blocks;  /* 2048 */
    int candidate_block_size;   /* 8 */

    /* mHC (model.md §3.4) */
    int hc_mult;           /* 4 streams */
    int hc_sinkhorn_iters; /* 20 */
    float hc_eps;          /* 1e-6 */

    /* Engram (model.md §3.3) */
    int n_engram_layers;
    int engram_layer_ids[MODEL_MAX_LIST];          /* Engram runs before these layers */
    int64_t engram_num_embeddings[MODEL_MAX_LIST]; /* table rows per Engram layer */
    int engram_max_ngram_size;        /* 4: orders 2..4, i.e. 3 hashed orders */
    int64_t engram_vocab_size;        /* 16000000: the first prime candidate */
    int engram_n_heads;               /* 8 */
    int engram_head_dim;              /* 256: one table row */
    int engram_pad_id;                /* 2 */
    int engram_compressed_vocab_size; /* 99092 */

    /* DSpark drafter (model.md §3.9) */
    int n_mtp_layers;            /* 3 stages */
    int dspark_block_size;       /* 5 draft tokens */
    int dspark_noise_token_id;   /* 128799 */
    int n_dspark_targets;
    int dspark_target_layer_ids[MODEL_MAX_LIST]; /* ascending, distinct */
    int dspark_markov_rank;         /* 256 */
    int dspark_n_routed_experts;    /* 128 */
    int dspark_n_activated_experts; /* 3 */

    /* derived */
    int n_all_layers;                    /* n_layers + n_mtp_layers */
    layer_role roles[MODEL_MAX_LAYERS];  /* per layer, DSpark stages at n_layers.. */
} model_config;

/* Read and validate config.json (a file, or a folder holding one); derives the role table. An unknown
 * model_type, a list of the wrong length or an impossible value is an error naming the field. */
int model_config_load(const char *dir_or_file, model_config *out);
/* The same from the JSON text itself (name is used in messages). */
int model_config_parse(const char *json_text, const char *name, model_config *out);
/* Validate the fields already in *c and fill the role table: what model_config_parse ends with, for
 * callers that build a config by hand (test presets). */
int model_config_finish(model_config *c);

/* Helpers for the shapes that follow from the config. */
static inline int model_hc_mix_dim(const model_config *c) /* mixes per token: pre, post, comb */
{
    return (2 + c->hc_mult) * c->hc_mult;
}
static inline int model_engram_cols(const model_config *c) /* hashed (order, head) columns */
{
    return (c->engram_max_ngram_size - 1) * c->engram_n_heads;
}
static inline const char *layer_mode_name(layer_mode m)
{
    static const char *const names[] = {"SWA", "Full", "Reuse", "Reindex", "DSpark"};
    return names[m];
}

#endif
