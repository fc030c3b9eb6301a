/* CPU reference of the engram_gate family (model.md §3.3, steps 3-6): the gate of every stream from its
 * key and the update of the streams by the shared value, after the Engram projection. */
#ifndef DSK_REF_ENGRAM_GATE_H
#define DSK_REF_ENGRAM_GATE_H

#include <stdint.h>

/* fp32(d^-1/2), the d_c scale (taken in double, rounded once). */
float ref_engram_gate_scale(int d);

/* In place on the streams X bf16 [rows][hc][d], with kv bf16 [rows][(hc+1)·d] (key c at c·d, the value at
 * hc·d) and w = q_weight ⊙ k_weight fp32 [hc][d]: per row and stream c,
 * d_c = (Σ_j (X_cj·w_cj)·key_cj) · (r_X·r_key) · fp32(d^-1/2), r = 1/sqrt(Σ v²/d + eps), sums in index
 * order; g_c = 1/(1 + expf(−copysign(sqrt(max(|d_c|, 1e-6)), d_c))) (a +0 gives +sqrt(1e-6));
 * X_cj = bf16(X_cj + g_c·value_j). */
void ref_engram_gate(uint16_t *X, const uint16_t *kv, const float *w, int rows, int hc, int d, float eps);

#endif
