/* The compressed-KV side of CSA2 (model.md §3.5): the compressor and index keys of a kv source, and the
 * indexer (scores, candidate blocks, top-k) of an index source. */
#ifndef DSK_CPU_COMPRESSOR_H
#define DSK_CPU_COMPRESSOR_H

#include "runtime/cpu/layers.h"

/* Compress the call's rows of kv source l (input xn = attn_norm output [n][d]): every group that
 * closes in the call emits a latent row j (position j·r) into s->ckv[l] and its index key into
 * s->ikv[l]; ratio-2 a_t, s_t enter the position ring. */
int compressor_rows(const cpu_model *m, cpu_seq *s, int l, const uint16_t *xn, int n, int64_t pos0);
/* Index source l: score each row's reachable compressed rows, publish candidate blocks (candidate
 * source) and the row's top-k in f. */
int indexer_rows(const cpu_model *m, const cpu_seq *s, fwd_call *f, int l, const uint16_t *xn,
                 const uint16_t *q_lat);

#endif
