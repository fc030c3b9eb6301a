// What topk_mb (kit/src/topk_mb.cu) and its host launcher (runtime/gpu/ops.c) share: the layout of
// the per-row workspace, in ints. Plain C, valid C++; the host includes this file too.
#pragma once

#define TOPK_MB_HIST 0      // 4 x 256: the row's histogram of each 8-bit digit
#define TOPK_MB_ARRIVE 1024 // 4: blocks done with each digit
#define TOPK_MB_STATE 1028  // 4 x (prefix, need) after each digit
#define TOPK_MB_COUNTS 1040 // blocks x (above, equal)
#define TOPK_MB_WS_INTS(blocks) (TOPK_MB_COUNTS + 2 * (blocks)) // ints per row

// topk_tl (kit/src/topk_tl.cu): the rows' arrival counters first (one int a row, zeroed by the host before
// each launch; the head rounded up to 16 bytes), then per row blocks·k candidate indices and blocks·k scores.
#define TOPK_TL_HEAD(rows) ((((rows) + 3) / 4) * 4)
#define TOPK_TL_ROW_INTS(blocks, k) (2 * (blocks) * (k))
