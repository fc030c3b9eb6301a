/* CPU reference of the tap_mean family (model.md §3.2): the DSpark taps, the mean of a row's streams. */
#ifndef DSK_REF_TAP_MEAN_H
#define DSK_REF_TAP_MEAN_H

#include <stdint.h>

/* taps[r][target][k] = bf16((Σ_c x[r][c][k]) / hc), the streams added in order from 0, for x bf16
 * [rows][hc][d] and taps bf16 [rows][n_targets][d]; the other targets' slots are left as they are. */
void ref_tap_mean(const uint16_t *x, int rows, int hc, int d, uint16_t *taps, int n_targets, int target);

#endif
