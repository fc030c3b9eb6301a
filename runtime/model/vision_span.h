/* One image's span of LM positions (vision.md §1.3, §3.6, §3.8), a pure function of its patch grid: the
 * tower sees n_vit_h × n_vit_w patches, the aligner makes one cell of r × r patches, giving an
 * n_llm_h × n_llm_w cell grid (n_llm = ⌈n_vit / r⌉, the grid zero-padded), and the span is
 *
 *     START, (IMAGE × n_llm_w, NEW_LINE) × n_llm_h, END
 *
 * every position of it holding image_token_id in the prompt. Shared by the preprocessing (the plan keeps
 * the count within vision_max_n_token), the engine's checks and every backend's span placement. */
#ifndef DSK_MODEL_VISION_SPAN_H
#define DSK_MODEL_VISION_SPAN_H

#include <stdint.h>

/* Token types of REF's prepare_vl_inputs; TEXT is every position outside a span. */
enum { VISION_TEXT = -1, VISION_START = 0, VISION_IMAGE = 1, VISION_NEWLINE = 2, VISION_END = 3 };

/* Aligner cells along one axis of n_vit patches. */
static inline int vision_cells(int n_vit, int r)
{
    return (n_vit + r - 1) / r;
}

/* Positions of the span of an n_vit_h × n_vit_w patch grid: n_llm_h · (n_llm_w + 1) + 2. */
static inline int64_t vision_span_positions(int r, int n_vit_h, int n_vit_w)
{
    return (int64_t)vision_cells(n_vit_h, r) * (vision_cells(n_vit_w, r) + 1) + 2;
}

/* The type of span position i (0 <= i < positions) of an n_llm_h × n_llm_w cell grid; for an IMAGE slot,
 * *row gets its aligner row (cell bi·n_llm_w + bj: line bi, slot bj), otherwise -1. */
static inline int vision_span_slot(int n_llm_h, int n_llm_w, int64_t i, int64_t *row)
{
    int64_t last = (int64_t)n_llm_h * (n_llm_w + 1) + 1;
    *row = -1;
    if (i == 0)
        return VISION_START;
    if (i == last)
        return VISION_END;
    int64_t j = i - 1, line = j / (n_llm_w + 1), col = j % (n_llm_w + 1);
    if (col == n_llm_w)
        return VISION_NEWLINE;
    *row = line * n_llm_w + col;
    return VISION_IMAGE;
}

#endif
