/* Host launcher of the vision_glue family (kit/src/vision_glue.cu; reference runtime/ref/vision_glue.h). */
#ifndef DSK_LAUNCH_VISION_GLUE_H
#define DSK_LAUNCH_VISION_GLUE_H

#include "runtime/driver/kit.h"

/* The vision RMSNorm (eps 1e-6, fp32 weight w [width]) of rows bf16 rows; width % 8 == 0. x and y may alias. */
int op_vision_rmsnorm(const kit *k, CUstream s, CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, int rows, int width);
/* 2-D RoPE of q (columns 0..heads·hd-1) and k (the next heads·hd) of qkv [rows][ld] bf16 in place, with the
 * host's table cos/sin [rows][hd/2] fp32 (ref_vision_rope_table): the CPU's bits. */
int op_vision_rope(const kit *k, CUstream s, CUdeviceptr qkv, int ld, CUdeviceptr cs, CUdeviceptr sn, int rows, int heads,
                   int hd);
/* Space-to-depth: cells [⌈nh/r⌉·⌈nw/r⌉][r²·D] bf16 of grid [nh][nw][D] bf16. */
int op_vision_s2d(const kit *k, CUstream s, CUdeviceptr grid, CUdeviceptr cells, int nh, int nw, int D, int r);

#endif
