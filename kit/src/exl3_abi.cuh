// What the EXL3 kernels and their host launchers (runtime/gpu/exl3_ops.c) share: the device-side
// description of one linear, the launch modes and flags, and the MoE plan layout. Plain C, valid
// C++; the host includes this file too, so both sides read one definition.
#pragma once

// One EXL3 linear y = x·W on the device (64 bytes, 16-byte aligned wherever it is stored).
// Every pointer is a device address aligned to 16 bytes.
typedef struct {
    unsigned long long trellis; // u16 [k/16][n/16][16·K], exl3.md §1.1
    unsigned long long suh;     // fp16 [k]
    unsigned long long svh;     // fp16 [n]
    unsigned long long bias;    // fp32 [n], or 0
    int k, n;                   // in and out features, multiples of 128
    int K, cb;                  // bits per weight 1..8, codebook 0..2
    int qb;                     // 128-row blocks of k per group: the canonical k split (docs/exl3-kernels.md)
    int groups;                 // ceil((k/128) / qb)
    int pad0, pad1;
} exl3_desc;

// exl3_mm modes
#define EXL3_MODE_DENSE 0    // 1..4 matrices sharing x (grouped), or block-diagonal (EXL3_F_BLOCKDIAG);
                             // matrix m writes columns [coff_m, coff_m + n_m)
#define EXL3_MODE_MOE_UP 1   // per expert: g = W1 x, u = W3 x, h = bf16(w_e · silu(min(g,10)) · clamp(u,±10))
#define EXL3_MODE_MOE_DOWN 2 // per expert: bf16(W2 h) per (row, slot); rows summed in ascending expert id

// exl3_mm flags
#define EXL3_F_OUT_BF16 1 // dense output rounded to bf16 (else fp32)
#define EXL3_F_XF 2       // x holds x' already transformed by exl3_had (fragment order), not bf16 rows
#define EXL3_F_FOLD 4     // every CTA covers all k groups and folds them itself (no partial sums)
#define EXL3_F_ACCUM 8    // MoE down: add the rows' sums to y instead of writing them
#define EXL3_F_BLOCKDIAG 16 // dense, block-diagonal: d0 is an array of nmat (<= EXL3_MAX_BLOCKS) descriptors
                            // of one shape; matrix m reads x's columns [m·k, (m+1)·k) (grouped wo_a)
#define EXL3_MAX_BLOCKS 16

// Tile rows per row group of the mma (its N dimension) and columns per CTA (one Hadamard block).
#define EXL3_ROWS_PER_GROUP 8
#define EXL3_COLS_PER_CTA 128

// MoE plan (int32 words, written by exl3_moe_plan, read by the MoE modes of exl3_mm), for R rows,
// topk routed slots per row and at most T tiles:
//   [0] tiles, [1] local entries,
//   tile_expert[T], tile_first[T], tile_count[T], entries[R·topk] (entry = r·topk + s, tile by tile),
//   row_nslots[R], row_order[R·topk] (a row's local slots, ascending expert id)
#define EXL3_PLAN_TILE_EXPERT(T) 2
#define EXL3_PLAN_TILE_FIRST(T) (2 + (T))
#define EXL3_PLAN_TILE_COUNT(T) (2 + 2 * (T))
#define EXL3_PLAN_ENTRIES(T) (2 + 3 * (T))
#define EXL3_PLAN_ROW_NSLOTS(T, R, topk) (2 + 3 * (T) + (R) * (topk))
#define EXL3_PLAN_ROW_ORDER(T, R, topk) (2 + 3 * (T) + (R) * (topk) + (R))
#define EXL3_PLAN_WORDS(T, R, topk) (2 + 3 * (T) + 2 * (R) * (topk) + (R))
