/* Host launcher of the vision_attn family (kit/src/vision_attn.cu; reference runtime/ref/vision_attn.h):
 * the vision tower's attention, full and bidirectional over one image's patches (vision.md §3.4). The
 * variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_VISION_ATTN_H
#define DSK_LAUNCH_VISION_ATTN_H

#include "runtime/driver/kit.h"

/* qkv: bf16 [n][3·heads·hd] (q and k after RoPE): q, k, v by thirds, head h = columns h·hd .. h·hd + hd - 1
 * of each. out: bf16 [n][heads·hd], the heads concatenated; it must not overlap qkv. Both device addresses
 * 16-byte aligned. 1 <= n <= 2^24 patches, 1 <= heads <= 65535, hd 16 or 64 (the kit's variants). One launch on
 * stream s, nothing allocated, graph-capturable; the same inputs give the same bits on every run.
 * Per head and row: fp32 scores and online softmax, the probabilities rounded to bf16 before P·V (fp32
 * accumulation), divided by the fp32 sum of the unrounded exps, rounded to bf16. */
int op_vision_attn(const kit *k, CUstream s, CUdeviceptr qkv, CUdeviceptr out, int n, int heads, int hd);

#endif
