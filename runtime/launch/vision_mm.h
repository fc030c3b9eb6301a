/* Host launcher of the vision_mm family (kit/src/vision_mm.cu; reference runtime/ref/vision_mm.h): the vision
 * tower's bf16 linears with their epilogues (VISION_MM_*, runtime/common/vision_mm_mode.h). */
#ifndef DSK_LAUNCH_VISION_MM_H
#define DSK_LAUNCH_VISION_MM_H

#include "runtime/driver/kit.h"
#include "runtime/common/vision_mm_mode.h"

#include <stdint.h>

/* y = epilogue(x[M][K] · W[N][K]ᵀ + b) in bf16 (b may be 0); K % 32 == 0, N % 8 == 0 (x, W padded with zero
 * columns to reach it: the sums are unchanged). VISION_MM_RESIDUAL reads y first; VISION_MM_SWIGLU takes W
 * with its gate and up rows interleaved (vision_mm_interleave) and writes y [M][N/2]. */
int op_vision_mm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr b, CUdeviceptr y, int M, int K,
                 int N, int mode);

/* The same with the form of a kit for SM number sm (rule_vision_mm_pick: 90 wgmma, else mma.sync): what
 * op_vision_mm launches on k's own arch; the GPU test also runs the generic form a full sm_90 kit holds. */
int op_vision_mm_as(const kit *k, int sm, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr b, CUdeviceptr y,
                    int M, int K, int N, int mode);

/* The SwiGLU weight as op_vision_mm takes it: out row 2j = gate row j, 2j + 1 = up row j (w [2I][K], gate
 * rows 0..I-1 then up rows, the checkpoint's order). */
void vision_mm_interleave(const uint16_t *w, int I, int K, uint16_t *out);

#endif
