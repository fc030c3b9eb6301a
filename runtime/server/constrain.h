/* Structured output in the server (docs/serving.md "Structured output"): what a request asks for (parsed
 * by oai_parse.c), compiled on the request's HTTP thread into a runtime/grammar grammar, and followed per
 * sequence by the scheduler, which hands each sampling row its allowed-token mask (engine_row.allow).
 *
 * A row's mask is a function of its sequence's tokens before it and of how many tokens the reply may
 * still take, never of the other rows of the step or of drafting: so a constrained reply is the same
 * alone, batched and drafted. */
#ifndef DSK_SERVER_CONSTRAIN_H
#define DSK_SERVER_CONSTRAIN_H

#include "runtime/grammar/grammar.h"
#include "runtime/tokenizer/tokenizer.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum { CONS_NONE, CONS_JSON_OBJECT, CONS_SCHEMA, CONS_REGEX, CONS_CHOICE, CONS_TOOLS };

/* What a request asked for; the json values hold a reference (srv_spec_free). */
typedef struct {
    int kind;                 /* CONS_* */
    const char *field;        /* the request field that asked (for errors): "response_format", "guided_json", ... */
    json_t *schema;           /* CONS_SCHEMA */
    json_t *regex;            /* CONS_REGEX: a string */
    json_t *choices;          /* CONS_CHOICE: a non-empty array of strings */
    json_t *tools;            /* CONS_TOOLS: the request's tools */
    char *force_name;         /* CONS_TOOLS: a named tool_choice as the prompt spells it; NULL: any tool */
    int max_calls;            /* CONS_TOOLS: 1 with parallel_tool_calls false, else 0 (any number) */
} srv_spec;

void srv_spec_free(srv_spec *sp);

/* Built once per server from the tokenizer: the grammar vocabulary and what steering needs. Read-only
 * afterwards and shared by every thread. */
typedef struct {
    grammar_vocab *v;
    size_t words;             /* uint32_t words of a mask */
    int32_t eos, think_end;   /* think_end: the </think> id, -1 if the tokenizer lacks it */
    uint32_t *free_mask;      /* every id but EOS: thinking before a constrained reply */
    int32_t short_ids[512];   /* single-byte tokens and ｜DSML｜: the steering candidates */
    int n_short;
} srv_genv;

int srv_genv_init(srv_genv *env, const dsk_tokenizer *tok, int vocab_size);
void srv_genv_free(srv_genv *env);

/* Compile a request's spec (the caller's thread, before the request is queued). A refusal is -1 with the
 * grammar's message (naming the keyword and path, or the limit) in dsk_err_msg. */
int srv_spec_compile(const srv_genv *env, const srv_spec *sp, grammar **out);

/* One sequence's grammar state on the scheduler thread. */
typedef struct {
    grammar_matcher *m;       /* after the tokens emitted so far */
    grammar_matcher *walk;    /* a copy advanced through one round's drafts */
    grammar_matcher *probe;   /* steering: one candidate at a time */
    int active;               /* the constraint applies: thinking, when on, has ended */
    uint32_t *masks;          /* [window][words]: this round's rows' masks */
} srv_cseq;

/* think_first: the reply starts with reasoning (the prompt ended with <think>): free text up to </think>. */
int srv_cseq_open(srv_cseq *c, const srv_genv *env, const grammar *g, int think_first, int window);
void srv_cseq_close(srv_cseq *c);

/* The mask of a draw from state (m, active) when the reply may take `budget` more tokens, this one
 * included. Thinking: any token but EOS. Constrained: what the grammar allows, EOS only where it accepts.
 * Near the end of the budget the reply is steered (single-byte tokens that keep the shortest completion
 * within what is left, </think> in time) so that it completes: docs/serving.md. */
int srv_cseq_mask(const srv_genv *env, srv_cseq *c, grammar_matcher *m, int active, int64_t budget, uint32_t *mask);
/* Advance (m, active) over tok, a token the state's mask allowed. */
int srv_cseq_advance(const srv_genv *env, grammar_matcher *m, int *active, int32_t tok);

static inline int srv_mask_has(const uint32_t *mask, int32_t id)
{
    return id >= 0 && (mask[id / 32] >> (id & 31) & 1);
}

#endif
