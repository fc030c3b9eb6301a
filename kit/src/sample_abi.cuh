// What the sample kernel (kit/src/sample.cu) and its host launcher (runtime/launch/sample.c) share: the
// per-row sampling parameters as the device reads them, and the per-slice partials of the workspace.
// Plain C, valid C++; the host includes this file too, so both sides read one definition.
#pragma once

#define SAMPLE_CANDIDATES 1024  // the top_k / top_p candidates (runtime/model/sampling.h SAMPLE_TOP_P_CANDIDATES)
#define SAMPLE_TOP_LOGPROBS 20  // most top_logprobs entries (SAMPLE_MAX_TOP_LOGPROBS)
#define SAMPLE_PER_THREAD 16    // logits per thread of a slice: slices = ceil(V / (threads · this))

// One sampling row (48 bytes; an array of them is 16-byte aligned).
typedef struct {
    float temperature;       // <= 0: argmax (ties to the lower id)
    float top_p;             // (0, 1]; >= 1: off
    int top_k;               // 0: off; more than SAMPLE_CANDIDATES counts as SAMPLE_CANDIDATES
    int top_logprobs;        // < 0: no log-probabilities; else the drawn token's and this many (<= 20) top ones
    unsigned long long seed; // the noise key
    long long pos;           // the absolute position the drawn token will occupy
    int allow_row;           // the row of the allow masks this row draws within, or -1
    int pad[3];
} sample_row_params;

// What one block learns about one slice of one row (192 bytes).
typedef struct {
    unsigned long long draw_key;   // max over the slice's drawable ids of order_key(l) << 32 | ~id
    unsigned long long vocab_key;  // the same over the tokenizer's ids (the log-probabilities' max)
    unsigned long long gumbel_key; // max over the drawable ids of order_key(q) << 32 | ~id (untruncated draw)
    float sum_l;                   // Σ exp(l − max_vocab) over the tokenizer's ids
    float sum_z;                   // Σ exp(z − M) over the drawable ids (top_p without top_k)
    unsigned long long top[SAMPLE_TOP_LOGPROBS]; // the slice's most likely tokenizer ids, keys as vocab_key
} sample_partial;
