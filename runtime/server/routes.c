/* The routes: what each answers (docs/serving.md). Generation routes prepare the request from its body
 * (prepare.c: the fields, the prompt, the grammar, the context and the pool), hand it to the scheduler and
 * wait for it; the others answer at once. */
#include "runtime/common/error.h"
#include "runtime/server/http.h"
#include "runtime/server/oai_parse.h"
#include "runtime/server/prepare.h"
#include "runtime/tokenizer/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *path, *method;
    int route;
} table[] = {
    {"/v1/chat/completions", "POST", ROUTE_CHAT}, {"/v1/completions", "POST", ROUTE_COMPLETIONS},
    {"/v1/models", "GET", ROUTE_MODELS},          {"/health", "GET", ROUTE_HEALTH},
    {"/metrics", "GET", ROUTE_METRICS},           {"/tokenize", "POST", ROUTE_TOKENIZE},
    {"/detokenize", "POST", ROUTE_DETOKENIZE},
};

int routes_find(const char *method, const char *url, const char **allowed)
{
    *allowed = NULL;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(url, table[i].path)) {
            if (strcmp(method, table[i].method))
                *allowed = table[i].method;
            return table[i].route;
        }
    return ROUTE_OTHER;
}

static enum MHD_Result bad_request(http_ctx *cx, const oai_error *e)
{
    return http_error(cx, e->status, e->type, e->code, e->param, "%s", e->message);
}

/* The body as a JSON object; NULL after answering 400. */
static json_t *body_json(http_ctx *cx, enum MHD_Result *rc)
{
    json_t *j;
    oai_error e;
    if (srv_body_json(cx->body.data, cx->body.len, &j, &e))
        *rc = bad_request(cx, &e);
    return j;
}

static void new_id(server *s, const char *prefix, char *out, size_t n)
{
    uint64_t k = atomic_fetch_add(&s->next_id, 1);
    snprintf(out, n, "%s-%016llx%08llx", prefix, (unsigned long long)s->id_salt, (unsigned long long)k);
}

/* ---- generation ---- */

/* What the request path reads from the server (prepare.h). */
static srv_limits limits_of(const server *s)
{
    return (srv_limits){s->tok,     &s->genv,          s->o.served_name, s->vocab,      s->window,
                        s->context, s->pool,           s->o.default_max_tokens, s->cfg, s->takes_images,
                        s->o.max_body};
}

static enum MHD_Result generate(http_ctx *cx, int kind)
{
    server *s = cx->srv;
    char id[64];
    new_id(s, kind == OAI_CHAT ? "chatcmpl" : "cmpl", id, sizeof id);
    cx->id = dsk_strdup(id);
    srv_limits lim = limits_of(s);
    srv_prepared p;
    oai_error e = {0};
    if (srv_prepare(&lim, kind, cx->body.data, cx->body.len, id, &p, &e))
        return bad_request(cx, &e);
    cx->req = p.req;
    cx->seed = p.req->gen.sp.seed;
    cx->has_seed = 1;
    oai_writer_init(&cx->w, kind, cx->id, s->o.served_name, p.thinking);
    cx->has_writer = 1;
    cx->w.include_usage = p.include_usage;
    cx->w.top_logprobs = cx->req->gen.top_logprobs;
    cx->w.return_token_ids = p.return_token_ids;
    cx->w.parallel_tool_calls = p.parallel_tool_calls;
    cx->w.tok = s->tok;
    cx->w.prompt = cx->req->prompt;
    cx->w.n_prompt = cx->req->n_prompt;
    srv_req *r = cx->req;
    r->stream = p.stream;
    int gone = sched_submit(s->sched, r) == 0 && http_wait(cx, !p.stream);
    pthread_mutex_lock(&r->mu);
    int finished = r->done, fin = r->finish;
    pthread_mutex_unlock(&r->mu);
    if (gone && !finished)
        return MHD_NO; /* the client left (or the server is stopping): nobody to answer */
    /* done with an error (refused, failed, timed out in the queue) before any byte went out; once done,
     * nothing in r changes any more */
    if (finished && fin == FIN_ERROR)
        return http_error(cx, r->status, r->err_type ? r->err_type : "server_error", r->err_code, NULL, "%s", r->err);
    if (p.stream)
        return http_stream(cx);
    pthread_mutex_lock(&r->mu);
    json_t *body = oai_reply(&cx->w, r);
    pthread_mutex_unlock(&r->mu);
    return http_json(cx, 200, body);
}

/* ---- the others ---- */

static enum MHD_Result health(http_ctx *cx)
{
    int st = atomic_load(&cx->srv->state);
    const char *name = st == SRV_READY ? "ok" : st == SRV_LOADING ? "loading" : "draining";
    return http_json(cx, st == SRV_READY ? 200 : 503, json_pack("{s:s}", "status", name));
}

static enum MHD_Result models(http_ctx *cx)
{
    server *s = cx->srv;
    return http_json(cx, 200, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:I}]}", "object", "list", "data", "id",
                                        s->o.served_name, "object", "model", "created", (json_int_t)s->started,
                                        "owned_by", "dskit", "max_model_len", (json_int_t)s->context));
}

static enum MHD_Result metrics(http_ctx *cx)
{
    dsk_buf b = {0};
    if (metrics_render(&cx->srv->metrics, &b)) {
        dsk_buf_free(&b);
        return http_error(cx, 500, "server_error", NULL, NULL, "out of memory rendering the metrics");
    }
    return http_respond(cx, 200, "text/plain; version=0.0.4", b.data, b.len);
}

/* POST /tokenize: {"prompt": TEXT, "add_special_tokens": true} (BOS first unless false) or a chat body
 * ("messages", ...) encoded exactly as /v1/chat/completions would. */
static enum MHD_Result tokenize(http_ctx *cx)
{
    server *s = cx->srv;
    enum MHD_Result rc = MHD_NO;
    json_t *req = body_json(cx, &rc);
    if (!req)
        return rc;
    tok_ids ids = {0};
    oai_params p = {0};
    oai_error e = {0};
    int ok = 0;
    const json_t *prompt = json_object_get(req, "prompt"), *add = json_object_get(req, "add_special_tokens");
    if (json_object_get(req, "messages")) {
        chat_prompt cp;
        if (oai_parse_chat(req, s->o.served_name, &p, &e))
            rc = bad_request(cx, &e);
        else if (chat_encode(s->tok, p.chat, 0, &cp))
            rc = http_error(cx, 400, "invalid_request_error", NULL, "messages", "%s", dsk_err_msg());
        else {
            ids = cp.ids; /* the ids without the image spans (there is no model config here to expand them) */
            free(cp.images);
            ok = 1;
        }
    } else if (!json_is_string(prompt)) {
        rc = http_error(cx, 400, "invalid_request_error", NULL, "prompt",
                        "/tokenize needs \"prompt\" (a string) or \"messages\"");
    } else if (add && !json_is_boolean(add)) {
        rc = http_error(cx, 400, "invalid_request_error", NULL, "add_special_tokens",
                        "'add_special_tokens' must be a boolean");
    } else {
        int32_t *v;
        size_t n;
        if (tok_encode(s->tok, json_string_value(prompt), json_string_length(prompt), !json_is_false(add), &v, &n))
            rc = http_error(cx, 400, "invalid_request_error", NULL, "prompt", "%s", dsk_err_msg());
        else {
            ids = (tok_ids){v, n, n};
            ok = 1;
        }
    }
    if (ok) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < ids.len; i++)
            if (json_array_append_new(a, json_integer(ids.data[i])))
                a = (json_decref(a), NULL);
        rc = http_json(cx, 200, a ? json_pack("{s:o, s:I, s:I}", "tokens", a, "count", (json_int_t)ids.len,
                                              "max_model_len", (json_int_t)s->context)
                                  : NULL);
    }
    tok_ids_free(&ids);
    oai_params_free(&p);
    json_decref(req);
    return rc;
}

/* POST /detokenize: {"tokens": [ids]} -> {"prompt": TEXT} (a character cut at the end comes out as U+FFFD). */
static enum MHD_Result detokenize(http_ctx *cx)
{
    server *s = cx->srv;
    enum MHD_Result rc = MHD_NO;
    json_t *req = body_json(cx, &rc);
    if (!req)
        return rc;
    const json_t *t = json_object_get(req, "tokens");
    if (!json_is_array(t)) {
        json_decref(req);
        return http_error(cx, 400, "invalid_request_error", NULL, "tokens", "/detokenize needs \"tokens\": [ids]");
    }
    tok_stream ts;
    tok_stream_init(&ts, s->tok);
    dsk_buf b = {0};
    size_t i;
    const json_t *x;
    int bad = 0;
    json_array_foreach(t, i, x) {
        json_int_t id = json_integer_value(x);
        if (!json_is_integer(x) || id < 0 || id >= tok_vocab_size(s->tok) || !tok_str(s->tok, (int32_t)id)) {
            rc = http_error(cx, 400, "invalid_request_error", NULL, "tokens", "tokens[%zu] is not a token id of the "
                            "tokenizer", i);
            bad = 1;
            break;
        }
        if ((bad = tok_stream_push(&ts, (int32_t)id, &b))) {
            rc = http_error(cx, 500, "server_error", NULL, NULL, "%s", dsk_err_msg());
            break;
        }
    }
    if (!bad && !(bad = tok_stream_flush(&ts, &b)))
        rc = http_json(cx, 200, json_pack("{s:s%}", "prompt", b.data ? b.data : "", b.len));
    dsk_buf_free(&b);
    json_decref(req);
    return rc;
}

enum MHD_Result routes_dispatch(http_ctx *cx)
{
    switch (cx->route) {
    case ROUTE_CHAT: return generate(cx, OAI_CHAT);
    case ROUTE_COMPLETIONS: return generate(cx, OAI_COMPLETION);
    case ROUTE_MODELS: return models(cx);
    case ROUTE_HEALTH: return health(cx);
    case ROUTE_METRICS: return metrics(cx);
    case ROUTE_TOKENIZE: return tokenize(cx);
    case ROUTE_DETOKENIZE: return detokenize(cx);
    default: return http_error(cx, 404, "invalid_request_error", "not_found", NULL, "no such route");
    }
}
