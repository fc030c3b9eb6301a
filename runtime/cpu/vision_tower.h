/* The vision tower and aligner on the CPU (vision.md §3): patch embedding, the ViT blocks (RMSNorm eps 1e-6
 * with fp32 weights, 2-D rotate-half RoPE, full bidirectional attention over one image's patches, SwiGLU),
 * the final norm, the 3×3 channel-major space-to-depth and the GELU aligner into the LM's width; then the
 * span of LM input rows (§3.8). One image per call: no attention crosses images.
 *
 * Two precisions share one code path: VISION_BF16 rounds to bf16 at every point §3.7 lists (what REF
 * computes, the backend's path), VISION_F32 rounds nowhere (REF run in fp32, for §6's tight golden check). */
#ifndef DSK_CPU_VISION_TOWER_H
#define DSK_CPU_VISION_TOWER_H

#include "runtime/model/config.h"

#include <stdint.h>

/* Weights of one ViT block: D = vision_dim, I = vision_inter_dim. */
typedef struct {
    const float *norm1, *norm2;    /* [D] fp32 */
    const uint16_t *wqkv, *bqkv;   /* [3D][D], [3D]: q, k, v by thirds */
    const uint16_t *wo, *bo;       /* [D][D], [D] */
    const uint16_t *w1;            /* [2I][D]: gate rows 0..I-1, up rows I..2I-1 */
    const uint16_t *w2;            /* [D][I] */
} vision_block_weights;

/* The tower's weights (bf16 unless marked), pointers into the checkpoint or owned by the caller. */
typedef struct {
    const uint16_t *patch_w, *patch_b; /* [D][3p²], [D] */
    vision_block_weights *blocks;      /* [vision_n_layers] */
    const float *norm;                 /* [D] fp32 */
    const uint16_t *al_w1, *al_b1;     /* [dim][r²D], [dim] */
    const uint16_t *al_w2, *al_b2;     /* [dim][dim], [dim] */
    const uint16_t *start, *end, *newline; /* [dim] delimiters */
} vision_weights;

typedef enum { VISION_BF16, VISION_F32 } vision_precision;

/* Optional intermediate outputs (for tests; each may be NULL). */
typedef struct {
    float *embed; /* [N][D] after the patch embedding */
    float *vit;   /* [N][D] after the final norm */
} vision_taps;

/* features [n_llm_h·n_llm_w][dim] (fp32 storage; bf16 values with VISION_BF16) of one image's patches
 * [n_vit_h·n_vit_w][3p²] bf16 (runtime/vision's vision_image). */
int vision_tower_run(const model_config *c, const vision_weights *w, vision_precision prec, const uint16_t *patches,
                     int n_vit_h, int n_vit_w, float *features, vision_taps *taps);

/* The span's LM input rows [positions][dim] bf16 (vision.md §3.8): START, the aligner rows of each line then
 * NEWLINE, END; features as vision_tower_run gives them (rounded to bf16 here). */
void vision_span_rows(const model_config *c, const vision_weights *w, const float *features, int n_vit_h,
                      int n_vit_w, uint16_t *rows);

#endif
