// What the vision_attn kernel and its host launcher (runtime/launch/vision_attn.c) share: the tiling and
// the dynamic shared memory. Plain C, valid C++; the host includes this file too.
#pragma once

// Query rows per CTA: 4 warps of 32 rows (two m16 tiles each).
#define VISION_ATTN_ROWS 128
#define VISION_ATTN_THREADS 128
// Keys per tile of the online softmax (K and V streamed through shared memory in tiles of this many rows).
#define VISION_ATTN_KEYS 64
// Patches a launch takes at most (the release's images have up to ~9.2k; the kernel's row arithmetic is int).
#define VISION_ATTN_MAX_N (1 << 24)
// Tiles in flight: tile j + 2 loads while tile j computes, into the stage tile j - 1 left.
#define VISION_ATTN_STAGES 3

// Dynamic shared memory for head_dim hd (kit/variants.json spells the same product): the Q tile, then per
// stage the K and V tiles, rows of hd + 8 bf16 (padded against bank conflicts).
#define VISION_ATTN_SMEM(hd) ((VISION_ATTN_ROWS + 2 * VISION_ATTN_STAGES * VISION_ATTN_KEYS) * ((hd) + 8) * 2)
