/* OpenAI response bodies: the whole reply (stream false) or its SSE chunks (stream true), for chat
 * (reasoning, content and DSML tool calls split by the dsml parser, as deltas when streaming) and for
 * completions. Pure formatting: it reads what the scheduler published and writes bytes, so the tests
 * can drive it with any text. */
#ifndef DSK_SERVER_OAI_REPLY_H
#define DSK_SERVER_OAI_REPLY_H

#include "runtime/server/request.h"
#include "runtime/tokenizer/dsml.h"
#include "runtime/tokenizer/tokenizer.h"

#include <jansson.h>

typedef struct {
    int kind;                 /* OAI_CHAT, OAI_COMPLETION */
    const char *id, *model;
    long long created;
    int include_usage;
    int top_logprobs;         /* -1: no logprobs */
    int return_token_ids, parallel_tool_calls;
    const dsk_tokenizer *tok;
    const int32_t *prompt;
    int n_prompt;
    /* what has been read so far */
    size_t text_off;
    int tok_off;
    int n_calls_sent;
    dsml_parser dp;
    dsml_delta dd;
    int sent_role;
    dsk_buf out;              /* SSE bytes waiting to be sent */
} oai_writer;

void oai_writer_init(oai_writer *w, int kind, const char *id, const char *model, int thinking);
void oai_writer_free(oai_writer *w);

/* Streaming: the request's text and tokens so far (the writer takes what is new) as chunks into w->out. */
int oai_stream_update(oai_writer *w, const char *text, size_t len, const int32_t *toks, const srv_logprob *lps,
                      int n);
/* Streaming, the end: the last deltas (tool calls), the finish reason, the usage chunk when asked, [DONE].
 * An error after the headers went out is an error event. */
int oai_stream_finish(oai_writer *w, const srv_req *r);
/* Not streaming: the whole body. */
json_t *oai_reply(oai_writer *w, const srv_req *r);

/* {"error": {"message", "type", "param", "code"}} */
char *oai_error_body(const char *message, const char *type, const char *param, const char *code);
/* The finish reason a reply reports (tool_calls when the dsml parser found calls). */
const char *oai_finish_reason(const oai_writer *w, int fin);

#endif
