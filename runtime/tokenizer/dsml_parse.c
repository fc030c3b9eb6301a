/* DSML parsing: reasoning, content and tool calls out of generated text, as it streams. */
#include "runtime/common/error.h"
#include "runtime/tokenizer/dsml.h"
#include "runtime/tokenizer/pyjson.h"
#include "runtime/tokenizer/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALLS_OPEN "<" DSML_TOKEN " calls>"
#define CALLS_CLOSE "</" DSML_TOKEN " calls>"
#define INVOKE_OPEN "<" DSML_TOKEN " invoke name=\""
#define INVOKE_CLOSE "</" DSML_TOKEN " invoke>"
#define PARAM_OPEN "<" DSML_TOKEN " parameter name=\""
#define PARAM_CLOSE "</" DSML_TOKEN " parameter>"

void dsml_parser_init(dsml_parser *p, int thinking)
{
    *p = (dsml_parser){0};
    p->in_reasoning = thinking;
}

static void free_calls(dsml_parser *p)
{
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    p->calls = NULL;
    p->n_calls = 0;
}

void dsml_parser_free(dsml_parser *p)
{
    dsk_buf_free(&p->hold);
    dsk_buf_free(&p->block);
    dsk_buf_free(&p->reasoning);
    dsk_buf_free(&p->content);
    free_calls(p);
}

void dsml_delta_free(dsml_delta *d)
{
    dsk_buf_free(&d->reasoning);
    dsk_buf_free(&d->content);
}

static int emit(dsml_parser *p, dsml_delta *d, const char *s, size_t n)
{
    if (!n)
        return 0;
    if (p->in_reasoning)
        return dsk_buf_append(&p->reasoning, s, n) || dsk_buf_append(&d->reasoning, s, n) ? -1 : 0;
    return dsk_buf_append(&p->content, s, n) || dsk_buf_append(&d->content, s, n) ? -1 : 0;
}

/* The length of the longest suffix of s[0..n) that is a proper prefix of marker. */
static size_t partial_suffix(const char *s, size_t n, const char *marker)
{
    size_t m = strlen(marker);
    for (size_t k = m - 1 < n ? m - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, marker, k))
            return k;
    return 0;
}

/* Drop the first n bytes of b. */
static void consume(dsk_buf *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

int dsml_feed(dsml_parser *p, const char *text, size_t len, dsml_delta *d)
{
    if (p->finished)
        return dsk_err("dsml_feed after dsml_finish");
    if (p->in_calls)
        return dsk_buf_append(&p->block, text, len);
    if (dsk_buf_append(&p->hold, text, len))
        return -1;
    while (p->hold.len) {
        const char *h = p->hold.data;
        size_t n = p->hold.len;
        if (p->in_reasoning) {
            const char *end = memmem(h, n, DSML_END_THINK, strlen(DSML_END_THINK));
            if (end) {
                if (emit(p, d, h, (size_t)(end - h)))
                    return -1;
                consume(&p->hold, (size_t)(end - h) + strlen(DSML_END_THINK));
                p->in_reasoning = 0;
                continue;
            }
            size_t keep = partial_suffix(h, n, DSML_END_THINK);
            if (emit(p, d, h, n - keep))
                return -1;
            consume(&p->hold, n - keep);
            return 0;
        }
        const char *open = memmem(h, n, CALLS_OPEN, strlen(CALLS_OPEN));
        if (open) {
            /* the "\n\n" before the block is the format's, not content */
            size_t at = (size_t)(open - h);
            size_t nl = at >= 2 && h[at - 1] == '\n' && h[at - 2] == '\n' ? 2 : 0;
            if (emit(p, d, h, at - nl) || dsk_buf_append(&p->block, h + at - nl, n - at + nl))
                return -1;
            p->hold.len = 0;
            p->in_calls = 1;
            return 0;
        }
        /* hold back what may still become "\n\n<｜DSML｜ calls>" */
        size_t keep = partial_suffix(h, n, CALLS_OPEN);
        for (int i = 0; i < 2 && keep < n && h[n - keep - 1] == '\n'; i++)
            keep++;
        if (emit(p, d, h, n - keep))
            return -1;
        consume(&p->hold, n - keep);
        return 0;
    }
    return 0;
}

/* ---- the calls block grammar ---- */

typedef struct {
    const char *s, *end;
} cursor;

static int eat(cursor *c, const char *lit)
{
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->s) < n || memcmp(c->s, lit, n))
        return 0;
    c->s += n;
    return 1;
}

static void skip_space(cursor *c)
{
    while (c->s < c->end && (*c->s == ' ' || *c->s == '\n' || *c->s == '\t' || *c->s == '\r'))
        c->s++;
}

/* Text up to the next `stop`, which is consumed; NULL if there is none. */
static const char *until(cursor *c, const char *stop, size_t *len)
{
    const char *q = memmem(c->s, (size_t)(c->end - c->s), stop, strlen(stop));
    if (!q)
        return NULL;
    const char *start = c->s;
    *len = (size_t)(q - start);
    c->s = q + strlen(stop);
    return start;
}

/* One invoke: its name and its parameters as a JSON object; 0 if malformed. */
static int parse_invoke(cursor *c, dsml_call *call)
{
    size_t nlen;
    const char *name = until(c, "\">", &nlen);
    if (!name || !nlen || memchr(name, '"', nlen) || memchr(name, '\n', nlen) ||
        !utf8_valid((const uint8_t *)name, nlen))
        return 0;
    json_t *args = json_object();
    if (!args)
        return 0;
    int ok = 0;
    for (;;) {
        skip_space(c);
        if (eat(c, INVOKE_CLOSE)) {
            ok = 1;
            break;
        }
        size_t klen, vlen;
        const char *key, *value;
        if (!eat(c, PARAM_OPEN) || !(key = until(c, "\" string=\"", &klen)) || !klen ||
            memchr(key, '"', klen))
            break;
        int is_str = eat(c, "true\">");
        if (!is_str && !eat(c, "false\">"))
            break;
        if (!(value = until(c, PARAM_CLOSE, &vlen)))
            break;
        json_t *v = is_str ? json_stringn(value, vlen)
                           : json_loadb(value, vlen, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        char *k = strndup(key, klen);
        if (!v || !k || json_object_setn_new(args, k, klen, v)) {
            free(k);
            break;
        }
        free(k);
    }
    dsk_buf text = {0};
    if (ok && (pyjson_dump(&text, args) || dsk_buf_append(&text, "", 1)))
        ok = 0;
    if (ok) {
        call->name = strndup(name, nlen);
        call->arguments = text.data;
        ok = call->name != NULL;
    } else {
        dsk_buf_free(&text);
    }
    json_decref(args);
    return ok;
}

/* Parse "[\n\n]<calls> invokes </calls>" followed only by whitespace; 0 if not exactly that. */
static int parse_block(dsml_parser *p)
{
    cursor c = {p->block.data, p->block.data + p->block.len};
    eat(&c, "\n\n");
    if (!eat(&c, CALLS_OPEN))
        return 0;
    for (;;) {
        skip_space(&c);
        if (eat(&c, CALLS_CLOSE))
            break;
        dsml_call call = {0};
        if (!eat(&c, INVOKE_OPEN) || !parse_invoke(&c, &call))
            return 0;
        dsml_call *calls = realloc(p->calls, (p->n_calls + 1) * sizeof *calls);
        if (!calls) {
            free(call.name);
            free(call.arguments);
            return 0;
        }
        p->calls = calls;
        p->calls[p->n_calls++] = call;
    }
    skip_space(&c);
    return c.s == c.end && p->n_calls > 0;
}

int dsml_finish(dsml_parser *p, dsml_delta *d)
{
    if (p->finished)
        return 0;
    p->finished = 1;
    if (p->in_calls && p->block.len && !memchr(p->block.data, 0, p->block.len) && parse_block(p))
        return 0;
    free_calls(p);
    /* not well-formed: everything held back is content (or reasoning, if </think> never came) */
    if (emit(p, d, p->hold.data, p->hold.len) || emit(p, d, p->block.data, p->block.len))
        return -1;
    p->hold.len = 0;
    p->block.len = 0;
    return 0;
}

int dsml_parse(const char *text, size_t len, int thinking, dsml_parser *p)
{
    size_t eos = strlen(DSML_EOS);
    if (len >= eos && !memcmp(text + len - eos, DSML_EOS, eos))
        len -= eos;
    dsml_delta d = {0};
    dsml_parser_init(p, thinking);
    int rc = dsml_feed(p, text, len, &d) || dsml_finish(p, &d) ? -1 : 0;
    dsml_delta_free(&d);
    return rc;
}

/* A JSON string of s; ill-formed UTF-8 (possible only if the caller fed raw bytes) becomes U+FFFD. */
static json_t *lossy_string(const char *s, size_t n)
{
    if (utf8_valid((const uint8_t *)s, n))
        return json_stringn(n ? s : "", n);
    dsk_buf b = {0};
    size_t i = 0, l;
    while (i < n) {
        int r = utf8_next((const uint8_t *)s + i, n - i, &l);
        if (dsk_buf_append(&b, r == UTF8_OK ? s + i : "\xEF\xBF\xBD", r == UTF8_OK ? l : 3)) {
            dsk_buf_free(&b);
            return NULL;
        }
        i += l;
    }
    json_t *v = json_stringn(b.data, b.len);
    dsk_buf_free(&b);
    return v;
}

json_t *dsml_message(const dsml_parser *p, const char *id_prefix)
{
    json_t *m = json_object();
    if (!m)
        return NULL;
    int bad = json_object_set_new(m, "role", json_string("assistant"));
    if (p->content.len || !p->n_calls)
        bad |= json_object_set_new(m, "content", lossy_string(p->content.data, p->content.len));
    else
        bad |= json_object_set_new(m, "content", json_null());
    if (p->reasoning.len)
        bad |= json_object_set_new(m, "reasoning_content",
                                   lossy_string(p->reasoning.data, p->reasoning.len));
    if (p->n_calls) {
        json_t *calls = json_array();
        bad |= json_object_set_new(m, "tool_calls", calls);
        for (size_t i = 0; i < p->n_calls && !bad; i++) {
            char id[128];
            snprintf(id, sizeof id, "%s%zu", id_prefix ? id_prefix : "call_", i);
            json_t *fn = json_pack("{s:s, s:s}", "name", p->calls[i].name, "arguments",
                                   p->calls[i].arguments);
            json_t *call = fn ? json_pack("{s:s, s:s, s:o}", "id", id, "type", "function",
                                          "function", fn)
                              : NULL;
            bad |= !call || json_array_append_new(calls, call);
        }
    }
    if (bad) {
        json_decref(m);
        dsk_err("out of memory building the reply message");
        return NULL;
    }
    return m;
}
