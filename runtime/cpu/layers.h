/* The forward pass's building blocks (model.md §3.3-§3.7), shared by the backbone and the DSpark stages.
 * Each works on rows of one forward call; a row's result never depends on the other rows, which is what
 * makes every mode give the same bits (docs/model.md "Modes"). */
#ifndef DSK_CPU_LAYERS_H
#define DSK_CPU_LAYERS_H

#include "runtime/cpu/cpu_model.h"
#include "runtime/ref/kvquant.h"
#include "runtime/ref/mhc.h"
#include "runtime/ref/moe_route.h"
#include "runtime/ref/rmsnorm.h"
#include "runtime/ref/rope.h"
#include "runtime/ref/rowmm.h"
#include "runtime/ref/sparse_attn.h"
#include "runtime/ref/topk.h"

/* cos/sin rows for positions pos[0..n) (a table of n rows, row i for pos[i]; malloc'd). */
int rope_rows(const rope_params *p, const int64_t *pos, int n, float **table);
/* RoPE on the last rope_dim dims of n rows of `heads` vectors of `width`, row i by table row i. */
void rope_apply_rows(uint16_t *x, int n, int heads, int width, int rope_dim, const float *table, int inverse);

/* What one forward call publishes between its layers (model.md §1.2: one shared slot each for top-k
 * and candidates): per index-source layer, each row's selected compressed rows, and the candidate
 * source's kept blocks per row. */
typedef struct {
    int n;               /* rows of the call */
    int64_t pos0;        /* position of row 0 */
    int32_t *topk[MODEL_MAX_LAYERS];   /* [layer][n][index_topk] ascending compressed rows */
    int *topk_n[MODEL_MAX_LAYERS];     /* [layer][n] how many */
    int32_t *cand;       /* [n][candidate_topk_blocks] kept blocks, ascending */
    int *cand_n;         /* [n] */
} fwd_call;

/* What this rank computes of what tensor parallelism splits (model.md §6, docs/ranks.md): heads [h0, h1)
 * and their wo_a groups [g0, g1), head vocabulary rows [v0, v1), block b's routed experts [e0, e1)
 * (b may be NULL). tp = 1: everything. */
typedef struct {
    int h0, h1, g0, g1, v0, v1, e0, e1;
} cpu_split;
cpu_split cpu_rank_split(const cpu_model *m, const block_weights *b);

/* The query path of attention: q_lat = q_norm(wq_a x) [n][q_lora] and Q = RoPE(wq_b q_lat) [n][heads][hd] of
 * this rank's heads. */
int attn_query(const cpu_model *m, const block_weights *b, const uint16_t *xn, int n, const float *rope,
               uint16_t *q_lat, uint16_t *q);
/* A window key: RoPE(kv_norm(wkv x)) then FP8 QDQ, [n][hd]. */
int attn_window_keys(const model_config *c, const block_weights *b, const uint16_t *xn, int n, const float *rope,
                     uint16_t *kv);
/* The output path: inverse RoPE of o [n][this rank's heads][hd] in place, grouped wo_a of its groups, its
 * share of wo_b summed over the ranks -> out [n][d] bf16. */
int attn_output(const cpu_model *m, const block_weights *b, uint16_t *o, int n, const float *rope, uint16_t *out);
/* Attention of backbone layer l over the rows of a call (window + compressed rows, model.md §3.5). */
int attention_layer(const cpu_model *m, cpu_seq *s, fwd_call *f, int l, const uint16_t *xn, uint16_t *out);
/* MoE of one block over n rows of ffn_norm output: out bf16 [n][d]. */
int moe_rows(const cpu_model *m, const block_weights *b, const uint16_t *x, int n, uint16_t *out);
/* Engram before layer l for the call's rows from their table records ([n][cols] records of the rows
 * engram_hash gives, in that order): updates the streams X [n][hc][d] in place. */
int engram_rows(const cpu_model *m, int l, int n, const uint8_t *records, uint16_t *X);

#endif
