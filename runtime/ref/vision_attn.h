/* CPU reference of the vision_attn family (vision.md §3.4): full bidirectional attention over one image's
 * patches, per head, no mask and no sink. The CPU tower (runtime/cpu/vision_tower.c) and the GPU checks
 * (tests/gpu/test_vision_attn.c) both call it. */
#ifndef DSK_REF_VISION_ATTN_H
#define DSK_REF_VISION_ATTN_H

/* qkv [n][3·heads·hd] in fp32 storage (RoPE already applied to q and k): columns 0..D-1 are q, D..2D-1 k,
 * 2D..3D-1 v (D = heads·hd), head h = columns h·hd .. h·hd + hd - 1 of each third. Writes query rows
 * row0 .. row1 - 1 of out [n][D] (heads concatenated) and leaves the other rows alone. Per head and row:
 * scores (q·k_j)·fp32(1/√hd) summed in dim order, the maximum subtracted, expf; the unrounded exps summed in
 * key order; P·V in fp32 in key order with each probability rounded to bf16 first when bf16 != 0 (torch's
 * CPU attention, §3.4); the quotient rounded to bf16 when bf16 != 0, else kept in fp32 (REF run in fp32).
 * Returns 0, or -1 with the message set when out of memory. */
int ref_vision_attn(const float *qkv, int n, int heads, int hd, int row0, int row1, int bf16, float *out);

#endif
