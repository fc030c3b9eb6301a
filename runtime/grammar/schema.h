/* The JSON Schema compiler's shared state (schema.c: structure and $ref, schema_container.c: objects
 * and arrays, schema_scalar.c: strings and literals, schema_number.c: numbers, tools.c: DSML tool
 * calls).
 *
 * A value position compiles in two steps: flatten the schema into alternatives of one JSON type
 * each ($ref, anyOf/oneOf, allOf of one, type arrays and enum/const unfolded), then emit each kind.
 * Recursion is unrolled into levels: a $ref to a schema already being expanded on the current path
 * moves one level down, and containers reached that way are separate rules entered by a call, so
 * the matcher's stack holds one frame per level. Beyond options.max_recursion levels a recursive
 * alternative is dropped, which bounds every output's nesting (and the grammar's size). */
#ifndef DSK_GRAMMAR_SCHEMA_H
#define DSK_GRAMMAR_SCHEMA_H

#include <jansson.h>

#include "runtime/grammar/grammar_internal.h"

#define GS_MAX_NEST 256     /* schema objects nested along one compile path */
#define GS_MAX_STR_LEN 512  /* string length bounds above this are generated as this (still valid) */

/* Schemas inlined since the last recursive step (a $ref to one of them recurses). */
typedef struct gs_xs {
    const json_t *node;
    const struct gs_xs *up;
} gs_xs;

/* A schema node in context. */
typedef struct {
    const json_t *node;
    const json_t *doc; /* the document its $refs resolve in */
    const char *path;  /* JSON pointer of node in doc, as "#/properties/x" */
    const gs_xs *xs;
    int level;
} gs_at;

enum { GS_NULL, GS_BOOL, GS_INT, GS_NUM, GS_STR, GS_OBJ, GS_ARR, GS_LIT };

typedef struct {
    int type;
    gs_at at;
    const json_t *lit; /* GS_LIT: the value */
} gs_alt;

typedef struct {
    gs_alt *a;
    uint32_t n, cap;
} gs_alts;

typedef struct gs_block gs_block;
typedef struct gs_rule gs_rule;

typedef struct gs_ctx_ {
    gr_build *b;
    gr_nfa *a;          /* the rule being written */
    gr_cset excluded;   /* code points never written raw (U+FF5C in DSML grammars) */
    int max_ws, max_levels;
    int nest;           /* compile recursion depth */
    gs_block *arena;    /* paths, context chains, queued alternatives */
    gs_rule *rules;     /* container rules made so far (memo and work queue) */
    uint32_t n_rules, cap_rules, next_rule;
    json_t *any_doc;    /* the "any JSON value" schema that true / {} / absent items stand for */
    /* gs_value, reached through the context so that the container bodies (which nest values)
     * and the value dispatch (which opens containers) live in separate files without a cycle */
    int (*value)(struct gs_ctx_ *s, const gs_at *at, uint32_t from, uint32_t to, int raw_strings);
} gs_ctx;

int gs_init(gs_ctx *s, gr_build *b);
void gs_free(gs_ctx *s);
/* The arena (schema_ctx.c): blocks freed together by gs_free. */
void *gs_alloc(gs_ctx *s, size_t n);
void gs_arena_free(gs_ctx *s);
/* path + "/" + key (JSON-pointer escaped), in the arena. */
const char *gs_path(gs_ctx *s, const char *path, const char *key);
const char *gs_path_index(gs_ctx *s, const char *path, const char *key, size_t i);

/* The alternatives of the schema at `at`. */
int gs_flatten(gs_ctx *s, const gs_at *at, gs_alts *out);
/* One JSON value of the schema at `at` between from and to. raw_strings: string alternatives are
 * written unquoted, as their raw text (DSML string="true" values); the other alternatives are JSON. */
int gs_value(gs_ctx *s, const gs_at *at, uint32_t from, uint32_t to, int raw_strings);
/* Emit alternatives (of a position at `level`). */
int gs_emit_alts(gs_ctx *s, const gs_alts *alts, int level, uint32_t from, uint32_t to, int raw_strings);
/* The body of an object or array alternative, after its opening bracket through its closing one. */
int gs_object_body(gs_ctx *s, const gs_alt *alt, uint32_t from, uint32_t to);
int gs_array_body(gs_ctx *s, const gs_alt *alt, uint32_t from, uint32_t to);
/* Compile the container rules that calls have asked for, until none is left. */
int gs_drain_rules(gs_ctx *s);
/* The member sequence of an object (or a DSML invoke): declared members in order, each optional
 * unless required, then repeatable additional members. Paths that emit nothing end at to_empty,
 * the rest at to_any. */
typedef struct {
    uint32_t n;
    const uint8_t *required; /* [n] */
    int additional;
    int (*member)(gs_ctx *s, void *ctx, uint32_t i, uint32_t from, uint32_t to); /* i == n: additional */
    void (*sep)(gs_ctx *s, uint32_t from, uint32_t to);
    void *ctx;
} gs_members;
int gs_emit_members(gs_ctx *s, const gs_members *m, uint32_t from, uint32_t to_empty, uint32_t to_any);

/* schema_scalar.c */
int gs_string(gs_ctx *s, const gs_at *at, uint32_t from, uint32_t to, int raw);
int gs_number(gs_ctx *s, const gs_at *at, int integer, uint32_t from, uint32_t to);
/* A JSON value as compact JSON text (raw: a string's own text, or -1 if it cannot be written so). */
int gs_literal(gs_ctx *s, const json_t *v, uint32_t from, uint32_t to, int raw);
/* A key that is none of names[0..n), between from and to (quotes not included): JSON string
 * content without escapes (with no names: any JSON string content), or base_regex's strings. */
int gs_other_name(gs_ctx *s, const char *const *names, const size_t *lens, uint32_t n, const char *base_regex,
                  uint32_t from, uint32_t to);
int gs_json_key(gs_ctx *s, const char *name, size_t len, uint32_t from, uint32_t to);

#endif
