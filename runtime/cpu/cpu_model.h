/* The DeepSeek-V4.1-Flash CPU reference: weights bound from a checkpoint (mapped, not copied), the
 * per-sequence state, and the forward pass of model.md §2-§3 with REF's rounding points. One forward
 * call runs any number of rows at the positions that follow the committed ones, so prefill, chunked
 * prefill, decode and verify windows are the same computation (docs/model.md "Modes"). */
#ifndef DSK_CPU_MODEL_H
#define DSK_CPU_MODEL_H

#include "runtime/model/config.h"
#include "runtime/model/engram_layout.h"
#include "runtime/cpu/linear.h"
#include "runtime/cpu/vision_tower.h"
#include "runtime/engram/engram_store.h"
#include "runtime/engine/xchg.h"
#include "runtime/weights/safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* Weights of one Block: a backbone layer or a DSpark stage. Widths: d = dim, hd = head_dim,
 * H = n_heads, E = routed experts of this block, I = moe_inter_dim, M = (2 + hc)·hc. */
typedef struct {
    const uint16_t *attn_norm, *ffn_norm; /* [d] bf16 */
    cpu_linear wq_a;                    /* d -> q_lora */
    const uint16_t *q_norm;               /* [q_lora] */
    cpu_linear wq_b;                    /* q_lora -> H·hd */
    cpu_linear wkv;                     /* d -> hd */
    const uint16_t *kv_norm;              /* [hd] */
    cpu_linear wo_a;                    /* grouped: H·hd/o_groups -> o_groups·o_lora */
    cpu_linear wo_b;                    /* o_groups·o_lora -> d */
    const float *attn_sink;               /* [H] */
    const float *hc_fn[2];                /* [M][hc·d], attn then ffn */
    const float *hc_base[2];              /* [M] */
    const float *hc_scale[2];             /* [3] */
    int n_experts, n_active;              /* E, experts per token */
    const uint16_t *gate;                 /* [E][d] bf16 */
    const float *gate_bias;               /* [E] */
    const float *gate_bias_vl;            /* [E] in place of gate_bias for image positions (backbone only) */
    cpu_linear sh_w1, sh_w3, sh_w2;     /* shared expert: d -> I, d -> I, I -> d */
    cpu_linear *w1, *w3, *w2;           /* [E] routed experts */
    /* kv source */
    cpu_linear c_wkv, c_wgate;          /* d -> hd (wgate: ratio 2 only) */
    const uint16_t *c_norm;               /* [hd] */
    cpu_linear ix_wk;                   /* hd -> index_head_dim */
    const uint16_t *ix_k_norm;            /* [index_head_dim] */
    /* index source */
    cpu_linear ix_wq_b;                 /* q_lora -> index_n_heads·index_head_dim */
    const uint16_t *ix_wproj;             /* [index_n_heads][d] bf16 */
    /* Engram before this layer */
    cpu_linear eg_wkv;                  /* cols·engram_head_dim -> (hc + 1)·d */
    float *eg_w;                          /* [hc][d] fp32 q_weight ⊙ k_weight (owned) */
} block_weights;

typedef struct {
    model_config cfg;
    st_set *st;                 /* the mapped checkpoint */
    const uint16_t *embed;      /* [V][d] bf16 */
    cpu_linear head;          /* d -> V */
    const uint16_t *norm;       /* [d] final norm */
    block_weights *blocks;      /* [n_all_layers]: backbone layers, then DSpark stages */
    engram_layout engram;       /* primes, offsets, multipliers, pad */
    const int32_t *token_map;   /* [V] token -> Engram compressed id */
    /* DSpark (first and last stage's extras) */
    cpu_linear main_proj;     /* n_targets·d -> d */
    const uint16_t *main_norm;  /* [d] */
    const uint16_t *mtp_norm;   /* [d] */
    const uint16_t *markov_embed; /* [V][markov_rank] bf16 */
    const uint16_t *markov_head;  /* [V][markov_rank] bf16 */
    uint16_t *markov_head_t;      /* [markov_rank][V] the same transposed (owned) */
    const uint16_t *confidence;   /* [d + markov_rank] bf16 */
    vision_weights vision;      /* the tower (cfg.vision_n_layers > 0) */
    vision_block_weights *vision_blocks; /* [vision_n_layers] (owned) */
    rank_xchg *xchg;            /* tensor parallelism: this rank and its exchanges (rank_xchg_single: tp 1) */
    engram_source eg_src;       /* the checkpoint's Engram tables (pointing into st) */
    engram_store *eg;           /* where their rows come from (host mapping or packed files) */
    int eg_timeout_ms;          /* how long a forward waits for a layer's rows */
    void **owned;               /* buffers the model owns (converted norms, realigned tensors) */
    int n_owned;
    size_t cache_bytes;         /* decoded EXL3 weights held */
    /* Tests only (teacher forcing, layer-by-layer comparisons): called in every block with its streams
     * [n][hc][d] and π [n][hc] (NULL after attention), which it may read or overwrite. */
    void (*layer_hook)(void *ctx, int layer, int stage, uint16_t *X, float *pi, int n);
    void *layer_ctx;
    /* Tests only: an index source's choices for each row of a forward, with layer_ctx: its indexer scores
     * over the reach (after the candidate mask), the top-k it kept (k ascending rows), and on the candidate
     * source its kept blocks (cand_n ascending; cand NULL elsewhere) */
    void (*index_hook)(void *ctx, int layer, int row, const float *score, int64_t reach, const int32_t *sel, int k,
                       const int32_t *cand, int cand_n);
    uint32_t *expert_hits;      /* optional diagnostic set by the caller: [n_all_layers][4096] routed-expert
                                   selections, counted by every forward (not thread-safe across sequences) */
} cpu_model;

/* CPU_HOOK_ROUTE: a backbone layer's MoE router logits, fp32 [n][n_experts] in pi (X NULL), before the selection */
enum { CPU_HOOK_BLOCK_IN, CPU_HOOK_ATTN_OUT, CPU_HOOK_BLOCK_OUT, CPU_HOOK_ROUTE };

/* Open a model folder (config.json + safetensors). Every tensor of the schema must be present with its
 * shape and dtype; an error names the tensor. cache_budget: bytes of decoded EXL3 weights to keep
 * (small matrices first; the rest are decoded per call). */
int cpu_model_load(const char *dir, size_t cache_budget, cpu_model **out);
/* Serve Engram rows from placement ("host": the mapped checkpoint; "nvme:DIR": packed files read with
 * libaio, docs/engram.md) with a hot-row cache of cache_bytes; a forward waits at most timeout_ms for a
 * layer's rows. cpu_model_load opens "host" with no cache; this replaces it. */
int cpu_model_engram(cpu_model *m, const char *dir, const char *placement, size_t cache_bytes, int timeout_ms);
void cpu_model_free(cpu_model *m);

/* Per-sequence state. Window rings hold ring = window + spare slots, spare = cpu_rollback_spare(cfg), so
 * rolling back up to spare rows past the highest position run never loses a slot a later query needs
 * (the caller, runtime/engine, refuses more); every other store is indexed by position. Rolling back is
 * therefore just lowering len. */
typedef struct {
    int64_t cap;        /* context limit in positions */
    int64_t len;        /* committed positions */
    int ring;           /* window ring slots */
    int32_t *tokens;    /* [cap] token ids (Engram's n-gram history) */
    int32_t *cids;      /* [cap] their Engram compressed ids */
    uint16_t **win;     /* [layer][ring][hd] window KV after RoPE and FP8 QDQ */
    float **cmp_as;     /* [layer][ring][2][hd] ratio-2 compressor a_t, s_t (kv sources) */
    uint16_t **ckv;     /* [layer][rows][hd] compressed KV after RoPE and FP4 QDQ (kv sources) */
    uint16_t **ikv;     /* [layer][rows][index_head_dim] index keys (kv sources) */
    int64_t *rows_cap;  /* [layer] rows allocated in ckv / ikv */
    uint16_t **dwin;    /* [stage][ring][hd] DSpark main-KV rings */
    int64_t draft_len;  /* positions whose main KV is in the DSpark rings */
    uint16_t *m_last;   /* [d] DSpark m = main_norm(main_proj(H)) at draft_len - 1 */
    struct cpu_span *spans; /* image spans placed at positions (cpu_seq_image) */
    int n_spans;
} cpu_seq;

/* One image's LM input rows at positions [pos, pos + n) (vision.md §3.8). */
typedef struct cpu_span {
    int64_t pos, n;
    uint16_t *rows; /* [n][dim] bf16 */
} cpu_span;

int cpu_seq_new(const cpu_model *m, int64_t cap, cpu_seq **out);
/* Rows a sequence may roll back: a whole verify window (t0 + dspark_block_size drafts), at least 8. */
int cpu_rollback_spare(const model_config *c);
void cpu_seq_free(cpu_seq *s);

/* Run the tower on one image's patches [n_vit_h·n_vit_w][3p²] (bf16, REF's rounding points) and place its
 * span at positions [pos, pos + span) of s: a forward then gives those rows the span's embeddings, bias_vl
 * routing and no Engram. Spans may not overlap. */
int cpu_seq_image(const cpu_model *m, cpu_seq *s, int64_t pos, const uint16_t *patches, int n_vit_h, int n_vit_w);
/* Drop the spans that start at or after pos (a roll back below them). */
void cpu_seq_drop_images(cpu_seq *s, int64_t pos);

/* Run rows tokens[0..n) at positions s->len .. s->len + n - 1: their KV, compressed rows and index keys
 * enter the state (s->len is not advanced: commit with s->len += accepted). logits (may be NULL) gets
 * rows [logits_from, n) × V fp32; taps (may be NULL) gets each row's DSpark hidden H [n][n_targets·d].
 * Refuses, without touching the state, to run past the context limit. */
int cpu_forward(const cpu_model *m, cpu_seq *s, const int32_t *tokens, int n, int logits_from, float *logits,
                  uint16_t *taps);

/* DSpark: enter the main KV of positions s->draft_len .. draft_len + n - 1 from their taps H [n][n_targets·d]
 * (positions must be committed), and keep m of the last one. */
int cpu_draft_feed(const cpu_model *m, cpu_seq *s, const uint16_t *taps, int n);
/* DSpark: draft block_size tokens after t0 (the token at position draft_len); sample() chooses each
 * draft from its logits. drafts[block], conf[block] (may be NULL). */
typedef int32_t (*draft_sampler)(const float *logits, int vocab, int64_t pos, void *ctx);
int cpu_draft(const cpu_model *m, cpu_seq *s, int32_t t0, draft_sampler sample, void *ctx, int32_t *drafts,
                float *conf);

#endif
