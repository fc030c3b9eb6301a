/* The forward pass's building blocks (model.md §3.3-§3.7), shared by the backbone and the DSpark stages.
 * Each works on rows of one forward call; a row's result never depends on the other rows, which is what
 * makes every mode give the same bits (docs/model.md "Modes"). */
#ifndef DSK_MODEL_OPS_H
#define DSK_MODEL_OPS_H

#include "runtime/model/model.h"
#include "runtime/ref/ref_ops.h"

/* mHC coefficients of one sublayer for one row (model.md §3.4): x = the hc streams [hc][d] bf16. */
typedef struct {
    float pre[16];      /* [hc] */
    float post[16];     /* [hc] */
    float comb[16 * 16]; /* [hc][hc]: row i = source stream, column j = destination */
} hc_coeffs;

/* mixes(X) then pre, post and the Sinkhorn-normalised comb; sub = 0 attn, 1 ffn. */
void hc_mixes(const model_config *c, const block_weights *b, int sub, const uint16_t *x, hc_coeffs *out);
/* Sinkhorn of §3.4 in place on comb [hc][hc] holding the scaled logits (softmax rows first). */
void hc_sinkhorn(float *comb, int hc, int iters, float eps);
/* y[d] = bf16(Σ_i w_i x_i[d]), streams summed in order. */
void hc_pre(const uint16_t *x, const float *w, int hc, int d, uint16_t *y);
/* x_j ← bf16(post_j·y + Σ_i comb_ij x_i) for every stream j (out may not alias x). */
void hc_post(const uint16_t *y, const uint16_t *x, const hc_coeffs *k, int hc, int d, uint16_t *out);

/* RoPE tables for one layer kind: ratio 0 / DSpark use rope_theta without YaRN, ratio > 0 layers
 * compress_rope_theta with YaRN. */
rope_params model_rope(const model_config *c, int ratio);
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

/* The query path of attention: q_lat = q_norm(wq_a x) [n][q_lora] and Q = RoPE(wq_b q_lat) [n][H][hd]. */
int attn_query(const model_config *c, const block_weights *b, const uint16_t *xn, int n, const float *rope,
               uint16_t *q_lat, uint16_t *q);
/* A window key: RoPE(kv_norm(wkv x)) then FP8 QDQ, [n][hd]. */
int attn_window_keys(const model_config *c, const block_weights *b, const uint16_t *xn, int n, const float *rope,
                     uint16_t *kv);
/* The output path: inverse RoPE of o [n][H][hd] in place, grouped wo_a, wo_b -> out [n][d] bf16. */
int attn_output(const model_config *c, const block_weights *b, uint16_t *o, int n, const float *rope, uint16_t *out);
/* Attention of backbone layer l over the rows of a call (window + compressed rows, model.md §3.5). */
int attention_layer(const model *m, model_state *s, fwd_call *f, int l, const uint16_t *xn, uint16_t *out);
/* sqrt(softplus(x)), softplus linear above 20 as in PyTorch. */
float moe_sqrtsoftplus(float x);
/* Routing of one row from the gate logits [E]: top n_active of score + bias (ties to the lower id) in
 * ascending id, weights route_scale · s / (Σ s + 1e-20) from the unbiased scores. Returns the count. */
int moe_route(const model_config *c, const block_weights *b, const float *logits, int32_t *ids, float *weights);
/* MoE of one block over n rows of ffn_norm output: out bf16 [n][d]. */
int moe_rows(const model *m, const block_weights *b, const uint16_t *x, int n, uint16_t *out);
/* Engram before layer l for the call's rows: updates the streams X [n][hc][d] in place. */
int engram_rows(const model *m, const model_state *s, int l, int64_t pos0, int n, uint16_t *X);

/* Sparse attention of one query row with sink (model.md §3.5, dskit's canonical order): q [H][hd],
 * keys[i] -> the i-th entry of the compacted list, in list order; out [H][hd] bf16. */
void sparse_attention_row(const uint16_t *q, int heads, int hd, const uint16_t *const *keys, int n_keys,
                          const float *sink, uint16_t *out);

#endif
