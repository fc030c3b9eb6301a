/* CPU reference of the sparse attention family (model.md §3.5, dskit's canonical list in docs/model.md):
 * the canonical list of a query row, and one query row over it (K = V: the single shared KV head), with
 * the sink. The CPU backend (runtime/cpu/attention.c, drafter.c) and the GPU checks both call these. */
#ifndef DSK_REF_SPARSE_ATTN_H
#define DSK_REF_SPARSE_ATTN_H

#include <stdint.h>

/* Where a row's keys live (rows of hd bf16): the window positions of this call (row 0 = position
 * call_pos0), the sequence's ring of earlier positions (slot p % ring_slots), and the buffer of the list's
 * second segment. */
typedef struct {
    const uint16_t *call;
    int64_t call_pos0;
    const uint16_t *ring;
    int ring_slots;
    const uint16_t *rows2;
    int hd;
} ref_attn_keys;

/* The canonical list: window positions win_lo .. win_hi ascending (none when win_hi < win_lo; from the
 * call at and after call_pos0, from the ring before it), then rows2 + sel[j] (rows2 + j when sel is NULL)
 * for j < nsel. Writes the key of each entry to keys[] in list order; returns the count. */
int ref_attn_list(const ref_attn_keys *src, int64_t win_lo, int64_t win_hi, const int32_t *sel, int nsel,
                  const uint16_t **keys);

/* q [heads][hd] bf16; keys[i] -> the i-th entry of the compacted list, in list order; sink [heads] fp32;
 * out [heads][hd] bf16. Online softmax over blocks of 64 list entries from a running max of -1e30, fp32
 * denominator, bf16-rounded probabilities times K in the fp32 numerator, exp(sink - max) added last. An
 * empty list gives zeros. hd <= 1024. */
void sparse_attention_row(const uint16_t *q, int heads, int hd, const uint16_t *const *keys, int n_keys,
                          const float *sink, uint16_t *out);

#endif
