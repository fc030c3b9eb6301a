/* One Block with single-pass mHC (model.md §3.4), shared by the backbone and the DSpark stages, which
 * differ only in their attention. Internal to the CPU model. */
#ifndef DSK_CPU_BLOCK_H
#define DSK_CPU_BLOCK_H

#include "runtime/cpu/layers.h"

/* Attention of block l: xn = attn_norm(hc_pre) [n][d] -> out [n][d] bf16. */
typedef int (*attention_fn)(const cpu_model *m, int l, const uint16_t *xn, int n, uint16_t *out, void *ctx);

typedef struct {
    cpu_seq *s;
    fwd_call f;
} fwd_ctx;

/* (X, π) ← Block_l(X, π) for n rows: X [n][hc][d] bf16 streams, π [n][hc] the previous block's ffn pre. */
int block_forward(const cpu_model *m, int l, uint16_t *X, float *pi, int n, attention_fn attn, void *ctx);
/* X ← hc copies of each token's embedding, π ← one-hot. Fails on an id outside the vocabulary. */
int embed_rows(const cpu_model *m, const int32_t *tokens, int n, uint16_t *X, float *pi);
/* logits [n][V] = head(norm(hc_pre(X, π))) in fp32; u_out (may be NULL) gets the bf16 hc_pre output. */
int head_rows(const cpu_model *m, const uint16_t *X, const float *pi, int n, const uint16_t *norm, float *logits,
              uint16_t *u_out);

#endif
