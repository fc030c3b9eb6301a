/* CPU reference of the xchg family (kit/src/xchg.cu, docs/ranks.md): what every rank holds after an
 * exchange of the ranks' parts. */
#ifndef DSK_REF_XCHG_H
#define DSK_REF_XCHG_H

#include <stdint.h>

/* out[i] = parts[0][i] + parts[1][i] + ... + parts[tp-1][i], added in rank order in fp32. */
void ref_xchg_sum(const float *const *parts, int tp, int64_t n, float *out);
/* out [rows][tp·cols]: rank r's part [rows][cols] at columns [r·cols, (r+1)·cols). */
void ref_xchg_gather(const float *const *parts, int tp, int rows, int cols, float *out);

#endif
