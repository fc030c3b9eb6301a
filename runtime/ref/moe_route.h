/* CPU reference of MoE routing (model.md §3.7): sqrtsoftplus scores of the gate logits, the biased top-k
 * selection and the unbiased, renormalised weights. */
#ifndef DSK_REF_MOE_ROUTE_H
#define DSK_REF_MOE_ROUTE_H

#include <stdint.h>

/* sqrt(softplus(x)), softplus linear above 20 as in PyTorch. */
float moe_sqrtsoftplus(float x);
/* Routing of one row from the gate logits [E] (E <= 4096, k <= 64): top k of score + bias (ties to the
 * lower id) in ascending id, weights route_scale · s / (Σ s + 1e-20) from the unbiased scores, the sum
 * taken in selection rank order. Returns k. */
int moe_route(float route_scale, int E, int k, const float *bias, const float *logits, int32_t *ids, float *weights);
/* The same from the scores s [E] themselves (moe_route = this after s = moe_sqrtsoftplus(logits)): what the
 * GPU's selection and weights must equal given the GPU's own s. */
int moe_route_scores(float route_scale, int E, int k, const float *bias, const float *score, int32_t *ids,
                     float *weights);

#endif
