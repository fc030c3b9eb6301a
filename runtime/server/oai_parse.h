/* OpenAI request bodies (POST /v1/chat/completions, /v1/completions) checked and turned into generation
 * parameters. Every field is known: a supported one of the wrong type or range is a 400 naming it, an
 * unsupported one (n > 1, guided_grammar, penalties, logit_bias, ...) a 400 saying why, and an unknown one
 * a 400 naming it: nothing is silently ignored (docs/serving.md). Structured output (response_format,
 * guided_json / _regex / _choice, a forced tool_choice) is checked here and compiled by the route. */
#ifndef DSK_SERVER_OAI_PARSE_H
#define DSK_SERVER_OAI_PARSE_H

#include "runtime/server/constrain.h"
#include "runtime/server/request.h"

#include <jansson.h>

enum { OAI_CHAT, OAI_COMPLETION };

typedef struct {
    int status;          /* 400, 404, ... */
    const char *type;    /* OpenAI error type: invalid_request_error, ... */
    const char *code;    /* or NULL */
    char param[64];      /* the field, "" when none */
    char message[1024];  /* as long as http_error writes */
} oai_error;

typedef struct {
    int kind;
    int stream, include_usage;
    srv_gen gen;              /* max_tokens 0: not given; stops owned here until moved to a request */
    int seed_given;
    int logprobs;             /* chat: logprobs true; completions: logprobs given */
    int return_token_ids;     /* extension (vLLM's name): the prompt's and the reply's token ids */
    int parallel_tool_calls;  /* false: only the first call is returned */
    json_t *chat;             /* chat: what chat_encode reads (thinking defaulted on, tools per tool_choice) */
    const json_t *prompt;     /* completions: a string or an array of ids (borrowed from the request) */
    srv_spec spec;            /* structured output asked for (kind CONS_NONE: none) */
} oai_params;

int oai_parse_chat(const json_t *req, const char *served_name, oai_params *p, oai_error *e);
int oai_parse_completion(const json_t *req, const char *served_name, oai_params *p, oai_error *e);
void oai_params_free(oai_params *p);

/* Set e (and return -1): the usual 400 naming a field. The param and the message are escaped
 * (runtime/common/escape.h): printable, valid UTF-8, the param cut between characters. */
int oai_fail(oai_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

#endif
