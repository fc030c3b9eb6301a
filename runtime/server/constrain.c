/* Structured output per sequence (constrain.h): compiling a request's spec, masks with steering toward
 * the end of the token budget, advancing over drawn and drafted tokens. */
#include "runtime/server/constrain.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/grammar/walk.h"
#include "runtime/tokenizer/dsml.h"

#include <stdlib.h>
#include <string.h>

/* Steering toward the end of the token budget, so a constrained reply completes within max_tokens.
 * Within STEER_WINDOW tokens of the shortest completion, a state with few allowed tokens (structure,
 * literals, enums: where one token can commit the reply to much more output) keeps only the tokens after
 * which the completion and its EOS still fit, each checked. Within STEER_SLACK, a state with many allowed
 * tokens (inside free strings) keeps only single-byte tokens, checked the same way. A reply can still miss
 * its budget only when, just before STEER_SLACK, one token out of a large set raised the shortest completion
 * by more than STEER_SLACK bytes (docs/serving.md). Far from the end it never acts. */
#define STEER_WINDOW 256
#define STEER_SLACK 16
#define STEER_MAX_CANDIDATES 512 /* "few allowed tokens": at most this many, each checked */

void srv_spec_free(srv_spec *sp)
{
    json_decref(sp->schema);
    json_decref(sp->regex);
    json_decref(sp->choices);
    json_decref(sp->tools);
    free(sp->force_name);
    *sp = (srv_spec){0};
}

int srv_genv_init(srv_genv *env, const dsk_tokenizer *tok, int vocab_size)
{
    *env = (srv_genv){.eos = tok_eos(tok), .think_end = tok_id(tok, DSML_END_THINK)};
    if (grammar_vocab_new(tok, vocab_size, env->eos, &env->v))
        return dsk_err_ctx("structured output: the grammar vocabulary");
    env->words = grammar_mask_words(env->v);
    if (!(env->free_mask = dsk_calloc(env->words, sizeof(uint32_t)))) {
        srv_genv_free(env);
        return -1;
    }
    for (int32_t id = 0; id < vocab_size; id++)
        env->free_mask[id / 32] |= 1u << (id & 31);
    if (env->eos >= 0 && env->eos < vocab_size)
        env->free_mask[env->eos / 32] &= ~(1u << (env->eos & 31));
    /* the walk environment's candidates are exactly steering's: one byte (or one control symbol) each */
    grammar_walk_env we;
    grammar_walk_env_init(&we, tok, env->v);
    memcpy(env->short_ids, we.short_ids, sizeof(int32_t) * (size_t)we.n_short);
    env->n_short = we.n_short;
    return 0;
}

void srv_genv_free(srv_genv *env)
{
    grammar_vocab_free(env->v);
    free(env->free_mask);
    *env = (srv_genv){0};
}

int srv_spec_compile(const srv_genv *env, const srv_spec *sp, grammar **out)
{
    *out = NULL;
    switch (sp->kind) {
    case CONS_JSON_OBJECT: return grammar_from_json_object(env->v, NULL, out);
    case CONS_SCHEMA: return grammar_from_schema(env->v, sp->schema, NULL, out);
    case CONS_REGEX:
        return grammar_from_regex(env->v, json_string_value(sp->regex), json_string_length(sp->regex), NULL, out);
    case CONS_TOOLS: return grammar_from_tools(env->v, sp->tools, sp->force_name, sp->max_calls, NULL, out);
    case CONS_CHOICE: {
        size_t n = json_array_size(sp->choices);
        const char **c = dsk_calloc(n, sizeof *c);
        size_t *lens = dsk_calloc(n, sizeof *lens);
        int rc = -1;
        if (c && lens) {
            for (size_t i = 0; i < n; i++) {
                c[i] = json_string_value(json_array_get(sp->choices, i));
                lens[i] = json_string_length(json_array_get(sp->choices, i));
            }
            rc = grammar_from_choices(env->v, c, lens, n, out);
        }
        free(c);
        free(lens);
        return rc;
    }
    default: return dsk_err("structured output: no constraint of kind %d", sp->kind);
    }
}

int srv_cseq_open(srv_cseq *c, const srv_genv *env, const grammar *g, int think_first, int window)
{
    *c = (srv_cseq){.active = !think_first || env->think_end < 0};
    if (grammar_matcher_new(g, &c->m) || grammar_matcher_new(g, &c->walk) || grammar_matcher_new(g, &c->probe) ||
        !(c->masks = dsk_malloc(sizeof(uint32_t) * env->words * (size_t)window))) {
        srv_cseq_close(c);
        return dsk_err_ctx("structured output: the sequence's matcher");
    }
    return 0;
}

void srv_cseq_close(srv_cseq *c)
{
    grammar_matcher_free(c->m);
    grammar_matcher_free(c->walk);
    grammar_matcher_free(c->probe);
    free(c->masks);
    *c = (srv_cseq){0};
}

static void only(const srv_genv *env, uint32_t *mask, int32_t id)
{
    memset(mask, 0, sizeof(uint32_t) * env->words);
    mask[id / 32] |= 1u << (id & 31);
}

int srv_cseq_mask(const srv_genv *env, srv_cseq *c, grammar_matcher *m, int active, int64_t budget, uint32_t *mask)
{
    int64_t rem = grammar_remaining(m);
    if (!active) {
        /* </think> in time for the shortest constrained reply, its EOS and some room to steer */
        if (budget <= rem + 2 + 2 * STEER_SLACK)
            only(env, mask, env->think_end);
        else
            memcpy(mask, env->free_mask, sizeof(uint32_t) * env->words);
        return 0;
    }
    if (grammar_allowed(m, mask))
        return -1;
    if (budget > rem + 1 + STEER_WINDOW)
        return 0;
    /* the candidates: every allowed token when they are few, else the single-byte ones near the end */
    int32_t keep[STEER_MAX_CANDIDATES], cand[STEER_MAX_CANDIDATES];
    int n = 0, nc = 0, eos_ok = srv_mask_has(mask, env->eos), count = 0;
    for (size_t w = 0; w < env->words && count <= STEER_MAX_CANDIDATES; w++)
        for (uint32_t bits = mask[w]; bits && count <= STEER_MAX_CANDIDATES; bits &= bits - 1) {
            int32_t id = (int32_t)(w * 32) + __builtin_ctz(bits);
            if (count < STEER_MAX_CANDIDATES && id != env->eos)
                cand[nc++] = id;
            count++;
        }
    if (count > STEER_MAX_CANDIDATES) {
        if (budget > rem + 1 + STEER_SLACK)
            return 0;
        nc = 0;
        for (int k = 0; k < env->n_short; k++)
            if (srv_mask_has(mask, env->short_ids[k]))
                cand[nc++] = env->short_ids[k];
    }
    int32_t best = -1;
    int64_t best_left = INT64_MAX;
    for (int k = 0; k < nc; k++) {
        int32_t id = cand[k];
        if (grammar_matcher_copy(c->probe, m) || grammar_accept_token(c->probe, id))
            return -1;
        int64_t left = grammar_remaining(c->probe);
        if (left + 2 <= budget)
            keep[n++] = id;
        if (left < best_left)
            best_left = left, best = id;
    }
    if (!n && !eos_ok && best >= 0)
        keep[n++] = best; /* past the budget already (it was too small): still head for the end */
    if (!n && !eos_ok)
        return 0; /* no candidate at all (none allowed but EOS-less multi-byte ones): the grammar's mask */
    memset(mask, 0, sizeof(uint32_t) * env->words);
    for (int i = 0; i < n; i++)
        mask[keep[i] / 32] |= 1u << (keep[i] & 31);
    if (eos_ok)
        mask[env->eos / 32] |= 1u << (env->eos & 31);
    return 0;
}

int srv_cseq_advance(const srv_genv *env, grammar_matcher *m, int *active, int32_t tok)
{
    if (!*active) {
        if (tok == env->think_end)
            *active = 1;
        return 0;
    }
    return grammar_accept_token(m, tok);
}
