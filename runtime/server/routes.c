/* The routes: what each answers (docs/serving.md). Generation routes check the request
 * (oai_parse.c), encode the prompt, check it against the context and the pool, hand a request to the
 * scheduler and wait for it; the others answer at once. */
#include "runtime/common/error.h"
#include "runtime/server/http.h"
#include "runtime/server/oai_parse.h"
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
    json_error_t err;
    json_t *j = json_loadb(cx->body.data ? cx->body.data : "", cx->body.len, JSON_REJECT_DUPLICATES, &err);
    if (!j)
        *rc = http_error(cx, 400, "invalid_request_error", "invalid_json", NULL,
                         "the body is not valid JSON: %s (line %d, column %d)", err.text, err.line, err.column);
    else if (!json_is_object(j)) {
        json_decref(j);
        j = NULL;
        *rc = http_error(cx, 400, "invalid_request_error", "invalid_json", NULL, "the body must be a JSON object");
    }
    return j;
}

static void new_id(server *s, const char *prefix, char *out, size_t n)
{
    uint64_t k = atomic_fetch_add(&s->next_id, 1);
    snprintf(out, n, "%s-%016llx%08llx", prefix, (unsigned long long)s->id_salt, (unsigned long long)k);
}

/* ---- generation ---- */

/* A text prompt (BOS first, control-token strings matched as the tokenizer does) or token ids. */
static int completion_prompt(server *s, const json_t *pr, tok_ids *ids, oai_error *e)
{
    if (json_is_string(pr)) {
        int32_t *v;
        size_t n;
        if (tok_encode(s->tok, json_string_value(pr), json_string_length(pr), 1, &v, &n))
            return oai_fail(e, 400, "invalid_request_error", NULL, "prompt", "prompt: %s", dsk_err_msg());
        *ids = (tok_ids){v, n, n};
        return 0;
    }
    size_t i;
    const json_t *x;
    json_array_foreach(pr, i, x) {
        json_int_t id = json_integer_value(x);
        if (id < 0 || id >= s->vocab)
            return oai_fail(e, 400, "invalid_request_error", NULL, "prompt", "prompt[%zu]: %lld is not a token id in "
                            "[0, %d)", i, (long long)id, s->vocab);
        if (tok_ids_push(ids, (int32_t)id))
            return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

/* Limits against the context and the pool, then the request itself (the prompt and stops move into it). */
static srv_req *make_request(http_ctx *cx, oai_params *p, tok_ids *ids, const char *id, oai_error *e)
{
    server *s = cx->srv;
    int64_t n = (int64_t)ids->len;
    if (n >= s->context) {
        oai_fail(e, 400, "invalid_request_error", "context_length_exceeded", p->kind == OAI_CHAT ? "messages" : "prompt",
                 "the prompt is %lld tokens; the context holds %lld positions (at most %lld prompt tokens)",
                 (long long)n, (long long)s->context, (long long)s->context - 1);
        return NULL;
    }
    int64_t room = s->context - n;
    int64_t max = p->gen.max_tokens ? p->gen.max_tokens : s->o.default_max_tokens;
    if (max > room)
        max = room; /* the reply stops at the context's end with finish_reason "length" */
    int64_t reserve = n + max + s->window;
    if (reserve > s->context)
        reserve = s->context;
    if (s->pool > 0 && reserve > s->pool) {
        oai_fail(e, 400, "invalid_request_error", "pool_exceeded", "max_tokens",
                 "the prompt (%lld tokens) and max_tokens (%lld) need %lld positions; the pool holds %lld (--pool)",
                 (long long)n, (long long)max, (long long)reserve, (long long)s->pool);
        return NULL;
    }
    srv_req *r = srv_req_new();
    if (!r) {
        oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    snprintf(r->id, sizeof r->id, "%s", id);
    r->prompt = ids->data;
    r->n_prompt = (int)n;
    *ids = (tok_ids){0};
    r->gen = p->gen;
    r->gen.max_tokens = (int)max;
    p->gen.stops = NULL;
    p->gen.n_stops = 0;
    p->gen.grammar = NULL;
    r->reserve = reserve;
    r->t_arrival = dsk_now();
    /* no seed asked: one derived from the request id, sent back in x-dskit-seed; 53 bits, so it goes back
     * into a request exactly (JSON integers, JavaScript numbers) */
    if (!p->seed_given)
        r->gen.sp.seed = dsk_xxh64(id, strlen(id)) & ((1ull << 53) - 1);
    cx->seed = r->gen.sp.seed;
    cx->has_seed = 1;
    return r;
}

/* A chat's image parts (data URLs), decoded and preprocessed here on the HTTP thread, their spans placed
 * into the prompt; a refusal is a 400 naming the part (a model without a vision tower, a backend that
 * does not run it, an http(s) URL, a bad or oversized image). */
static int chat_images(server *s, const chat_prompt *cp, engine_prompt *out, oai_error *e)
{
    const chat_image *im = cp->images;
    if (!s->takes_images)
        return oai_fail(e, 400, "invalid_request_error", NULL, "messages",
                        "messages[%zu].content[%zu]: %s", im[0].message, im[0].part,
                        s->cfg->vision_n_layers > 0 ? "this backend does not run the vision tower yet (docs/vision.md)"
                                                   : "this model has no vision tower: it takes no images");
    size_t n = cp->n_images;
    size_t *at = dsk_malloc(sizeof(size_t) * n), *lens = dsk_malloc(sizeof(size_t) * n);
    const char **urls = dsk_malloc(sizeof(char *) * n);
    int rc = -1, bad = -1;
    if (at && lens && urls) {
        for (size_t k = 0; k < n; k++) {
            at[k] = im[k].at;
            urls[k] = im[k].url;
            lens[k] = im[k].url_len;
        }
        rc = engine_prompt_urls(s->cfg, cp->ids.data, cp->ids.len, at, urls, lens, (int)n, s->o.max_body, out, &bad);
        if (rc && bad >= 0)
            oai_fail(e, 400, "invalid_request_error", "invalid_image", "messages", "messages[%zu].content[%zu]: %s",
                     im[bad].message, im[bad].part, dsk_err_msg());
        else if (rc)
            oai_fail(e, 400, "invalid_request_error", NULL, "messages", "%s", dsk_err_msg());
    } else
        oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    free(at);
    free(lens);
    free(urls);
    return rc;
}

/* Structured output: the request's grammar, compiled here on its own thread (the scheduler only follows
 * it). A refusal is a 400 naming the field and, from the compiler, the keyword and path or the limit. */
static int constrain(server *s, oai_params *p, int thinking, oai_error *e)
{
    double t0 = dsk_now();
    if (srv_spec_compile(&s->genv, &p->spec, &p->gen.grammar))
        return oai_fail(e, 400, "invalid_request_error", "invalid_structured_output", p->spec.field,
                        "%s: %s (refused after %.0f ms)", p->spec.field, dsk_err_msg(), 1e3 * (dsk_now() - t0));
    p->gen.think_first = thinking;
    return 0;
}

static enum MHD_Result generate(http_ctx *cx, int kind)
{
    server *s = cx->srv;
    enum MHD_Result rc = MHD_NO;
    json_t *req = body_json(cx, &rc);
    if (!req)
        return rc;
    char id[64];
    new_id(s, kind == OAI_CHAT ? "chatcmpl" : "cmpl", id, sizeof id);
    cx->id = dsk_strdup(id);
    oai_params p;
    oai_error e = {0};
    tok_ids ids = {0};
    chat_prompt cp = {0};
    engine_prompt images = {0};
    int thinking = 0;
    if ((kind == OAI_CHAT ? oai_parse_chat(req, s->o.served_name, &p, &e)
                          : oai_parse_completion(req, s->o.served_name, &p, &e))) {
        rc = bad_request(cx, &e);
        goto done;
    }
    if (kind == OAI_CHAT) {
        if (chat_encode(s->tok, p.chat, 0, &cp)) {
            rc = http_error(cx, 400, "invalid_request_error", NULL, "messages", "%s", dsk_err_msg());
            goto done;
        }
        if (cp.n_images && chat_images(s, &cp, &images, &e)) {
            rc = bad_request(cx, &e);
            goto done; /* cp is freed there */
        }
        if (cp.n_images) { /* the prompt with its spans: the ids are the expanded ones */
            ids = (tok_ids){images.ids, (size_t)images.n_ids, (size_t)images.n_ids};
            images.ids = NULL;
        } else {
            ids = cp.ids;
            cp.ids = (tok_ids){0};
        }
        thinking = cp.thinking;
    } else if (completion_prompt(s, p.prompt, &ids, &e)) {
        rc = bad_request(cx, &e);
        goto done;
    }
    if (p.spec.kind != CONS_NONE && constrain(s, &p, thinking, &e)) {
        rc = bad_request(cx, &e);
        goto done;
    }
    if (!(cx->req = make_request(cx, &p, &ids, id, &e))) {
        rc = bad_request(cx, &e);
        goto done;
    }
    cx->req->images = images; /* the request owns its spans from here */
    images = (engine_prompt){0};
    oai_writer_init(&cx->w, kind, cx->id, s->o.served_name, thinking);
    cx->has_writer = 1;
    cx->w.include_usage = p.include_usage;
    cx->w.top_logprobs = cx->req->gen.top_logprobs;
    cx->w.return_token_ids = p.return_token_ids;
    cx->w.parallel_tool_calls = p.parallel_tool_calls;
    cx->w.tok = s->tok;
    cx->w.prompt = cx->req->prompt;
    cx->w.n_prompt = cx->req->n_prompt;
    srv_req *r = cx->req;
    int gone = sched_submit(s->sched, r) == 0 && http_wait(cx, !p.stream);
    pthread_mutex_lock(&r->mu);
    int finished = r->done, fin = r->finish;
    pthread_mutex_unlock(&r->mu);
    if (gone && !finished)
        goto done; /* the client left (or the server is stopping): nobody to answer */
    /* done with an error (refused, failed, timed out in the queue) before any byte went out; once done,
     * nothing in r changes any more */
    if (finished && fin == FIN_ERROR) {
        rc = http_error(cx, r->status, r->err_type ? r->err_type : "server_error", r->err_code, NULL, "%s", r->err);
        goto done;
    }
    if (p.stream)
        rc = http_stream(cx);
    else {
        pthread_mutex_lock(&r->mu);
        json_t *body = oai_reply(&cx->w, r);
        pthread_mutex_unlock(&r->mu);
        rc = http_json(cx, 200, body);
    }
done:
    tok_ids_free(&ids);
    engine_prompt_free(&images);
    chat_prompt_free(&cp);
    oai_params_free(&p);
    json_decref(req);
    return rc;
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
