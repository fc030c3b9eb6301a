/* Generation for one prompt through the engine: prefill (in chunks of the engine's rows per step), then
 * serial decode or DSpark drafting with exact verification. Both paths emit the same tokens bit for bit
 * (docs/model.md "Drafting"), on every backend. */
#ifndef DSK_ENGINE_GENERATE_H
#define DSK_ENGINE_GENERATE_H

#include "runtime/engine/engine.h"

#include <stdint.h>
#include <stdio.h>

typedef struct {
    int max_tokens;     /* new tokens at most */
    sample_params sp;   /* temperature 0: argmax */
    int draft;          /* DSpark drafting + verification */
    int stop_at_eos;    /* stop after emitting eos_token_id */
    int prefill_chunk;  /* rows per prefill step (0: the engine's max_rows) */
    FILE *dump_logits;  /* if set: the fp32 logits row that chose each token (little-endian) */
    /* called with each new token as soon as it is chosen (may be NULL); nonzero stops with an error */
    int (*on_token)(int32_t token, void *ctx);
    void *ctx;
} gen_opts;

typedef struct {
    int n_prompt, n_out;
    double prefill_s, decode_s;
    int rounds;          /* verify rounds (draft) */
    int accepted;        /* drafts accepted over all rounds */
} gen_stats;

/* Generate after prompt[0..n_prompt) into out[max_tokens]; st->n_out gets the count. */
int engine_generate(engine *e, const int32_t *prompt, int n_prompt, const gen_opts *o, int32_t *out, gen_stats *st);

#endif
