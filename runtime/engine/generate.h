/* Generation with the CPU model: prefill, then serial decode or DSpark drafting with exact verification.
 * Both paths emit the same tokens bit for bit (docs/model.md "Drafting"). */
#ifndef DSK_ENGINE_GENERATE_H
#define DSK_ENGINE_GENERATE_H

#include "runtime/cpu/cpu_model.h"

#include <stdint.h>
#include <stdio.h>

typedef struct {
    int max_tokens;     /* new tokens at most */
    float temperature;  /* 0: argmax */
    uint64_t seed;      /* Gumbel noise key */
    int draft;          /* DSpark drafting + verification */
    int stop_at_eos;    /* stop after emitting eos_token_id */
    FILE *dump_logits;  /* if set: the fp32 logits row that chose each token (little-endian) */
    /* called with each new token as soon as it is chosen (may be NULL) */
    int (*on_token)(int32_t token, void *ctx);
    void *ctx;
} gen_opts;

typedef struct {
    int n_prompt, n_out;
    double prefill_s, decode_s;
    int rounds;          /* verify rounds (draft) */
    int accepted;        /* drafts accepted over all rounds */
} gen_stats;

/* Generate after prompt[0..n_prompt) into out[max_tokens]; *n_out gets the count. */
int model_generate(const cpu_model *m, const int32_t *prompt, int n_prompt, const gen_opts *o, int32_t *out,
                   gen_stats *st);

#endif
