/* CPU reference of the index_score family (model.md §3.5 "Indexer query/score"): the indexer scores of
 * one query row over its sequence's index keys, with REF's bf16 rounding points. The CPU backend
 * (runtime/cpu/compressor.c) scores with these; the GPU kernel (kit/src/index_score.cu) is tested
 * against them. */
#ifndef DSK_REF_INDEX_SCORE_H
#define DSK_REF_INDEX_SCORE_H

#include <stdint.h>

/* score[j] for j < reach: I_j = bf16(Σ_h bf16(relu(bf16(q_h · k_j)) · w_h)), the dot over ihd in fp32
 * (d ascending), the head sum in fp32 in head order. q: bf16 [nh][ihd] (RoPE'd, FP4-QDQ'd); w: fp32 [nh]
 * holding bf16 values (already scaled); keys: bf16 [reach][ihd]. */
void ref_index_score(const uint16_t *q, const float *w, int nh, int ihd, const uint16_t *keys, int64_t reach,
                     float *score);

/* Reindex layers: score[j] = −∞ for every j < reach whose block j / block is not set in the bitmap
 * (bit b of word b / 32; cand_blocks' candidate set). */
void ref_index_score_mask(float *score, int64_t reach, int block, const uint32_t *bitmap);

#endif
