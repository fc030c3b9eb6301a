/* Host launcher of the sample family (kit/src/sample.cu, kit/src/sample_abi.cuh; the candidates come from
 * the topk family; reference runtime/ref/sampling.h): the draw of docs/model.md "Sampling" and the
 * log-probabilities for every sampling row of a round, on the device (no logits reach the host). */
#ifndef DSK_LAUNCH_SAMPLE_H
#define DSK_LAUNCH_SAMPLE_H

#include "kit/src/sample_abi.cuh"
#include "runtime/driver/kit.h"

#include <stddef.h>
#include <stdint.h>

/* Every device pointer 16-byte aligned. */
typedef struct {
    CUdeviceptr logits;     /* fp32 [rows][ldl] */
    int64_t ldl;
    int V, rows;
    CUdeviceptr vocab;      /* u32 [(V + 31) / 32]: the tokenizer's ids, or 0 (every id) */
    CUdeviceptr allow;      /* u32 [masks][ldw]: the rows' allow masks (params[r].allow_row picks one), or 0 */
    int ldw;
    CUdeviceptr params;     /* sample_row_params [rows] */
    int candidates;         /* 1: some row may use top_k / top_p (the top-k candidates run); 0: none does, and
                             * a row that does draws -2 */
    CUdeviceptr tokens;     /* i32 [rows] out: the drawn id, -1 when no id may be drawn */
    CUdeviceptr logprob;    /* fp32 [rows] out: the drawn token's log-probability (NaN: top_logprobs < 0) */
    CUdeviceptr top_ids;    /* i32 [rows][SAMPLE_TOP_LOGPROBS] out: most likely first, -1 past top_logprobs */
    CUdeviceptr top_lp;     /* fp32 [rows][SAMPLE_TOP_LOGPROBS] out: theirs, -inf past top_logprobs */
    CUdeviceptr ws;         /* op_sample_ws_bytes */
    size_t ws_bytes;
} sample_args;

size_t op_sample_ws_bytes(int rows, int V, int candidates);
int op_sample(const kit *k, CUstream s, const sample_args *a);

#endif
