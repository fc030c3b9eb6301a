/* A generation request from its body to what the scheduler takes (docs/serving.md): the body's JSON
 * (duplicate keys refused), the route's fields (oai_parse.h), the prompt (chat_encode, or a completion's
 * text or ids), the structured-output grammar, and the limits of the context and the pool. Everything a
 * generation route does before sched_submit, without HTTP or the engine: routes.c answers with what
 * this returns, and tests/fuzz/fuzz_request drives it with any bytes. */
#ifndef DSK_SERVER_PREPARE_H
#define DSK_SERVER_PREPARE_H

#include "runtime/server/constrain.h"
#include "runtime/server/oai_parse.h"
#include "runtime/server/request.h"
#include "runtime/tokenizer/tokenizer.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* What the request path reads from the server: set once the engine is loaded, read-only after. */
typedef struct {
    const dsk_tokenizer *tok;
    const srv_genv *genv;       /* structured output's vocabulary */
    const char *served_name;
    int vocab;                  /* the engine's: prompt ids are in [0, vocab) */
    int window;                 /* rows a decode round of one sequence may carry */
    int64_t context;            /* positions one sequence holds */
    int64_t pool;               /* positions all sequences hold together; 0: unbounded */
    int default_max_tokens;     /* max_tokens when a request gives none */
    const model_config *cfg;    /* the model's (image spans are sized from it); may be NULL without images */
    int takes_images;           /* the model has a vision tower and the backend runs it */
    size_t max_image_bytes;     /* one image's file at most (0: engine_image_load's default) */
} srv_limits;

/* A request ready for sched_submit, and what its reply's writer needs. */
typedef struct {
    srv_req *req;               /* the prompt, the generation settings, the reservation (reference held) */
    int stream, include_usage, return_token_ids, parallel_tool_calls;
    int thinking;               /* chat: the prompt ends in <think>: the reply starts with reasoning */
} srv_prepared;

/* The body of a request as a JSON object, or a 400 (invalid_json). The caller frees *out. */
int srv_body_json(const char *body, size_t len, json_t **out, oai_error *e);

/* The body of a request to route kind (OAI_CHAT, OAI_COMPLETION) with request id `id` into *out, or -1
 * with *e: a status (400 for what the client can fix, 404 for another model, 500 for memory), an OpenAI
 * error type and code, the field it concerns, and a message. */
int srv_prepare(const srv_limits *lim, int kind, const char *body, size_t len, const char *id, srv_prepared *out,
                oai_error *e);

#endif
