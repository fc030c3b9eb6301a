/* DSML, DeepSeek-V4.1's tool-call markup (model.md §5): rendering tool calls and the tools block
 * into a prompt, and reading reasoning, content and tool calls back out of generated text.
 *
 *   \n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="NAME">\n
 *   <｜DSML｜ parameter name="P" string="true|false">VALUE</｜DSML｜ parameter>   (one per line)
 *   \n</｜DSML｜ invoke>   (invokes joined by \n)   \n</｜DSML｜ calls>
 *
 * Only "｜DSML｜" is a control token; the "<", " calls" and ">" around it are ordinary text.
 * string="true": VALUE is the raw string; string="false": VALUE is JSON. */
#ifndef DSK_DSML_H
#define DSK_DSML_H

#include <jansson.h>
#include <stddef.h>

#include "runtime/common/util.h"

/* The control-token strings of the format (looked up in the tokenizer by these strings). */
#define DSML_BOS "<｜begin▁of▁sentence｜>"
#define DSML_EOS "<｜end▁of▁sentence｜>"
#define DSML_SYSTEM "<｜System｜>"
#define DSML_USER "<｜User｜>"
#define DSML_ASSISTANT "<｜Assistant｜>"
#define DSML_REMINDER "<｜latest_reminder｜>"
#define DSML_THINK "<think>"
#define DSML_END_THINK "</think>"
#define DSML_TOKEN "｜DSML｜"
/* An image part's place (vision.md §1.3). Not a token of the V3 tokenizer: chat_encode turns the marker
 * into nothing but the image's position, and the caller puts the model's image_token_id span there. */
#define DSML_IMAGE "<｜deepseek_image｜>"

/* A rendered prompt: its text, and the spans of it that are control tokens ("markers"). */
typedef struct {
    size_t off, len;
} dsml_span;

/* An image_url part: its URL (pointing into the request) and where it was. */
typedef struct {
    const char *url;
    size_t url_len;
    size_t message, part;
} dsml_image;

typedef struct {
    dsk_buf text;
    dsml_span *markers; /* [n_markers] in text order */
    size_t n_markers, cap;
    dsml_image *images; /* [n_images] in prompt order, each with a DSML_IMAGE marker */
    size_t n_images, images_cap;
} dsml_prompt;

int dsml_text(dsml_prompt *p, const char *s, size_t len);
int dsml_mark(dsml_prompt *p, const char *marker);
void dsml_prompt_free(dsml_prompt *p);

/* "\n\n" + the calls block for an OpenAI tool_calls array. where names the array in messages. */
int dsml_render_calls(dsml_prompt *p, const json_t *tool_calls, const char *where);
/* The "## Tools" block for an OpenAI tools array. */
int dsml_render_tools(dsml_prompt *p, const json_t *tools);
/* A tool's name as the prompt spells it: "namespace::name" when the tool or call has a namespace. */
int dsml_tool_name(const json_t *outer, const json_t *function, dsk_buf *out);

/* Reading a reply. Feed the generated text (without the final EOS) as it arrives; each call appends
 * the newly classified text to delta. A tool-call block is held back until dsml_finish, which
 * parses it; a block that is not well-formed DSML comes back as content text, never as an error. */
typedef struct {
    char *name;      /* as the model wrote it */
    char *arguments; /* a JSON object, as Python's json.dumps writes it */
} dsml_call;

typedef struct {
    dsk_buf reasoning, content;
} dsml_delta;

typedef struct {
    int in_reasoning; /* before </think>: the prompt ended with <think> */
    int in_calls;     /* a calls block has begun: buffering it */
    int finished;
    dsk_buf hold;  /* text that may be the start of a marker */
    dsk_buf block; /* the calls block, from the "\n\n" before it */
    dsk_buf reasoning, content;
    dsml_call *calls;
    size_t n_calls;
} dsml_parser;

void dsml_parser_init(dsml_parser *p, int thinking);
int dsml_feed(dsml_parser *p, const char *text, size_t len, dsml_delta *delta);
int dsml_finish(dsml_parser *p, dsml_delta *delta);
void dsml_parser_free(dsml_parser *p);
void dsml_delta_free(dsml_delta *d);
/* One-shot: the whole reply (a trailing EOS string is dropped). */
int dsml_parse(const char *text, size_t len, int thinking, dsml_parser *p);
/* The finished reply as an OpenAI assistant message; tool call ids are id_prefix + index. */
json_t *dsml_message(const dsml_parser *p, const char *id_prefix);

#endif
