/* CPU reference of the dspark_conf family and of the Markov bias (model.md §3.9): the drafter's extras
 * beside its backbone head. The CPU drafter (runtime/cpu/drafter.c) computes with these; the GPU runs
 * the confidence in kit/src/dspark_conf.cu and the bias as a rowmm_bf16 (runtime/launch/dspark_conf.h). */
#ifndef DSK_REF_DSPARK_CONF_H
#define DSK_REF_DSPARK_CONF_H

#include <stdint.h>

/* confidence = Σ_j w[j]·u[j] (j < d) + Σ_r w[d + r]·e[r] (r < R): bf16 operands widened, one fp32
 * accumulator, terms in that order. w: confidence_head.proj [d + R]; u: the draft row's un-normed bf16
 * u_i [d]; e: its Markov embedding row E_m[d_i] [R]. */
float ref_dspark_conf(const uint16_t *w, const uint16_t *u, int d, const uint16_t *e, int R);

/* bias[v] = Σ_r e[r]·head_t[r][v], r ascending from 0 in fp32 (v < V): the Markov bigram bias the
 * drafter adds to row i's fp32 logits, with e = E_m[d_i] and head_t = markov_head.head transposed
 * ([R][V]). The same sum, term for term, as ref_rowmm_bf16(e, markov_head [V][R]). */
void ref_markov_bias(const uint16_t *e, const uint16_t *head_t, int R, int V, float *bias);

#endif
