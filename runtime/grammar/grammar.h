/* Constrained decoding (structured output): a grammar compiled from a JSON Schema, a regex, a list of
 * choices or a set of DSML tools, and a matcher per sequence that says which token ids may come next.
 *
 *   grammar_vocab_new(tok, 129280, eos, &v);      once per tokenizer; read-only, shared by all threads
 *   grammar_from_schema(v, schema, NULL, &g);      per request; a refusal names the keyword and path
 *   grammar_matcher_new(g, &m);                    per sequence
 *   loop: grammar_allowed(m, mask); sample a token whose bit is set; grammar_accept_token(m, id);
 *
 * The language is over the bytes the tokens decode to, plus control tokens as single symbols (EOS;
 * the ｜DSML｜ marker in tool-call grammars). A token is allowed iff all its bytes keep the output a
 * prefix of a sentence of the language; EOS is allowed iff the output is a whole sentence. Every
 * other control token, and every id the tokenizer lacks, is never allowed. See docs/grammar.md. */
#ifndef DSK_GRAMMAR_H
#define DSK_GRAMMAR_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/tokenizer/tokenizer.h"

typedef struct grammar_vocab grammar_vocab;
typedef struct grammar grammar;
typedef struct grammar_matcher grammar_matcher;

/* The vocabulary's byte strings, tries and masks, built once from the tokenizer. vocab_size is the
 * model's (the mask width); ids at or above tok_vocab_size(tok) are never allowed. eos_id is the id
 * that ends a sentence (usually tok_eos(tok)). */
int grammar_vocab_new(const dsk_tokenizer *tok, int vocab_size, int32_t eos_id, grammar_vocab **out);
void grammar_vocab_free(grammar_vocab *v);
/* uint32_t words a mask has: (vocab_size + 31) / 32. */
size_t grammar_mask_words(const grammar_vocab *v);

/* Compile options; a NULL options pointer means the defaults (grammar_options_default). */
typedef struct {
    int max_ws;        /* JSON: most consecutive whitespace bytes between tokens (default 16; 0: none) */
    int max_recursion; /* nesting levels through recursive $refs and any-JSON values (default 8, <= 32) */
    int max_states;    /* refuse a grammar whose automata would hold more states (default 200000) */
} grammar_options;
grammar_options grammar_options_default(void);

/* A JSON Schema (draft 2020-12 subset, docs/grammar.md): the output is one JSON value that validates. */
int grammar_from_schema(const grammar_vocab *v, const json_t *schema, const grammar_options *opt,
                        grammar **out);
/* response_format {"type": "json_object"}: any JSON object. */
int grammar_from_json_object(const grammar_vocab *v, const grammar_options *opt, grammar **out);
/* A regex (docs/grammar.md lists the syntax); the whole output must match (anchors are implicit). */
int grammar_from_regex(const grammar_vocab *v, const char *regex, size_t len, const grammar_options *opt,
                       grammar **out);
/* Exactly one of n byte strings. */
int grammar_from_choices(const grammar_vocab *v, const char *const *choices, const size_t *lens, size_t n,
                         grammar **out);
/* DSML tool calls (model.md §5): a calls block of 1..max_calls invokes (0: no limit) of the OpenAI
 * tools array's functions, each invoke's parameters governed by the function's "parameters" schema.
 * force_name: only that function (as the prompt spells it, "namespace::name" when namespaced); NULL:
 * any of the tools. The vocabulary needs the ｜DSML｜ control token. */
int grammar_from_tools(const grammar_vocab *v, const json_t *tools, const char *force_name, int max_calls,
                       const grammar_options *opt, grammar **out);
/* States of the compiled automata (all rules), and the bytes the grammar holds now (tables, and the
 * token sets cached so far), for logs and benchmarks. */
size_t grammar_state_count(const grammar *g);
size_t grammar_memory(const grammar *g);
/* A grammar is read-only once compiled (its mask cache fills lazily and is thread-safe): any number
 * of matchers on any threads may share it. Free it after its last matcher. */
void grammar_free(grammar *g);

/* A matcher: one sequence's position in the grammar. Not thread-safe itself. */
int grammar_matcher_new(const grammar *g, grammar_matcher **out);
int grammar_matcher_clone(const grammar_matcher *m, grammar_matcher **out);
/* Make dst equal src (same grammar), e.g. to roll a drafted sequence back. */
int grammar_matcher_copy(grammar_matcher *dst, const grammar_matcher *src);
void grammar_matcher_free(grammar_matcher *m);
/* Fill mask (grammar_mask_words words): bit i of word i/32 set iff token i may come next. After EOS
 * has been accepted the mask is empty. */
int grammar_allowed(grammar_matcher *m, uint32_t *mask);
/* Advance over one token; an id the mask would not allow is an error and leaves m unchanged. */
int grammar_accept_token(grammar_matcher *m, int32_t id);
/* Whether the output so far is a whole sentence (EOS allowed now). */
int grammar_is_accepting(const grammar_matcher *m);
/* Whether EOS has been accepted. */
int grammar_is_finished(const grammar_matcher *m);
/* The fewest bytes (control tokens count one) that would complete the output from here: lets a server
 * steer toward the end as max_tokens nears, and lets tests and benchmarks finish their walks. */
uint32_t grammar_remaining(const grammar_matcher *m);

#endif
