/* CPU reference of the embed family (model.md §3.1): embedding lookup and stream expansion. */
#ifndef DSK_REF_EMBED_H
#define DSK_REF_EMBED_H

#include <stdint.h>

/* x[r][c] = table[ids[r]] for each of the hc streams c (bf16 [rows][hc][d]), pi[r] = one-hot(0) (fp32
 * [rows][hc]). Ids are the caller's to validate; an id outside [0, vocab) reads nothing and gives zero
 * streams (what the GPU kernel does too). */
void ref_embed(const uint16_t *table, int vocab, int d, const int32_t *ids, int rows, int hc, uint16_t *x, float *pi);

#endif
