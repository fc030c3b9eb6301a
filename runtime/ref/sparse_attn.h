/* CPU reference of the sparse attention family (model.md §3.5, dskit's canonical list in docs/model.md):
 * one query row over a compacted list of keys (K = V: the single shared 512-wide KV head), with the sink. */
#ifndef DSK_REF_SPARSE_ATTN_H
#define DSK_REF_SPARSE_ATTN_H

#include <stdint.h>

/* q [heads][hd] bf16; keys[i] -> the i-th entry of the compacted list, in list order; sink [heads] fp32;
 * out [heads][hd] bf16. Online softmax over blocks of 64 list entries from a running max of -1e30, fp32
 * denominator, bf16-rounded probabilities times K in the fp32 numerator, exp(sink - max) added last. An
 * empty list gives zeros. hd <= 1024. */
void sparse_attention_row(const uint16_t *q, int heads, int hd, const uint16_t *const *keys, int n_keys,
                          const float *sink, uint16_t *out);

#endif
