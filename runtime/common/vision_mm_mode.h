/* The epilogues of the vision tower's linears (vision.md §3.7), shared by the vision_mm family's reference
 * (runtime/ref/vision_mm.h) and its launcher (runtime/launch/vision_mm.h), as kv_quant.h is by vec_glue's. */
#ifndef DSK_COMMON_VISION_MM_MODE_H
#define DSK_COMMON_VISION_MM_MODE_H

enum {
    VISION_MM_BIAS = 0,     /* y = acc + b */
    VISION_MM_RESIDUAL = 1, /* y = y + (acc + b): the residual add, y read first */
    VISION_MM_GELU = 2,     /* y = gelu_erf(acc + b) */
    VISION_MM_SWIGLU = 3,   /* y[., j] = silu(g_j) · u_j, g = columns 0..N/2-1 (W's gate rows), u the rest */
};

#endif
