/* CPU reference of the mhc family (model.md §3.4): the coefficients of one sublayer (mixes, then
 * Sinkhorn), and the pre (streams -> sublayer input) and post (sublayer output -> streams) maps. All fp32,
 * sums in stream order (docs/model.md "Rounding points"). */
#ifndef DSK_REF_MHC_H
#define DSK_REF_MHC_H

#include "runtime/model/config.h"

#include <stdint.h>

/* mHC coefficients of one sublayer for one row. */
typedef struct {
    float pre[16];       /* [hc] */
    float post[16];      /* [hc] */
    float comb[16 * 16]; /* [hc][hc]: row i = source stream, column j = destination */
} hc_coeffs;

/* mixes(x) then pre, post and the Sinkhorn-normalised comb from the sublayer's hc_fn [M][hc·d],
 * hc_base [M] and hc_scale [3] (M = model_hc_mix_dim); x = the hc streams [hc][d] bf16. */
void hc_mixes(const model_config *c, const float *fn, const float *base, const float *scale, const uint16_t *x,
              hc_coeffs *out);
/* Sinkhorn of §3.4 in place on comb [hc][hc] holding the scaled logits (softmax rows first). */
void hc_sinkhorn(float *comb, int hc, int iters, float eps);
/* y[d] = bf16(Σ_i w_i x_i[d]), streams summed in order. */
void hc_pre(const uint16_t *x, const float *w, int hc, int d, uint16_t *y);
/* x_j ← bf16(post_j·y + Σ_i comb_ij x_i) for every stream j (out may not alias x). */
void hc_post(const uint16_t *y, const uint16_t *x, const hc_coeffs *k, int hc, int d, uint16_t *out);
/* The device layout of a coefficient row (docs/engine.md): fp32 [2·hc + hc·hc] = pre, post, comb. */
void hc_coeffs_pack(const hc_coeffs *k, int hc, float *row);
void hc_coeffs_unpack(const float *row, int hc, hc_coeffs *k);

#endif
