/* Sampling (model.md §3.8): argmax at temperature 0, else Gumbel-max whose noise is keyed by (seed,
 * absolute position, token id), so a position draws the same noise however it is reached (one-shot,
 * decode, inside a verify window, or drafted). docs/model.md "Sampling" defines the bits. */
#ifndef DSK_REF_SAMPLING_H
#define DSK_REF_SAMPLING_H

#include <stdint.h>

/* The noise's uniform u in (0, 1): 23 bits of a counter-based hash of (seed, pos, id), as (2k+1)·2^-24. */
float sample_uniform(uint64_t seed, int64_t pos, int32_t id);
/* The token for absolute position pos from fp32 logits [vocab]: temperature <= 0 gives the argmax (ties
 * to the lower id); otherwise argmax_v exp(l_v/T - max) / -log(u_v) (ties to the lower id). */
int32_t sample_token(const float *logits, int vocab, float temperature, uint64_t seed, int64_t pos);

#endif
