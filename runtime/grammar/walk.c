/* Random walks (walk.h). */
#include "runtime/grammar/walk.h"
#include "runtime/common/error.h"
#include "runtime/tokenizer/dsml.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void grammar_walk_env_init(grammar_walk_env *e, const dsk_tokenizer *tok, const grammar_vocab *v)
{
    e->tok = tok;
    e->v = v;
    e->eos = tok_eos(tok);
    e->n_short = 0;
    for (int32_t id = 0; id < tok_vocab_size(tok) && e->n_short < 511; id++) {
        size_t len;
        if (!tok_is_added(tok, id) && tok_bytes(tok, id, &len) && len == 1)
            e->short_ids[e->n_short++] = id;
    }
    int32_t dsml = tok_id(tok, DSML_TOKEN);
    if (dsml >= 0)
        e->short_ids[e->n_short++] = dsml;
}

void grammar_walk_free(grammar_walk *w)
{
    dsk_buf_free(&w->text);
    free(w->mask_us);
    *w = (grammar_walk){0};
}

static int record(grammar_walk *out, double us)
{
    if (out->n_times == out->cap_times) {
        size_t cap = out->cap_times ? 2 * out->cap_times : 256;
        double *t = dsk_realloc(out->mask_us, cap * sizeof *t);
        if (!t)
            return -1;
        out->mask_us = t;
        out->cap_times = cap;
    }
    out->mask_us[out->n_times++] = us;
    return 0;
}

/* The allowed steering candidate that leaves the fewest bytes to the end (ties at random). */
static int steer(const grammar_walk_env *e, const grammar_matcher *m, grammar_matcher *probe, const uint32_t *mask,
                 dsk_rng *r, int32_t *pick)
{
    uint32_t best = UINT32_MAX;
    for (int k = 0; k < e->n_short; k++) {
        int32_t c = e->short_ids[k];
        if (!grammar_mask_has(mask, c))
            continue;
        if (grammar_matcher_copy(probe, m) || grammar_accept_token(probe, c))
            return -1;
        uint32_t left = grammar_remaining(probe);
        if (left < best || (left == best && dsk_rng_below(r, 2))) {
            best = left;
            *pick = c;
        }
    }
    return 0;
}

/* Seconds on the wall clock, or of this thread's CPU time (which a loaded machine does not inflate). */
static double clock_s(int timed)
{
    if (timed != GRAMMAR_WALK_CPU)
        return dsk_now();
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int grammar_random_walk(const grammar_walk_env *e, grammar_matcher *m, dsk_rng *r, size_t max_tokens, int timed,
                        grammar_walk *out)
{
    size_t words = grammar_mask_words(e->v);
    uint32_t *mask = dsk_malloc(words * sizeof *mask);
    int32_t *ids = dsk_malloc(words * 32 * sizeof *ids);
    grammar_matcher *probe = NULL;
    int rc = -1;
    if (!mask || !ids || grammar_matcher_clone(m, &probe))
        goto done;
    for (;;) {
        double t0 = timed ? clock_s(timed) : 0;
        if (grammar_allowed(m, mask))
            goto done;
        double us = timed ? (clock_s(timed) - t0) * 1e6 : 0;
        if (timed && record(out, us))
            goto done;
        size_t n = 0;
        for (size_t w = 0; w < words; w++)
            for (uint32_t bits = mask[w]; bits; bits &= bits - 1)
                ids[n++] = (int32_t)(w * 32 + (uint32_t)__builtin_ctz(bits));
        if (!n) {
            dsk_err("random walk: empty mask after %zu tokens", out->tokens);
            goto done;
        }
        int32_t pick = ids[dsk_rng_below(r, n)];
        if (grammar_mask_has(mask, e->eos) && (dsk_rng_f32(r) < 0.3f || out->tokens >= max_tokens))
            pick = e->eos;
        else if (out->tokens >= max_tokens && steer(e, m, probe, mask, r, &pick))
            goto done;
        if (grammar_accept_token(m, pick))
            goto done;
        out->tokens++;
        if (pick == e->eos) {
            out->finished = 1;
            break;
        }
        size_t len;
        const uint8_t *b = tok_bytes(e->tok, pick, &len);
        if (b && dsk_buf_append(&out->text, b, len))
            goto done;
    }
    rc = 0;
done:
    grammar_matcher_free(probe);
    free(mask);
    free(ids);
    return rc;
}
