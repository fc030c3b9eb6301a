/* How a token is drawn (model.md §3.8, docs/model.md "Sampling"): the parameters a request gives and
 * the keyed noise, shared by every backend. The noise is a pure function of (seed, absolute position,
 * token id), so a position draws the same token however it is reached: one-shot, decode, inside a verify
 * window, drafted, or batched with other sequences. */
#ifndef DSK_MODEL_SAMPLING_H
#define DSK_MODEL_SAMPLING_H

#include <stdint.h>

/* Candidates top_p looks at: the top_k (when set and smaller) or this many most likely tokens. */
#define SAMPLE_TOP_P_CANDIDATES 1024
/* Most top_logprobs entries a row can ask for. */
#define SAMPLE_MAX_TOP_LOGPROBS 20

typedef struct {
    float temperature; /* <= 0: argmax (ties to the lower id) */
    float top_p;       /* (0, 1]; 1: off */
    int top_k;         /* 0: off; at most SAMPLE_TOP_P_CANDIDATES */
    uint64_t seed;     /* the noise key */
} sample_params;

/* Greedy: temperature 0, no truncation. */
#define SAMPLE_GREEDY ((sample_params){0.0f, 1.0f, 0, 0})

/* The noise's uniform u in (0, 1): 23 bits of a counter-based hash of (seed, pos, id), as (2k+1)·2^-24. */
float sample_uniform(uint64_t seed, int64_t pos, int32_t id);

#endif
