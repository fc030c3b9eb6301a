/* Random walks over a grammar on the real vocabulary, shared by the tests and `dskit bench grammar`:
 * at each step a token is picked uniformly among those the mask allows (EOS, once allowed, with
 * probability 0.3), and past a step budget the walk steers to the end by the allowed single-byte
 * (or control) token that leaves the fewest bytes, so every walk finishes. */
#ifndef DSK_GRAMMAR_WALK_H
#define DSK_GRAMMAR_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/grammar/grammar.h"

typedef struct {
    const dsk_tokenizer *tok;
    const grammar_vocab *v;
    int32_t eos;
    int32_t short_ids[512]; /* single-byte tokens and the ｜DSML｜ control token: steering candidates */
    int n_short;
} grammar_walk_env;

typedef struct {
    dsk_buf text;    /* the output: text tokens' bytes and control tokens' strings */
    size_t tokens;   /* accepted, EOS included */
    int finished;    /* ended with EOS */
    double *mask_us; /* the time of each grammar_allowed call, when timed */
    size_t n_times, cap_times;
} grammar_walk;

enum { GRAMMAR_WALK_UNTIMED, GRAMMAR_WALK_WALL, GRAMMAR_WALK_CPU };

void grammar_walk_env_init(grammar_walk_env *e, const dsk_tokenizer *tok, const grammar_vocab *v);
/* Walk m to its end (at most max_tokens uniform steps, then steering). timed: record each mask's
 * time, on the wall clock or as the thread's CPU time. */
int grammar_random_walk(const grammar_walk_env *e, grammar_matcher *m, dsk_rng *r, size_t max_tokens, int timed,
                        grammar_walk *out);
void grammar_walk_free(grammar_walk *w);

static inline int grammar_mask_has(const uint32_t *mask, int32_t id)
{
    return id >= 0 && (mask[id / 32] >> (id & 31) & 1);
}

#endif
