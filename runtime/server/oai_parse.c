/* Request fields, one table per route: the JSON types a field takes and what the server does with it.
 * Null counts as absent (some clients send every field). */
#include "runtime/server/oai_parse.h"
#include "runtime/common/error.h"
#include "runtime/common/escape.h"
#include "runtime/tokenizer/dsml.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STOPS 16
#define MAX_STOP_BYTES 256

enum { T_BOOL = 1, T_INT = 2, T_NUM = 4, T_STR = 8, T_ARR = 16, T_OBJ = 32 };
enum { F_USE, F_IGNORE, F_REFUSE };

typedef struct {
    const char *name;
    unsigned types;
    int use;            /* F_REFUSE: refused whenever present (why in refuse_why) */
    const char *why;
} field;

static const char no_ebnf[] = "grammars (EBNF) are not supported; use guided_json, guided_regex or guided_choice";
static const char own_backend[] = "the structured-output backend is dskit's own (runtime/grammar): leave it out";
static const char no_ws_pattern[] = "whitespace in JSON output is fixed (at most 16 bytes in a row): leave it out";
static const char use_guided[] = "use response_format, guided_json, guided_regex or guided_choice";

static const field chat_fields[] = {
    {"model", T_STR, F_USE, NULL}, {"messages", T_ARR, F_USE, NULL}, {"stream", T_BOOL, F_USE, NULL},
    {"stream_options", T_OBJ, F_USE, NULL}, {"temperature", T_NUM | T_INT, F_USE, NULL},
    {"top_p", T_NUM | T_INT, F_USE, NULL}, {"top_k", T_INT, F_USE, NULL}, {"seed", T_INT, F_USE, NULL},
    {"max_tokens", T_INT, F_USE, NULL}, {"max_completion_tokens", T_INT, F_USE, NULL},
    {"stop", T_STR | T_ARR, F_USE, NULL}, {"logprobs", T_BOOL, F_USE, NULL}, {"top_logprobs", T_INT, F_USE, NULL},
    {"n", T_INT, F_USE, NULL}, {"tools", T_ARR, F_USE, NULL}, {"tool_choice", T_STR | T_OBJ, F_USE, NULL},
    {"parallel_tool_calls", T_BOOL, F_USE, NULL}, {"reasoning_effort", T_STR | T_INT, F_USE, NULL},
    {"chat_template_kwargs", T_OBJ, F_USE, NULL}, {"response_format", T_OBJ, F_USE, NULL},
    {"presence_penalty", T_NUM | T_INT, F_USE, NULL}, {"frequency_penalty", T_NUM | T_INT, F_USE, NULL},
    {"repetition_penalty", T_NUM | T_INT, F_USE, NULL}, {"min_p", T_NUM | T_INT, F_USE, NULL},
    {"logit_bias", T_OBJ, F_USE, NULL}, {"ignore_eos", T_BOOL, F_USE, NULL},
    {"return_token_ids", T_BOOL, F_USE, NULL}, {"user", T_STR, F_IGNORE, NULL},
    {"guided_json", T_OBJ | T_STR | T_BOOL, F_USE, NULL}, {"guided_regex", T_STR, F_USE, NULL},
    {"guided_choice", T_ARR, F_USE, NULL}, {"guided_grammar", ~0u, F_REFUSE, no_ebnf},
    {"guided_decoding_backend", ~0u, F_REFUSE, own_backend},
    {"guided_whitespace_pattern", ~0u, F_REFUSE, no_ws_pattern},
    {"structured_outputs", ~0u, F_REFUSE, use_guided},
    {"functions", ~0u, F_REFUSE, "the legacy functions field is not supported; use tools"},
    {"function_call", ~0u, F_REFUSE, "the legacy function_call field is not supported; use tool_choice"},
    {"prediction", ~0u, F_REFUSE, "predicted outputs are not supported"},
    {"audio", ~0u, F_REFUSE, "audio output is not supported"},
    {"modalities", ~0u, F_REFUSE, "only text output is supported"},
    {"web_search_options", ~0u, F_REFUSE, "web search is not supported"},
    {"best_of", ~0u, F_REFUSE, "best_of is not supported"},
    {NULL, 0, 0, NULL},
};

static const field completion_fields[] = {
    {"model", T_STR, F_USE, NULL}, {"prompt", T_STR | T_ARR, F_USE, NULL}, {"stream", T_BOOL, F_USE, NULL},
    {"stream_options", T_OBJ, F_USE, NULL}, {"temperature", T_NUM | T_INT, F_USE, NULL},
    {"top_p", T_NUM | T_INT, F_USE, NULL}, {"top_k", T_INT, F_USE, NULL}, {"seed", T_INT, F_USE, NULL},
    {"max_tokens", T_INT, F_USE, NULL}, {"stop", T_STR | T_ARR, F_USE, NULL}, {"logprobs", T_INT, F_USE, NULL},
    {"n", T_INT, F_USE, NULL}, {"echo", T_BOOL, F_USE, NULL}, {"presence_penalty", T_NUM | T_INT, F_USE, NULL},
    {"frequency_penalty", T_NUM | T_INT, F_USE, NULL}, {"repetition_penalty", T_NUM | T_INT, F_USE, NULL},
    {"min_p", T_NUM | T_INT, F_USE, NULL}, {"logit_bias", T_OBJ, F_USE, NULL}, {"ignore_eos", T_BOOL, F_USE, NULL},
    {"return_token_ids", T_BOOL, F_USE, NULL}, {"user", T_STR, F_IGNORE, NULL},
    {"suffix", ~0u, F_REFUSE, "suffix (insertion) is not supported"},
    {"best_of", ~0u, F_REFUSE, "best_of is not supported"},
    {"response_format", T_OBJ, F_USE, NULL}, {"guided_json", T_OBJ | T_STR | T_BOOL, F_USE, NULL},
    {"guided_regex", T_STR, F_USE, NULL}, {"guided_choice", T_ARR, F_USE, NULL},
    {"guided_grammar", ~0u, F_REFUSE, no_ebnf}, {"guided_decoding_backend", ~0u, F_REFUSE, own_backend},
    {"guided_whitespace_pattern", ~0u, F_REFUSE, no_ws_pattern}, {"structured_outputs", ~0u, F_REFUSE, use_guided},
    {NULL, 0, 0, NULL},
};

/* What the client sent comes back in the message and the param (a field's name, jansson's text near a
 * syntax error): both are escaped (escape.h), so the error's JSON body can always be built (a name cut
 * in the middle of a character made it fail, and the client got no answer) and a control character
 * never reaches a terminal or a log line; a long name is cut between characters. */
int oai_fail(oai_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    param = param ? param : "";
    dsk_escape(param, strlen(param), 0, e->param, sizeof e->param);
    char raw[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1;
    dsk_escape(raw, len, DSK_ESC_KEEP_NEWLINES, e->message, sizeof e->message);
    return -1;
}

#define BAD(e, param, ...) oai_fail(e, 400, "invalid_request_error", NULL, param, __VA_ARGS__)
#define UNSUPPORTED(e, param, ...) oai_fail(e, 400, "invalid_request_error", "unsupported_parameter", param, __VA_ARGS__)

static const char *type_names(unsigned t, char *buf, size_t n)
{
    static const char *names[] = {"a boolean", "an integer", "a number", "a string", "an array", "an object"};
    buf[0] = 0;
    for (int i = 0, k = 0; i < 6; i++)
        if (t & (1u << i))
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", k++ ? " or " : "", names[i]);
    return buf;
}

static unsigned type_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOL;
    case JSON_INTEGER: return T_INT;
    case JSON_REAL: return T_NUM;
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    case JSON_OBJECT: return T_OBJ;
    default: return 0;
    }
}

/* Every field of req against the table: unknown, refused and mistyped fields are errors. */
static int check_fields(const json_t *req, const field *table, oai_error *e)
{
    if (!json_is_object(req))
        return BAD(e, NULL, "the request body must be a JSON object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)req, key, v) {
        const field *f = table;
        while (f->name && strcmp(f->name, key))
            f++;
        if (!f->name)
            return oai_fail(e, 400, "invalid_request_error", "unrecognized_argument", key,
                            "unrecognized request argument '%s'", key);
        if (json_is_null(v))
            continue;
        if (f->use == F_REFUSE)
            return UNSUPPORTED(e, key, "'%s': %s", key, f->why);
        unsigned t = type_of(v);
        /* an integer-valued real (100.0) where an integer is asked is accepted, if it converts exactly */
        double d = t == T_NUM ? json_real_value(v) : 0;
        if (t == T_NUM && (f->types & T_INT) && !(f->types & T_NUM) && d == floor(d) && fabs(d) < 0x1p53)
            t = T_INT;
        if (!(t & f->types)) {
            char buf[96];
            return BAD(e, key, "'%s' must be %s", key, type_names(f->types, buf, sizeof buf));
        }
    }
    return 0;
}

static int has(const json_t *req, const char *k)
{
    const json_t *v = json_object_get(req, k);
    return v && !json_is_null(v);
}

static double num(const json_t *req, const char *k, double dflt)
{
    return has(req, k) ? json_number_value(json_object_get(req, k)) : dflt;
}

static long long integer(const json_t *req, const char *k, long long dflt)
{
    const json_t *v = json_object_get(req, k);
    if (!v || json_is_null(v))
        return dflt;
    return json_is_integer(v) ? json_integer_value(v) : (long long)json_real_value(v);
}

static int stops(const json_t *req, srv_gen *g, oai_error *e)
{
    const json_t *s = json_object_get(req, "stop");
    if (!s || json_is_null(s))
        return 0;
    size_t n = json_is_string(s) ? 1 : json_array_size(s);
    if (n > MAX_STOPS)
        return BAD(e, "stop", "'stop' holds %zu strings, at most %d", n, MAX_STOPS);
    if (!(g->stops = dsk_calloc(n ? n : 1, sizeof(char *))))
        return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *x = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(x))
            return BAD(e, "stop", "'stop' must be a string or an array of strings");
        size_t l = json_string_length(x);
        if (l == 0 || l > MAX_STOP_BYTES || memchr(json_string_value(x), 0, l))
            return BAD(e, "stop", "stop strings must be 1 to %d bytes (and hold no NUL)", MAX_STOP_BYTES);
        if (!(g->stops[i] = dsk_strdup(json_string_value(x))))
            return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        g->n_stops++;
    }
    return 0;
}

/* What both routes share: sampling, limits, stop strings, streaming, the refused penalties. */
static int common(const json_t *req, const char *served, oai_params *p, oai_error *e)
{
    const char *model = json_string_value(json_object_get(req, "model"));
    if (model && strcmp(model, served))
        return oai_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                        "the model '%s' does not exist; this server serves '%s'", model, served);
    if (integer(req, "n", 1) != 1)
        return UNSUPPORTED(e, "n", "'n' must be 1: one choice per request (send several requests instead)");
    static const char *const zero[] = {"presence_penalty", "frequency_penalty", "min_p"};
    for (int i = 0; i < 3; i++)
        if (num(req, zero[i], 0) != 0)
            return UNSUPPORTED(e, zero[i], "'%s' is not supported (only 0)", zero[i]);
    if (num(req, "repetition_penalty", 1) != 1)
        return UNSUPPORTED(e, "repetition_penalty", "'repetition_penalty' is not supported (only 1)");
    if (json_object_size(json_object_get(req, "logit_bias")))
        return UNSUPPORTED(e, "logit_bias", "'logit_bias' is not supported");
    p->stream = json_is_true(json_object_get(req, "stream"));
    const json_t *so = json_object_get(req, "stream_options");
    if (so && !json_is_null(so)) {
        if (!p->stream)
            return BAD(e, "stream_options", "'stream_options' is only allowed with \"stream\": true");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)so, k, v) {
            if (strcmp(k, "include_usage"))
                return UNSUPPORTED(e, "stream_options", "stream_options.%s is not supported (only include_usage)", k);
            if (!json_is_boolean(v) && !json_is_null(v))
                return BAD(e, "stream_options", "stream_options.include_usage must be a boolean");
            p->include_usage = json_is_true(v);
        }
    }
    double t = num(req, "temperature", 1.0), top_p = num(req, "top_p", 1.0);
    if (!(t >= 0 && t <= 100))
        return BAD(e, "temperature", "'temperature' must be a number from 0 to 100 (0: greedy)");
    if (!(top_p > 0 && top_p <= 1))
        return BAD(e, "top_p", "'top_p' must be in (0, 1]");
    long long k = integer(req, "top_k", 0);
    if (k < -1 || k > SAMPLE_TOP_P_CANDIDATES)
        return BAD(e, "top_k", "'top_k' must be -1 or 0 (off) or 1..%d", SAMPLE_TOP_P_CANDIDATES);
    p->gen.sp = (sample_params){(float)t, (float)top_p, k < 0 ? 0 : (int)k, (uint64_t)integer(req, "seed", 0)};
    p->seed_given = has(req, "seed");
    p->gen.ignore_eos = json_is_true(json_object_get(req, "ignore_eos"));
    p->return_token_ids = json_is_true(json_object_get(req, "return_token_ids"));
    p->gen.top_logprobs = -1;
    return stops(req, &p->gen, e);
}

static int max_tokens(const json_t *req, const char *k, oai_params *p, oai_error *e)
{
    long long v = integer(req, k, 0);
    if (has(req, k) && (v < 1 || v > (1 << 30)))
        return BAD(e, k, "'%s' must be at least 1", k);
    if (has(req, k))
        p->gen.max_tokens = (int)v;
    return 0;
}

/* ---- structured output ---- */

static int set_spec(oai_params *p, int kind, const char *name, oai_error *e)
{
    if (p->spec.kind != CONS_NONE)
        return BAD(e, name, "'%s' and '%s' both constrain the output: give one of them", p->spec.field, name);
    p->spec.kind = kind;
    p->spec.field = name;
    return 0;
}

static int oom(oai_error *e)
{
    return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* response_format: text (nothing), json_object, or json_schema {name, schema, strict, description}. */
static int response_format(const json_t *req, oai_params *p, oai_error *e)
{
    const json_t *rf = json_object_get(req, "response_format");
    if (!rf || json_is_null(rf))
        return 0;
    const char *t = json_string_value(json_object_get(rf, "type"));
    if (!t)
        return BAD(e, "response_format", "response_format.type must be \"text\", \"json_object\" or \"json_schema\"");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)rf, k, v) {
        if (strcmp(k, "type") && (strcmp(t, "json_schema") || strcmp(k, "json_schema")))
            return BAD(e, "response_format", "response_format.%s is not a field of a \"%s\" response_format", k, t);
    }
    if (!strcmp(t, "text"))
        return 0;
    if (!strcmp(t, "json_object"))
        return set_spec(p, CONS_JSON_OBJECT, "response_format", e);
    if (strcmp(t, "json_schema"))
        return BAD(e, "response_format", "response_format.type '%s' is not one of \"text\", \"json_object\", "
                                         "\"json_schema\"", t);
    const json_t *js = json_object_get(rf, "json_schema");
    if (!json_is_object(js))
        return BAD(e, "response_format", "response_format.json_schema must be an object holding \"schema\"");
    json_object_foreach((json_t *)js, k, v) {
        int ok = (!strcmp(k, "name") && json_is_string(v)) || (!strcmp(k, "description") && json_is_string(v)) ||
                 (!strcmp(k, "strict") && (json_is_boolean(v) || json_is_null(v))) ||
                 (!strcmp(k, "schema") && (json_is_object(v) || json_is_boolean(v)));
        if (!ok)
            return BAD(e, "response_format", "response_format.json_schema.%s: %s", k,
                       strcmp(k, "name") && strcmp(k, "description") && strcmp(k, "strict") && strcmp(k, "schema")
                           ? "not a field (name, description, schema, strict)"
                       : !strcmp(k, "schema") ? "must be a JSON Schema (an object or a boolean)"
                       : !strcmp(k, "strict") ? "must be a boolean"
                                              : "must be a string");
    }
    const json_t *schema = json_object_get(js, "schema");
    if (!schema)
        return BAD(e, "response_format", "response_format.json_schema.schema is required");
    if (set_spec(p, CONS_SCHEMA, "response_format", e))
        return -1;
    p->spec.schema = json_incref((json_t *)schema);
    return 0;
}

/* vLLM's guided_json (a schema, or its JSON text), guided_regex, guided_choice. */
static int guided(const json_t *req, oai_params *p, oai_error *e)
{
    const json_t *v = json_object_get(req, "guided_json");
    if (v && !json_is_null(v)) {
        if (set_spec(p, CONS_SCHEMA, "guided_json", e))
            return -1;
        if (json_is_string(v)) {
            json_error_t je;
            if (!(p->spec.schema = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, &je)))
                return BAD(e, "guided_json", "guided_json is not JSON: %s (at character %d)", je.text, je.position);
            if (!json_is_object(p->spec.schema) && !json_is_boolean(p->spec.schema))
                return BAD(e, "guided_json", "guided_json must be a JSON Schema (an object or a boolean)");
        } else
            p->spec.schema = json_incref((json_t *)v);
    }
    v = json_object_get(req, "guided_regex");
    if (v && !json_is_null(v)) {
        if (set_spec(p, CONS_REGEX, "guided_regex", e))
            return -1;
        p->spec.regex = json_incref((json_t *)v);
    }
    v = json_object_get(req, "guided_choice");
    if (v && !json_is_null(v)) {
        size_t i;
        const json_t *x;
        if (!json_array_size(v))
            return BAD(e, "guided_choice", "guided_choice must be a non-empty array of strings");
        json_array_foreach(v, i, x) {
            if (!json_is_string(x))
                return BAD(e, "guided_choice", "guided_choice[%zu] must be a string", i);
        }
        if (set_spec(p, CONS_CHOICE, "guided_choice", e))
            return -1;
        p->spec.choices = json_incref((json_t *)v);
    }
    return 0;
}

/* tool_choice: auto (default), none (the tools are left out of the prompt), required (a DSML call of one
 * of the tools, forced by the tools' grammar), or {"type": "function", "function": {"name": N}} (a call
 * of N). */
static int tool_choice(const json_t *req, oai_params *p, int *none, oai_error *e)
{
    const json_t *tc = json_object_get(req, "tool_choice"), *tools = json_object_get(req, "tools");
    *none = 0;
    if (!tc || json_is_null(tc))
        return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto"))
            return 0;
        if (!strcmp(s, "none"))
            return *none = 1, 0;
        if (strcmp(s, "required"))
            return BAD(e, "tool_choice", "tool_choice must be \"auto\", \"none\", \"required\" or a named function");
    } else {
        const json_t *fn = json_object_get(tc, "function");
        const char *type = json_string_value(json_object_get(tc, "type"));
        if (!type || strcmp(type, "function") || !json_is_string(json_object_get(fn, "name")))
            return BAD(e, "tool_choice", "a named tool_choice is {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (!json_array_size(tools))
        return BAD(e, "tool_choice", "tool_choice %s needs a non-empty 'tools'",
                   json_is_string(tc) ? "\"required\"" : "naming a function");
    if (set_spec(p, CONS_TOOLS, "tool_choice", e))
        return -1;
    p->spec.tools = json_incref((json_t *)tools);
    if (json_is_string(tc))
        return 0;
    /* the name as the prompt spells it (namespace::name), and it must be one of the tools */
    dsk_buf want = {0}, have = {0};
    const json_t *fn = json_object_get(tc, "function");
    if (dsml_tool_name(tc, fn, &want) || dsk_buf_append(&want, "", 1)) {
        dsk_buf_free(&want);
        return BAD(e, "tool_choice", "tool_choice: %s", dsk_err_msg());
    }
    int found = 0;
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        have.len = 0;
        if (!dsml_tool_name(t, json_object_get(t, "function"), &have) && have.len == want.len - 1 &&
            !memcmp(have.data, want.data, have.len))
            found = 1;
    }
    dsk_buf_free(&have);
    if (!found) {
        BAD(e, "tool_choice", "tool_choice names the function '%s', which is not among the tools", want.data);
        dsk_buf_free(&want);
        return -1;
    }
    p->spec.force_name = want.data; /* NUL-terminated above */
    return 0;
}

int oai_parse_chat(const json_t *req, const char *served, oai_params *p, oai_error *e)
{
    *p = (oai_params){.kind = OAI_CHAT, .parallel_tool_calls = 1};
    if (check_fields(req, chat_fields, e) || common(req, served, p, e))
        return -1;
    if (!json_array_size(json_object_get(req, "messages")))
        return BAD(e, "messages", "'messages' must be a non-empty array");
    if (has(req, "max_tokens") && has(req, "max_completion_tokens"))
        return BAD(e, "max_tokens", "give one of 'max_tokens' and 'max_completion_tokens'");
    if (max_tokens(req, "max_tokens", p, e) || max_tokens(req, "max_completion_tokens", p, e))
        return -1;
    p->logprobs = json_is_true(json_object_get(req, "logprobs"));
    long long top = integer(req, "top_logprobs", 0);
    if (has(req, "top_logprobs") && !p->logprobs)
        return BAD(e, "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
    if (top < 0 || top > SAMPLE_MAX_TOP_LOGPROBS)
        return BAD(e, "top_logprobs", "'top_logprobs' must be 0..%d", SAMPLE_MAX_TOP_LOGPROBS);
    if (p->logprobs)
        p->gen.top_logprobs = (int)top;
    const json_t *ptc = json_object_get(req, "parallel_tool_calls");
    p->parallel_tool_calls = !json_is_false(ptc);
    int none;
    if (response_format(req, p, e) || guided(req, p, e) || tool_choice(req, p, &none, e))
        return -1;
    if (p->spec.kind == CONS_TOOLS)
        p->spec.max_calls = p->parallel_tool_calls ? 0 : 1;
    /* what chat_encode reads: a shallow copy, thinking on unless asked off, tools per tool_choice (the
     * template writes a non-text response_format into the system turn, as the model was trained) */
    if (!(p->chat = json_copy((json_t *)req)))
        return oom(e);
    if (none)
        json_object_del(p->chat, "tools");
    const json_t *kw = json_object_get(req, "chat_template_kwargs");
    int asked = json_object_get(kw, "thinking") || json_object_get(kw, "enable_thinking") ||
                has(req, "reasoning_effort");
    if (!asked) {
        json_t *k2 = kw ? json_copy((json_t *)kw) : json_object();
        if (!k2 || json_object_set_new(k2, "thinking", json_true()) ||
            json_object_set_new(p->chat, "chat_template_kwargs", k2))
            return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

int oai_parse_completion(const json_t *req, const char *served, oai_params *p, oai_error *e)
{
    *p = (oai_params){.kind = OAI_COMPLETION};
    if (check_fields(req, completion_fields, e) || common(req, served, p, e) || max_tokens(req, "max_tokens", p, e))
        return -1;
    if (json_is_true(json_object_get(req, "echo")))
        return UNSUPPORTED(e, "echo", "'echo' is not supported");
    if (has(req, "logprobs")) {
        long long lp = integer(req, "logprobs", 0);
        if (lp < 0 || lp > SAMPLE_MAX_TOP_LOGPROBS)
            return BAD(e, "logprobs", "'logprobs' must be 0..%d", SAMPLE_MAX_TOP_LOGPROBS);
        p->logprobs = 1;
        p->gen.top_logprobs = (int)lp;
    }
    const json_t *pr = json_object_get(req, "prompt");
    if (!pr || json_is_null(pr))
        return BAD(e, "prompt", "'prompt' is required");
    /* one prompt: a string, token ids, or a list holding exactly one of them */
    if (json_is_array(pr) && json_array_size(pr) == 1 &&
        (json_is_string(json_array_get(pr, 0)) || json_is_array(json_array_get(pr, 0))))
        pr = json_array_get(pr, 0);
    if (json_is_array(pr)) {
        size_t i;
        const json_t *x;
        json_array_foreach(pr, i, x) {
            if (json_is_integer(x))
                continue;
            if (json_is_string(x) || json_is_array(x))
                return UNSUPPORTED(e, "prompt", "several prompts in one request are not supported; send one "
                                                "request per prompt");
            return BAD(e, "prompt", "'prompt' must be a string or an array of token ids");
        }
        if (!json_array_size(pr))
            return BAD(e, "prompt", "'prompt' is empty");
    } else if (!json_is_string(pr))
        return BAD(e, "prompt", "'prompt' must be a string or an array of token ids");
    p->prompt = pr;
    return response_format(req, p, e) || guided(req, p, e);
}

void oai_params_free(oai_params *p)
{
    for (int i = 0; i < p->gen.n_stops; i++)
        free(p->gen.stops[i]);
    free(p->gen.stops);
    p->gen.stops = NULL;
    p->gen.n_stops = 0;
    json_decref(p->chat);
    p->chat = NULL;
    srv_spec_free(&p->spec);
    grammar_free(p->gen.grammar);
    p->gen.grammar = NULL;
}
