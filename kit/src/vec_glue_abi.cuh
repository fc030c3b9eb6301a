// What vec_glue (kit/src/vec_glue.cu) and its host launcher (runtime/launch/vec_glue.c) share: the bits of
// the kernel's `flags` argument and its vectors per block. Plain C, valid C++; the host includes this file.
#pragma once

#define VG_NORM 1    // RMSNorm with the weight w and eps first
#define VG_ROPE 2    // RoPE of the last rope_dim dims at pos[row], angles from freqs
#define VG_INVERSE 4 // RoPE by the conjugate angle
#define VG_WARPS 8   // vectors per block (one warp each)
#define VG_MAX_OPS 3 // independent ops one launch takes (grid y)
#define VG_Q_SHIFT 4 // an op's QDQ kind in flags bits 4-5 (read by the VG_MIXED variants)
#define VG_MIXED 4   // the Q of the variants whose ops each have their own QDQ kind
