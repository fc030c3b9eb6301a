/* DSML tool calls (model.md §5, runtime/tokenizer/dsml.h): the calls block exactly as dsml_render_calls
 * writes it and dsml_parse reads it back, with ｜DSML｜ as its control-token symbol, the tool names
 * offered, and each parameter's value governed by the function's "parameters" schema: string="true"
 * with the raw text for string alternatives, string="false" with JSON for the others.
 *
 * What keeps every output parseable: names never contain '"' or a newline; raw values never contain
 * NUL (the parser refuses a block holding one) or U+FF5C, so the text "｜DSML｜" (which is how the
 * control token decodes) cannot appear inside a value and end it early; JSON values spell U+FF5C as
 * \uff5c for the same reason. */
#include "runtime/common/error.h"
#include "runtime/grammar/schema.h"
#include "runtime/tokenizer/dsml.h"
#include "runtime/tokenizer/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CALLS 64
#define EXTRA_NAME "[A-Za-z_][A-Za-z0-9_.-]{0,63}" /* additional parameters' names */

/* text, the ｜DSML｜ symbol, text; returns the state after it. */
static uint32_t tag(gr_nfa *a, uint32_t from, const char *before, const char *after)
{
    uint32_t x = nfa_then(a, from, before), y = nfa_state(a);
    nfa_edge(a, x, y, GR_SYM_DSML, GR_SYM_DSML);
    return nfa_then(a, y, after);
}

static void tag_to(gr_nfa *a, uint32_t from, uint32_t to, const char *before, const char *after)
{
    nfa_eps(a, tag(a, from, before, after), to);
}

static int name_ok(const char *s, size_t n)
{
    return n && !memchr(s, '"', n) && !memchr(s, '\n', n) && !memchr(s, 0, n) &&
           utf8_valid((const uint8_t *)s, n) && !memmem(s, n, DSML_TOKEN, strlen(DSML_TOKEN));
}

typedef struct {
    uint32_t n;
    const char **names;
    size_t *lens;
    gs_at *at; /* [n + 1], the last for additional parameters */
} params_ctx;

static int param(gs_ctx *s, void *ctx, uint32_t i, uint32_t from, uint32_t to)
{
    params_ctx *p = ctx;
    gr_nfa *a = s->a;
    uint32_t name = tag(a, from, "<", " parameter name=\""), named = nfa_state(a);
    if (i < p->n)
        nfa_lit(a, name, named, p->names[i], p->lens[i]);
    else if (gs_other_name(s, p->names, p->lens, p->n, EXTRA_NAME, name, named))
        return -1;
    uint32_t kind = nfa_then(a, named, "\" string=\""), value_end = nfa_state(a);
    gs_alts alts = {0}, str = {0}, other = {0};
    int rc = gs_flatten(s, &p->at[i], &alts);
    for (uint32_t k = 0; !rc && k < alts.n; k++) { /* strings raw, everything else as JSON */
        const gs_alt *alt = &alts.a[k];
        int is_str = alt->type == GS_STR || (alt->type == GS_LIT && json_is_string(alt->lit));
        gs_alts *dst = is_str ? &str : &other;
        if (dst->n == dst->cap) {
            uint32_t cap = dst->cap ? 2 * dst->cap : 8;
            gs_alt *x = dsk_realloc(dst->a, cap * sizeof *x);
            if (!x) {
                rc = -1;
                break;
            }
            dst->a = x;
            dst->cap = cap;
        }
        dst->a[dst->n++] = *alt;
    }
    if (!rc && str.n)
        rc = gs_emit_alts(s, &str, p->at[i].level, nfa_then(a, kind, "true\">"), value_end, 1);
    if (!rc && other.n)
        rc = gs_emit_alts(s, &other, p->at[i].level, nfa_then(a, kind, "false\">"), value_end, 0);
    free(alts.a);
    free(str.a);
    free(other.a);
    tag_to(a, value_end, to, "</", " parameter>");
    return rc || a->failed ? -1 : 0;
}

static void newline_sep(gs_ctx *s, uint32_t from, uint32_t to)
{
    nfa_str(s->a, from, to, "\n");
}

static const char *const params_words[] = {"type", "properties", "required", "additionalProperties", "title",
                                           "description", "$defs", "definitions", "$schema", "$comment",
                                           "$id", "default", "examples", NULL};

/* One invoke of a tool: its name, then its parameters as gs_emit_members lays out an object. */
static int invoke(gs_ctx *s, const char *name, size_t name_len, const json_t *schema, const char *where,
                  uint32_t from, uint32_t to)
{
    gr_nfa *a = s->a;
    uint32_t named = tag(a, from, "<", " invoke name=\""), body = nfa_state(a);
    nfa_lit(a, named, body, name, name_len);
    body = nfa_then(a, body, "\">\n");
    uint32_t end = nfa_state(a);
    tag_to(a, end, to, "\n</", " invoke>");
    if (!schema) { /* no parameters */
        nfa_eps(a, body, end);
        return a->failed ? -1 : 0;
    }
    if (!json_is_object(schema))
        return dsk_err("%s.parameters must be an object schema", where);
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)schema, key, v) {
        int k = 0;
        while (params_words[k] && strcmp(params_words[k], key))
            k++;
        if (!params_words[k])
            return dsk_err("%s.parameters: \"%s\" is not supported (parameters must be an object schema with "
                           "properties)", where, key);
    }
    const json_t *type = json_object_get(schema, "type"), *props = json_object_get(schema, "properties");
    const json_t *req = json_object_get(schema, "required"), *add = json_object_get(schema, "additionalProperties");
    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "object")))
        return dsk_err("%s.parameters must have \"type\": \"object\"", where);
    if ((props && !json_is_object(props)) || (req && !json_is_array(req)) ||
        (add && !json_is_boolean(add) && !json_is_object(add)))
        return dsk_err("%s.parameters: properties, required or additionalProperties has the wrong type", where);
    size_t np = json_object_size(props), cap = np + json_array_size(req) + 1;
    params_ctx p = {0};
    p.names = gs_alloc(s, cap * sizeof *p.names);
    p.lens = gs_alloc(s, cap * sizeof *p.lens);
    p.at = gs_alloc(s, cap * sizeof *p.at);
    uint8_t *required = gs_alloc(s, cap);
    gs_xs *xs = gs_alloc(s, sizeof *xs);
    if (!p.names || !p.lens || !p.at || !required || !xs)
        return -1;
    *xs = (gs_xs){schema, NULL};
    const json_t *add_schema = add && json_is_object(add) ? add : json_true();
    int has_add = add ? !json_is_false(add) : !np;
    gs_at add_at = {add_schema, schema, "#/additionalProperties", xs, 0};
    json_object_foreach((json_t *)props, key, v) {
        int needed = 0;
        size_t i;
        const json_t *r;
        json_array_foreach(req, i, r) needed |= json_is_string(r) && !strcmp(json_string_value(r), key);
        if (!name_ok(key, strlen(key))) {
            if (needed)
                return dsk_err("%s: required parameter \"%s\" cannot be written in DSML (a quote, newline or "
                               "｜DSML｜ in its name)", where, key);
            continue;
        }
        p.names[p.n] = key;
        p.lens[p.n] = strlen(key);
        p.at[p.n] = (gs_at){v, schema, gs_path(s, "#/properties", key), xs, 0};
        required[p.n++] = (uint8_t)needed;
    }
    size_t i;
    const json_t *r;
    json_array_foreach(req, i, r) {
        if (!json_is_string(r))
            return dsk_err("%s.parameters.required must list strings", where);
        if (json_object_get(props, json_string_value(r)))
            continue;
        if (!has_add || !name_ok(json_string_value(r), json_string_length(r)))
            return dsk_err("%s: required parameter \"%s\" is not allowed by the schema", where, json_string_value(r));
        p.names[p.n] = json_string_value(r);
        p.lens[p.n] = json_string_length(r);
        p.at[p.n] = add_at;
        required[p.n++] = 1;
    }
    p.at[p.n] = add_at;
    gs_members m = {p.n, required, has_add, param, newline_sep, &p};
    if (gs_emit_members(s, &m, body, end, end))
        return dsk_err_ctx("%s.parameters", where);
    return 0;
}

/* The union of one invoke of each offered tool (or of force_name only) from `from` to `to`. */
static int invokes(gs_ctx *s, const json_t *tools, const char *force_name, uint32_t from, uint32_t to)
{
    size_t i, matched = 0;
    const json_t *tool;
    json_array_foreach(tools, i, tool) {
        char where[64];
        snprintf(where, sizeof where, "tools[%zu].function", i);
        const json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(fn))
            return dsk_err("tools[%zu]: expected {\"type\": \"function\", \"function\": {...}}", i);
        dsk_buf name = {0};
        if (dsml_tool_name(tool, fn, &name))
            return dsk_err_ctx("tools[%zu]", i);
        int rc = 0;
        if (!name_ok(name.data, name.len)) {
            rc = dsk_err("tools[%zu]: the name cannot be written in DSML (empty, or a quote or newline in it)", i);
        } else if (!force_name || (strlen(force_name) == name.len && !memcmp(force_name, name.data, name.len))) {
            matched++;
            rc = invoke(s, name.data, name.len, json_object_get(fn, "parameters"), where, from, to);
        }
        dsk_buf_free(&name);
        if (rc)
            return -1;
    }
    if (!matched)
        return dsk_err("the forced tool \"%s\" is not among the tools", force_name);
    return 0;
}

/* "\n\n<calls>\n" then 1..max_calls invokes (0: any number) joined by newlines, then "\n</calls>".
 * A bounded count repeats the invokes as copies. */
static int compile_tools(gs_ctx *s, const json_t *tools, const char *force_name, int max_calls)
{
    gr_nfa *a = s->a;
    uint32_t first = tag(a, a->start, "\n\n<", " calls>\n"), at = first, done = nfa_state(a);
    for (int k = 0; k < (max_calls ? max_calls : 1) && !a->failed; k++) {
        uint32_t end = nfa_state(a);
        if (invokes(s, tools, force_name, at, end))
            return -1;
        nfa_eps(a, end, done);
        at = nfa_then(a, end, "\n");
        if (!max_calls) /* any number: back to the first invoke */
            nfa_eps(a, at, first);
    }
    tag_to(a, done, a->final, "\n</", " calls>");
    return a->failed ? -1 : 0;
}

int grammar_from_tools(const grammar_vocab *v, const json_t *tools, const char *force_name, int max_calls,
                       const grammar_options *opt, grammar **out)
{
    *out = NULL;
    if (v->dsml < 0)
        return dsk_err("tool-call grammar: the tokenizer has no %s control token", DSML_TOKEN);
    if (!json_is_array(tools) || !json_array_size(tools))
        return dsk_err("tool-call grammar: tools must be a non-empty array");
    if (max_calls < 0 || max_calls > MAX_CALLS)
        return dsk_err("tool-call grammar: max_calls %d is outside 0..%d", max_calls, MAX_CALLS);
    gr_build b;
    gs_ctx s;
    if (build_init(&b, v, opt)) {
        build_free(&b);
        return dsk_err_ctx("tool-call grammar");
    }
    b.uses_dsml = 1;
    int rc = gs_init(&s, &b);
    if (!rc) {
        cset_add(&s.excluded, 0xFF5C, 0xFF5C);
        rc = compile_tools(&s, tools, force_name, max_calls) || gs_drain_rules(&s) ? -1 : 0;
    }
    if (!rc)
        rc = build_finish(&b, out);
    gs_free(&s);
    build_free(&b);
    return rc ? dsk_err_ctx("tool-call grammar") : 0;
}
