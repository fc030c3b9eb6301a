// What the sparse_attn kernels and their host launcher (runtime/launch/sparse_attn.c) share: the per-row
// description of a query row's canonical attention list (docs/model.md "Canonical attention list"), the
// block and head tiling, and the shared-memory size. Plain C, valid C++; the host includes this file too.
#pragma once

// List entries per online-softmax block (REF's block: the running max advances once per block).
#define SPARSE_ATTN_BLOCK 64
// Heads per CTA: one m16 tile of the tensor-core products (heads past the model's count are zeros).
#define SPARSE_ATTN_HEADS 16

// One query row's list, in list order (32 bytes; an array of them is 16-byte aligned):
//   segment 1, the window: positions win_lo .. win_hi ascending (empty when win_hi < win_lo). Position p is
//     this round's key, row call_row0 + (p - call_pos0) of kv_call, when p >= call_pos0; else the
//     sequence's ring slot, row ring_base + p % ring of kv_ring (earlier rounds' keys).
//   segment 2: nsel rows of kv2, row base2 + sel[r][j] for j < nsel (the row's selected compressed rows,
//     ascending), or base2 + j when the launch has no selection (a DSpark block: its rows of this round).
// pos is the row's own position, the angle of the fused inverse RoPE (a DSpark row sits after its window).
typedef struct {
    int pos;
    int win_lo, win_hi;
    int call_pos0, call_row0;
    int ring_base;
    int base2, nsel;
} sparse_attn_row;

// Warps of a CTA for head_dim hd: each owns hd / warps dims of both products (64 at 512, 32 at 128).
#define SPARSE_ATTN_DIMS_PER_WARP(hd) ((hd) >= 256 ? 64 : 32)
#define SPARSE_ATTN_WARPS(hd) ((hd) / SPARSE_ATTN_DIMS_PER_WARP(hd))

// The kernels' modes: the whole list in one CTA, or split over CTAs per block in two steps (the second's
// last CTA per row and head group folds the blocks).
#define SPARSE_ATTN_MODE_WHOLE 0
#define SPARSE_ATTN_MODE_SCORES 1
#define SPARSE_ATTN_MODE_VALUES 2

// Dynamic shared memory per mode (kit/variants.json spells the same sums). Whole: two key stages [64][hd]
// bf16, the warps' score partials [warps][16][72] fp32, the probabilities [16][72] bf16, the key addresses
// of both stages, per-head factors and the RoPE table. Scores: one stage, the partials, one stage's
// addresses. Values: one stage, the probabilities, the addresses (the fold's RoPE table is static).
#define SPARSE_ATTN_SMEM(hd, mode)                                                                        \
    ((mode) == 0   ? 256 * (hd) + SPARSE_ATTN_WARPS(hd) * 4608 + 4352                                      \
     : (mode) == 1 ? 128 * (hd) + SPARSE_ATTN_WARPS(hd) * 4608 + 512                                       \
     : (mode) == 2 ? 128 * (hd) + 2816                                                                      \
                   : 0)
// Threads of a CTA (every mode); the fold takes 16 heads x 128 dims per pass.
#define SPARSE_ATTN_THREADS(hd, mode) (32 * SPARSE_ATTN_WARPS(hd))
#define SPARSE_ATTN_MERGE_DIMS 128

// Workspace of the split modes, per (row, head group, list block), in floats: the block's scores [16][64],
// per head its maximum, α and Σ p (and 16 spare), then Σ bf16(p)·k [16][hd].
#define SPARSE_ATTN_WS_SCORES 0
#define SPARSE_ATTN_WS_BMAX (SPARSE_ATTN_HEADS * SPARSE_ATTN_BLOCK)
#define SPARSE_ATTN_WS_ALPHA (SPARSE_ATTN_WS_BMAX + SPARSE_ATTN_HEADS)
#define SPARSE_ATTN_WS_BSUM (SPARSE_ATTN_WS_ALPHA + SPARSE_ATTN_HEADS)
#define SPARSE_ATTN_WS_NUM (SPARSE_ATTN_WS_BSUM + 2 * SPARSE_ATTN_HEADS)
#define SPARSE_ATTN_WS_BLOCK(hd) (SPARSE_ATTN_WS_NUM + SPARSE_ATTN_HEADS * (hd))
// After the blocks of every (row, head group), one u32 arrival counter each (row-major): zeroed by the
// row's MODE 1 block 0, counted by its MODE 2 CTAs.
#define SPARSE_ATTN_WS_COUNTERS 1

// Largest rope_dim the fused inverse RoPE takes (its table holds 64 pairs).
#define SPARSE_ATTN_MAX_ROPE 128
