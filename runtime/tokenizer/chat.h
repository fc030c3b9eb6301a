/* DeepSeek-V4.1's chat encoding (model.md §5): an OpenAI-style chat request to prompt ids.
 *
 * The request fields read: messages (roles system, developer = system, user, assistant, tool,
 * latest_reminder), tools, response_format, reasoning_effort, chat_template_kwargs {thinking,
 * enable_thinking, drop_thinking, reasoning_effort}. Everything else is ignored. The rules and the
 * choices made where §5 is silent are in docs/tokenizer.md. Thread-safe; no global state. */
#ifndef DSK_CHAT_H
#define DSK_CHAT_H

#include <jansson.h>

#include "runtime/tokenizer/dsml.h"
#include "runtime/tokenizer/tokenizer.h"

typedef struct {
    tok_ids ids;  /* the prompt, BOS first */
    int thinking; /* the prompt ends with <think>: the reply starts with reasoning (dsml_parser_init) */
    int thinking_mode; /* thinking mode was requested */
} chat_prompt;

enum {
    /* Match control-token strings inside message text too, as the reference does by tokenizing the
     * rendered string. By default message text is plain text: a user cannot forge a control token. */
    CHAT_SPECIALS_IN_TEXT = 1,
};

/* Render the request as prompt text with its control tokens marked. */
int chat_render(const json_t *request, dsml_prompt *out, chat_prompt *info);
/* Render and encode: control tokens become their ids (looked up by string; one the tokenizer lacks
 * is encoded as text), the text between them is encoded as text. */
int chat_encode(const dsk_tokenizer *tok, const json_t *request, unsigned flags, chat_prompt *out);
void chat_prompt_free(chat_prompt *p);

#endif
