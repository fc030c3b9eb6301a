#include "runtime/server/oai_reply.h"
#include "runtime/common/error.h"
#include "runtime/server/oai_parse.h"
#include "runtime/tokenizer/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void oai_writer_init(oai_writer *w, int kind, const char *id, const char *model, int thinking)
{
    *w = (oai_writer){.kind = kind, .id = id, .model = model, .created = (long long)time(NULL),
                      .top_logprobs = -1, .parallel_tool_calls = 1};
    dsml_parser_init(&w->dp, thinking);
}

void oai_writer_free(oai_writer *w)
{
    dsml_parser_free(&w->dp);
    dsml_delta_free(&w->dd);
    dsk_buf_free(&w->out);
}

/* A JSON string of bytes that may be cut UTF-8 (a token's bytes): ill-formed parts become U+FFFD. */
static json_t *lossy(const char *s, size_t n)
{
    if (utf8_valid((const uint8_t *)s, n))
        return json_stringn(n ? s : "", n);
    dsk_buf b = {0};
    size_t i = 0, l;
    int bad = 0;
    while (i < n && !bad) {
        int r = utf8_next((const uint8_t *)s + i, n - i, &l);
        bad = r == UTF8_OK ? dsk_buf_append(&b, s + i, l) : dsk_buf_append(&b, "\xef\xbf\xbd", 3);
        i += l;
    }
    json_t *j = bad ? NULL : json_stringn(b.data, b.len);
    dsk_buf_free(&b);
    return j;
}

static json_t *token_text(const dsk_tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const uint8_t *b = tok_bytes(tok, id, &n);
    return lossy(b ? (const char *)b : "", b ? n : 0);
}

static json_t *token_bytes(const dsk_tokenizer *tok, int32_t id)
{
    size_t n = 0;
    const uint8_t *b = tok_bytes(tok, id, &n);
    json_t *a = json_array();
    for (size_t i = 0; a && b && i < n; i++)
        if (json_array_append_new(a, json_integer(b[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]} for tokens [from, to). */
static json_t *chat_logprobs(const oai_writer *w, const int32_t *toks, const srv_logprob *lps, int from, int to)
{
    json_t *content = json_array();
    for (int i = from; content && i < to; i++) {
        json_t *top = json_array();
        for (int k = 0; top && k < w->top_logprobs; k++)
            if (json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", token_text(w->tok, lps[i].top_ids[k]),
                                                     "logprob", (double)lps[i].top_lp[k], "bytes",
                                                     token_bytes(w->tok, lps[i].top_ids[k]))))
                top = (json_decref(top), NULL);
        json_t *e = top ? json_pack("{s:o, s:f, s:o, s:o}", "token", token_text(w->tok, toks[i]), "logprob",
                                    (double)lps[i].lp, "bytes", token_bytes(w->tok, toks[i]), "top_logprobs", top)
                        : NULL;
        if (!e || json_array_append_new(content, e))
            content = (json_decref(content), NULL);
    }
    return content ? json_pack("{s:o}", "content", content) : NULL;
}

/* Completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset} for tokens [from, to); offsets
 * count the tokens' bytes from base. */
static json_t *completion_logprobs(const oai_writer *w, const int32_t *toks, const srv_logprob *lps, int from, int to,
                                   size_t base)
{
    json_t *t = json_array(), *lp = json_array(), *top = json_array(), *off = json_array();
    int bad = !t || !lp || !top || !off;
    for (int i = from; !bad && i < to; i++) {
        json_t *alt = json_object();
        for (int k = 0; alt && k < w->top_logprobs; k++) {
            json_t *s = token_text(w->tok, lps[i].top_ids[k]);
            bad |= !s || json_object_set_new(alt, json_string_value(s), json_real(lps[i].top_lp[k]));
            json_decref(s);
        }
        size_t n = 0;
        tok_bytes(w->tok, toks[i], &n);
        bad |= !alt || json_array_append_new(t, token_text(w->tok, toks[i])) ||
               json_array_append_new(lp, json_real(lps[i].lp)) || json_array_append_new(top, alt) ||
               json_array_append_new(off, json_integer((json_int_t)base));
        base += n;
    }
    if (bad) {
        json_decref(t), json_decref(lp), json_decref(top), json_decref(off);
        return NULL;
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", t, "token_logprobs", lp, "top_logprobs", top, "text_offset", off);
}

static json_t *usage(const srv_req *r)
{
    /* prompt_tokens stays the whole prompt; cached_tokens (OpenAI's field) is the part the prompt cache held */
    return json_pack("{s:i, s:i, s:i, s:{s:I}}", "prompt_tokens", r->n_prompt, "completion_tokens", r->n_tokens,
                     "total_tokens", r->n_prompt + r->n_tokens, "prompt_tokens_details", "cached_tokens",
                     (json_int_t)r->n_cached);
}

const char *oai_finish_reason(const oai_writer *w, int fin)
{
    if (w->kind == OAI_CHAT && w->dp.n_calls && fin != FIN_ERROR)
        return "tool_calls";
    return fin == FIN_LENGTH ? "length" : fin == FIN_STOP ? "stop" : fin == FIN_CANCELLED ? "cancelled" : "error";
}

/* ---- SSE ---- */

static int sse(oai_writer *w, json_t *j)
{
    if (!j)
        return dsk_err("out of memory building a chunk");
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        return dsk_err("out of memory building a chunk");
    int rc = dsk_buf_printf(&w->out, "data: %s\n\n", s);
    free(s);
    return rc;
}

/* A chunk with one choice: a chat delta (delta set) or completion text (text set). */
static int chunk(oai_writer *w, json_t *delta, json_t *text, json_t *logprobs, const char *finish)
{
    json_t *choice = json_pack("{s:i, s:o, s:o, s:o}", "index", 0, delta ? "delta" : "text",
                               delta ? delta : text ? text : json_null(), "logprobs", logprobs ? logprobs : json_null(),
                               "finish_reason", finish ? json_string(finish) : json_null());
    json_t *c = choice ? json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", w->id, "object",
                                   w->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                                   (json_int_t)w->created, "model", w->model, "choices", choice)
                       : NULL;
    if (c && w->include_usage)
        json_object_set_new(c, "usage", json_null());
    return sse(w, c);
}

static int delta_chunk(oai_writer *w, const char *field, const char *s, size_t n, json_t *logprobs)
{
    json_t *d = json_object();
    if (d && field)
        json_object_set_new(d, field, lossy(s, n));
    return chunk(w, d, NULL, logprobs, NULL);
}

int oai_stream_update(oai_writer *w, const char *text, size_t len, const int32_t *toks, const srv_logprob *lps, int n)
{
    json_t *lp = NULL;
    if (w->top_logprobs >= 0 && n > w->tok_off) {
        lp = w->kind == OAI_CHAT ? chat_logprobs(w, toks, lps, w->tok_off, n)
                                 : completion_logprobs(w, toks, lps, w->tok_off, n, w->text_off);
        if (!lp)
            return dsk_err("out of memory building logprobs");
    }
    w->tok_off = n;
    const char *s = text + w->text_off;
    size_t m = len - w->text_off;
    w->text_off = len;
    if (w->kind == OAI_COMPLETION)
        return (m || lp) ? chunk(w, NULL, lossy(s, m), lp, NULL) : 0;
    int rc = 0;
    if (!w->sent_role) {
        json_t *d = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
        rc = chunk(w, d, NULL, NULL, NULL);
        w->sent_role = 1;
    }
    w->dd.reasoning.len = w->dd.content.len = 0;
    if (rc || (m && dsml_feed(&w->dp, s, m, &w->dd))) {
        json_decref(lp);
        return -1;
    }
    if (w->dd.reasoning.len) {
        rc = delta_chunk(w, "reasoning_content", w->dd.reasoning.data, w->dd.reasoning.len, lp);
        lp = NULL;
    }
    if (!rc && w->dd.content.len) {
        rc = delta_chunk(w, "content", w->dd.content.data, w->dd.content.len, lp);
        lp = NULL;
    }
    if (!rc && lp) /* the text is held back (a marker may be starting): the logprobs go now */
        return delta_chunk(w, NULL, NULL, 0, lp);
    return rc;
}

static json_t *call_json(const oai_writer *w, size_t i, int with_index)
{
    char id[128];
    snprintf(id, sizeof id, "call_%s_%zu", w->id, i);
    json_t *c = json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function", "name",
                          w->dp.calls[i].name, "arguments", w->dp.calls[i].arguments);
    if (c && with_index)
        json_object_set_new(c, "index", json_integer((json_int_t)i));
    return c;
}

static size_t calls_returned(const oai_writer *w)
{
    return w->parallel_tool_calls || w->dp.n_calls < 1 ? w->dp.n_calls : 1;
}

int oai_stream_finish(oai_writer *w, const srv_req *r)
{
    if (oai_stream_update(w, r->text.data ? r->text.data : "", r->text.len, r->tokens, r->lps, r->n_tokens))
        return -1;
    if (r->finish == FIN_ERROR) {
        char *e = oai_error_body(r->err, r->err_type ? r->err_type : "server_error", NULL, r->err_code);
        int rc = !e || dsk_buf_printf(&w->out, "data: %s\n\ndata: [DONE]\n\n", e);
        free(e);
        return rc ? -1 : 0;
    }
    if (w->kind == OAI_CHAT) {
        w->dd.reasoning.len = w->dd.content.len = 0;
        if (dsml_finish(&w->dp, &w->dd) ||
            (w->dd.reasoning.len &&
             delta_chunk(w, "reasoning_content", w->dd.reasoning.data, w->dd.reasoning.len, NULL)) ||
            (w->dd.content.len && delta_chunk(w, "content", w->dd.content.data, w->dd.content.len, NULL)))
            return -1;
        for (size_t i = 0; i < calls_returned(w); i++) {
            json_t *d = json_pack("{s:[o]}", "tool_calls", call_json(w, i, 1));
            if (chunk(w, d, NULL, NULL, NULL))
                return -1;
        }
    }
    const char *fr = oai_finish_reason(w, r->finish);
    if ((w->kind == OAI_CHAT ? chunk(w, json_object(), NULL, NULL, fr) : chunk(w, NULL, json_string(""), NULL, fr)))
        return -1;
    if (w->include_usage) {
        json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", w->id, "object",
                              w->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)w->created, "model", w->model, "choices", "usage", usage(r));
        if (sse(w, u))
            return -1;
    }
    return dsk_buf_printf(&w->out, "data: [DONE]\n\n");
}

/* ---- whole replies ---- */

static json_t *token_ids(const int32_t *ids, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer(ids[i])))
            a = (json_decref(a), NULL);
    return a;
}

json_t *oai_reply(oai_writer *w, const srv_req *r)
{
    const char *text = r->text.data ? r->text.data : "";
    json_t *lp = NULL, *choice = NULL;
    if (w->top_logprobs >= 0 && !(lp = w->kind == OAI_CHAT ? chat_logprobs(w, r->tokens, r->lps, 0, r->n_tokens)
                                                          : completion_logprobs(w, r->tokens, r->lps, 0, r->n_tokens, 0)))
        return NULL;
    if (w->kind == OAI_CHAT) {
        if (dsml_feed(&w->dp, text, r->text.len, &w->dd) || dsml_finish(&w->dp, &w->dd)) {
            json_decref(lp);
            return NULL;
        }
        json_t *msg = dsml_message(&w->dp, NULL);
        json_t *calls = json_object_get(msg, "tool_calls");
        for (size_t i = 0; calls && i < json_array_size(calls); i++) /* ids that name the request */
            json_array_set_new(calls, i, call_json(w, i, 0));
        while (json_array_size(calls) > calls_returned(w))
            json_array_remove(calls, json_array_size(calls) - 1);
        choice = msg ? json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs",
                                 lp ? lp : json_null(), "finish_reason", oai_finish_reason(w, r->finish))
                     : NULL;
    } else
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "text", lossy(text, r->text.len), "logprobs",
                           lp ? lp : json_null(), "finish_reason", oai_finish_reason(w, r->finish));
    if (!choice)
        return NULL;
    if (w->return_token_ids)
        json_object_set_new(choice, "token_ids", token_ids(r->tokens, r->n_tokens));
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", w->id, "object",
                             w->kind == OAI_CHAT ? "chat.completion" : "text_completion", "created",
                             (json_int_t)w->created, "model", w->model, "choices", choice, "usage", usage(r));
    if (body && w->return_token_ids)
        json_object_set_new(body, "prompt_token_ids", token_ids(w->prompt, w->n_prompt));
    return body;
}

char *oai_error_body(const char *message, const char *type, const char *param, const char *code)
{
    json_t *e = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", lossy(message, strlen(message)), "type",
                          type, "param", param && *param ? json_string(param) : json_null(), "code",
                          code ? json_string(code) : json_null());
    char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    return s;
}
