/* Host launcher of the index_score family (kit/src/index_score.cu; reference runtime/ref/index_score.h):
 * the indexer scores of a round's query rows, each over its own sequence's index keys (docs/engine.md).
 * The variant comes from the family's rule (manifest/rules/rules.h), the kernel from the kit by family and
 * parameters, never by file. */
#ifndef DSK_LAUNCH_INDEX_SCORE_H
#define DSK_LAUNCH_INDEX_SCORE_H

#include "runtime/driver/kit.h"

#include <stdint.h>

/* One launch: rows query rows, scores written for j < N (the round's widest reach) per row. Every device
 * pointer 16-byte aligned. */
typedef struct {
    CUdeviceptr q;        /* bf16 [rows][nh][ihd]: the indexer queries, RoPE'd and FP4-QDQ'd */
    CUdeviceptr w;        /* fp32 [rows][nh]: head weights holding bf16 values, already scaled */
    CUdeviceptr keys;     /* bf16 [pool rows][ihd]: the kv source's index keys of every sequence */
    CUdeviceptr key_base; /* i32 [rows]: the pool row of key 0 of the row's sequence */
    CUdeviceptr reach;    /* i32 [rows]: the row's reachable keys (j < reach scored; clamped to [0, N]) */
    CUdeviceptr cand;     /* u32 [rows][ldc]: the row's candidate blocks (bit b of word b/32), or 0 */
    int ldc;              /* words per bitmap row, >= ceil(ceil(N / cand_block) / 32) */
    int cand_block;       /* keys per candidate block (candidate_block_size) */
    int rows, nh, ihd, N;
    int group;            /* rows per block sharing each loaded key tile (1..4; 0: 1): consecutive rows of one
                           * sequence (a verify window, a prompt chunk). Rows of a group with other key_base
                           * load their own keys: any grouping is correct, sharing makes it faster */
    int sms;              /* the GPU's multiprocessors (the grid), 0: 132 */
    CUdeviceptr out;      /* fp32 [rows][lds]: I_j, −∞ for j >= reach and outside the candidate blocks */
    int64_t lds;          /* >= N */
} index_score_args;

int op_index_score(const kit *k, CUstream s, const index_score_args *a);
/* The same with the slices of the keys (grid y) forced (tests: a score must not depend on it); 0 = the rule. */
int op_index_score_slices(const kit *k, CUstream s, const index_score_args *a, int slices);

#endif
