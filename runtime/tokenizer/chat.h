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

/* An image part of the request (vision.md §1.3), in prompt order: its span of image_token_id goes before
 * ids[at] (chat_encode leaves no id of its own there). */
typedef struct {
    size_t at;
    const char *url; /* image_url.url, pointing into the request */
    size_t url_len;
    size_t message, part; /* where it was: messages[message].content[part] */
} chat_image;

typedef struct {
    tok_ids ids;  /* the prompt, BOS first */
    chat_image *images; /* [n_images] image parts (user messages and tool results only) */
    size_t n_images;
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
