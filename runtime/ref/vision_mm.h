/* CPU reference of the vision_mm family (vision.md §3.7): the vision tower's linears and what follows them.
 * The CPU tower (runtime/cpu/vision_tower.c) runs on these. Activations are fp32 buffers; with bf16 set every
 * value is rounded to bf16 where REF's bf16 modules round, without it nowhere (REF in fp32, §6). */
#ifndef DSK_REF_VISION_MM_H
#define DSK_REF_VISION_MM_H

#include "runtime/common/vision_mm_mode.h"

#include <stdint.h>

/* acc[i][o] = Σ_k x[i][k]·W[o][k] in k order (fp32), x [M][K], W [N][K] bf16 (checkpoint order), b [N] bf16
 * or NULL; y [M][N] ([M][N/2] for SWIGLU). Returns -1 (message set) when a scratch allocation fails. */
int ref_vision_mm(int bf16, const float *x, int M, int K, const uint16_t *W, const uint16_t *b, int N, int mode,
                  float *y);

#endif
