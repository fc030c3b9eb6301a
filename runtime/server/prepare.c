/* A generation request's body up to the scheduler (prepare.h): check it (oai_parse.c), encode the prompt,
 * compile its grammar, check it against the context and the pool. */
#include "runtime/server/prepare.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/tokenizer/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_body_json(const char *body, size_t len, json_t **out, oai_error *e)
{
    json_error_t err;
    json_t *j = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &err);
    *out = NULL;
    if (!j)
        return oai_fail(e, 400, "invalid_request_error", "invalid_json", NULL,
                        "the body is not valid JSON: %s (line %d, column %d)", err.text, err.line, err.column);
    if (!json_is_object(j)) {
        json_decref(j);
        return oai_fail(e, 400, "invalid_request_error", "invalid_json", NULL, "the body must be a JSON object");
    }
    *out = j;
    return 0;
}

/* A text prompt (BOS first, control-token strings matched as the tokenizer does) or token ids. */
static int completion_prompt(const srv_limits *lim, const json_t *pr, tok_ids *ids, oai_error *e)
{
    if (json_is_string(pr)) {
        int32_t *v;
        size_t n;
        if (tok_encode(lim->tok, json_string_value(pr), json_string_length(pr), 1, &v, &n))
            return oai_fail(e, 400, "invalid_request_error", NULL, "prompt", "prompt: %s", dsk_err_msg());
        *ids = (tok_ids){v, n, n};
        return 0;
    }
    size_t i;
    const json_t *x;
    json_array_foreach(pr, i, x) {
        json_int_t id = json_integer_value(x);
        if (id < 0 || id >= lim->vocab)
            return oai_fail(e, 400, "invalid_request_error", NULL, "prompt", "prompt[%zu]: %lld is not a token id in "
                            "[0, %d)", i, (long long)id, lim->vocab);
        if (tok_ids_push(ids, (int32_t)id))
            return oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

/* Limits against the context and the pool, then the request itself (the prompt and stops move into it). */
static srv_req *make_request(const srv_limits *lim, oai_params *p, tok_ids *ids, const char *id, oai_error *e)
{
    int64_t n = (int64_t)ids->len;
    if (n >= lim->context) {
        oai_fail(e, 400, "invalid_request_error", "context_length_exceeded", p->kind == OAI_CHAT ? "messages" : "prompt",
                 "the prompt is %lld tokens; the context holds %lld positions (at most %lld prompt tokens)",
                 (long long)n, (long long)lim->context, (long long)lim->context - 1);
        return NULL;
    }
    int64_t room = lim->context - n;
    int64_t max = p->gen.max_tokens ? p->gen.max_tokens : lim->default_max_tokens;
    if (max > room)
        max = room; /* the reply stops at the context's end with finish_reason "length" */
    int64_t reserve = n + max + lim->window;
    if (reserve > lim->context)
        reserve = lim->context;
    if (lim->pool > 0 && reserve > lim->pool) {
        oai_fail(e, 400, "invalid_request_error", "pool_exceeded", "max_tokens",
                 "the prompt (%lld tokens) and max_tokens (%lld) need %lld positions; the pool holds %lld (--pool)",
                 (long long)n, (long long)max, (long long)reserve, (long long)lim->pool);
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
    return r;
}

/* Structured output: the request's grammar, compiled here on its own thread (the scheduler only follows
 * it). A refusal is a 400 naming the field and, from the compiler, the keyword and path or the limit. */
static int constrain(const srv_limits *lim, oai_params *p, int thinking, oai_error *e)
{
    double t0 = dsk_now();
    if (srv_spec_compile(lim->genv, &p->spec, &p->gen.grammar))
        return oai_fail(e, 400, "invalid_request_error", "invalid_structured_output", p->spec.field,
                        "%s: %s (refused after %.0f ms)", p->spec.field, dsk_err_msg(), 1e3 * (dsk_now() - t0));
    p->gen.think_first = thinking;
    return 0;
}

/* A chat's image parts (data URLs), decoded and preprocessed here (on the HTTP thread), their spans placed
 * into the prompt; a refusal is a 400 naming the part (a model without a vision tower, a backend that
 * does not run it, an http(s) URL, a bad or oversized image). */
static int chat_images(const srv_limits *lim, const chat_prompt *cp, engine_prompt *out, oai_error *e)
{
    const chat_image *im = cp->images;
    if (!lim->takes_images)
        return oai_fail(e, 400, "invalid_request_error", NULL, "messages", "messages[%zu].content[%zu]: %s",
                        im[0].message, im[0].part,
                        lim->cfg && lim->cfg->vision_n_layers > 0
                            ? "this backend does not run the vision tower yet (docs/vision.md)"
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
        rc = engine_prompt_urls(lim->cfg, cp->ids.data, cp->ids.len, at, urls, lens, (int)n, lim->max_image_bytes, out,
                                &bad);
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

int srv_prepare(const srv_limits *lim, int kind, const char *body, size_t len, const char *id, srv_prepared *out,
                oai_error *e)
{
    *out = (srv_prepared){0};
    json_t *req;
    if (srv_body_json(body, len, &req, e))
        return -1;
    oai_params p;
    tok_ids ids = {0};
    chat_prompt cp = {0};
    engine_prompt images = {0};
    int thinking = 0, rc = -1;
    if ((kind == OAI_CHAT ? oai_parse_chat(req, lim->served_name, &p, e)
                          : oai_parse_completion(req, lim->served_name, &p, e)))
        goto done;
    if (kind == OAI_CHAT) {
        if (chat_encode(lim->tok, p.chat, 0, &cp)) {
            oai_fail(e, 400, "invalid_request_error", NULL, "messages", "%s", dsk_err_msg());
            goto done;
        }
        if (cp.n_images && chat_images(lim, &cp, &images, e))
            goto done; /* cp is freed there */
        if (cp.n_images) { /* the prompt with its spans: the ids are the expanded ones */
            ids = (tok_ids){images.ids, (size_t)images.n_ids, (size_t)images.n_ids};
            images.ids = NULL;
        } else {
            ids = cp.ids;
            cp.ids = (tok_ids){0};
        }
        thinking = cp.thinking;
    } else if (completion_prompt(lim, p.prompt, &ids, e))
        goto done;
    if (p.spec.kind != CONS_NONE && constrain(lim, &p, thinking, e))
        goto done;
    if (!(out->req = make_request(lim, &p, &ids, id, e)))
        goto done;
    out->req->images = images; /* the request owns its spans from here */
    images = (engine_prompt){0};
    out->stream = p.stream;
    out->include_usage = p.include_usage;
    out->return_token_ids = p.return_token_ids;
    out->parallel_tool_calls = p.parallel_tool_calls;
    out->thinking = thinking;
    rc = 0;
done:
    tok_ids_free(&ids);
    engine_prompt_free(&images);
    chat_prompt_free(&cp);
    oai_params_free(&p);
    json_decref(req);
    return rc;
}
