/* CPU reference of the sampling family (model.md §3.8, docs/model.md "Sampling"): the token a row draws
 * from its fp32 logits with its sampling parameters, its allowed ids and the keyed noise of
 * runtime/model/sampling.h, and the log-probabilities a request can ask for. */
#ifndef DSK_REF_SAMPLING_H
#define DSK_REF_SAMPLING_H

#include "runtime/model/sampling.h"

#include <stdint.h>

/* Whether id is allowed by a bitmask of (V + 31) / 32 words (NULL: every id). */
static inline int sample_allowed(const uint32_t *allow, int32_t id)
{
    return !allow || (allow[id >> 5] >> (id & 31) & 1u);
}

/* The token for absolute position pos from logits [V], among the ids allow permits (NULL: all):
 *   temperature <= 0: the argmax, ties to the lower id;
 *   else z = logit / max(T, 1e-5); top_k > 0 keeps the top_k largest z (ties to the lower id); top_p < 1
 *   then keeps, of the SAMPLE_TOP_P_CANDIDATES (or top_k) largest, the shortest prefix in z order whose
 *   mass reaches top_p of the distribution's (Σ exp(z - max) over the kept ids, in ascending id); the
 *   draw is argmax over the kept ids of exp(z - max) / -log(u(seed, pos, id)), ties to the lower id.
 * Returns -1 when no id is allowed. */
int32_t sample_row(const float *logits, int V, const sample_params *sp, int64_t pos, const uint32_t *allow);

/* Log-probabilities of the raw logits (temperature 1) over the allowed ids: *lp of token, and the n
 * (<= SAMPLE_MAX_TOP_LOGPROBS) most likely ids with theirs, most likely first (ties to the lower id). */
void sample_logprobs(const float *logits, int V, const uint32_t *allow, int32_t token, int n, float *lp,
                     int32_t *top_ids, float *top_lp);

#endif
