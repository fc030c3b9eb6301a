/* The chat encoder: an OpenAI-style request, normalized into turns the way the reference encoder
 * (encoding.py) sees them, then rendered with its control tokens marked, then encoded. */
#include "runtime/tokenizer/chat.h"
#include "runtime/common/error.h"
#include "runtime/tokenizer/pyjson.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_EFFORT 75 /* "high" */

enum { R_SYSTEM, R_USER, R_ASSISTANT, R_REMINDER };

/* A block of a user turn: a user message's text or a tool message's result. */
typedef struct {
    int is_result;
    const json_t *content;
    const char *call_id; /* results: tool_call_id ("" when absent) */
    size_t index;        /* the message's index in request.messages */
} turn_block;

typedef struct {
    int role;
    const json_t *msg; /* NULL for the system turn inserted to carry tools */
    size_t index;
    turn_block *blocks; /* user turns: consecutive user and tool messages, merged */
    size_t n_blocks;
    int carries_tools; /* the system turn that gets tools and response_format */
} turn;

typedef struct {
    turn *turns;
    size_t n;
    const json_t *tools, *response_format;
    int thinking, drop, effort;
} conversation;

static void conversation_free(conversation *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->turns[i].blocks);
    free(c->turns);
}

/* ---- request options ---- */

static int parse_effort(const json_t *v, int *out)
{
    *out = DEFAULT_EFFORT;
    if (!v || json_is_null(v))
        return 0;
    if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 100) {
        *out = (int)json_integer_value(v);
        return 0;
    }
    static const struct {
        const char *name;
        int value;
    } names[] = {{"low", 50}, {"high", 75}, {"max", 100}};
    for (int i = 0; i < 3; i++)
        if (json_is_string(v) && !strcmp(json_string_value(v), names[i].name)) {
            *out = names[i].value;
            return 0;
        }
    return dsk_err("reasoning_effort must be an integer 1-100 or one of \"low\" (50), \"high\" (75), "
                   "\"max\" (100)");
}

static int parse_options(const json_t *req, conversation *c)
{
    const json_t *kw = json_object_get(req, "chat_template_kwargs");
    if (kw && !json_is_object(kw) && !json_is_null(kw))
        return dsk_err("chat_template_kwargs must be an object");
    const json_t *think = json_object_get(kw, "thinking");
    if (!think)
        think = json_object_get(kw, "enable_thinking");
    if (think && !json_is_boolean(think))
        return dsk_err("chat_template_kwargs.thinking must be true or false");
    const json_t *effort = json_object_get(req, "reasoning_effort");
    if (!effort || json_is_null(effort))
        effort = json_object_get(kw, "reasoning_effort");
    if (parse_effort(effort, &c->effort))
        return -1;
    /* thinking is asked for explicitly, or implied by asking for an effort */
    c->thinking = think ? json_is_true(think) : effort && !json_is_null(effort);
    const json_t *drop = json_object_get(kw, "drop_thinking");
    if (drop && !json_is_boolean(drop))
        return dsk_err("chat_template_kwargs.drop_thinking must be true or false");
    c->tools = json_object_get(req, "tools");
    if (c->tools && !json_is_array(c->tools) && !json_is_null(c->tools))
        return dsk_err("tools must be an array");
    if (!json_array_size(c->tools))
        c->tools = NULL;
    /* with tools the model's reasoning explains its calls, so it is never dropped */
    c->drop = (!drop || json_is_true(drop)) && !c->tools;
    const json_t *rf = json_object_get(req, "response_format");
    const char *rf_type = json_string_value(json_object_get(rf, "type"));
    if (rf && !json_is_null(rf) && !json_is_object(rf))
        return dsk_err("response_format must be an object");
    c->response_format = json_is_object(rf) && !(rf_type && !strcmp(rf_type, "text")) ? rf : NULL;
    return 0;
}

/* ---- normalizing messages into turns ---- */

static int role_of(const json_t *msg, size_t i, int *role)
{
    const char *r = json_string_value(json_object_get(msg, "role"));
    static const struct {
        const char *name;
        int role;
    } roles[] = {{"system", R_SYSTEM}, {"developer", R_SYSTEM}, {"user", R_USER},
                 {"tool", R_USER},     {"assistant", R_ASSISTANT}, {"latest_reminder", R_REMINDER}};
    for (size_t k = 0; r && k < sizeof roles / sizeof roles[0]; k++)
        if (!strcmp(r, roles[k].name)) {
            *role = roles[k].role;
            return 0;
        }
    return dsk_err("messages[%zu]: role '%s' is not supported", i, r ? r : "(missing)");
}

static int add_block(turn *t, turn_block b)
{
    turn_block *blocks = dsk_realloc(t->blocks, (t->n_blocks + 1) * sizeof *blocks);
    if (!blocks)
        return -1;
    t->blocks = blocks;
    t->blocks[t->n_blocks++] = b;
    return 0;
}

/* Tool results of a user turn in the order the preceding assistant called them (a stable sort by
 * the index of tool_call_id among its tool_calls; unknown ids count as 0). Text blocks keep their
 * places. */
static int order_results(turn *t, const json_t *calls)
{
    size_t *key = dsk_malloc((t->n_blocks + 1) * sizeof *key);
    if (!key)
        return -1;
    for (size_t i = 0; i < t->n_blocks; i++) {
        key[i] = 0;
        size_t k;
        const json_t *call;
        json_array_foreach(calls, k, call) {
            const char *id = json_string_value(json_object_get(call, "id"));
            if (id && *id && !strcmp(id, t->blocks[i].call_id)) {
                key[i] = k;
                break;
            }
        }
    }
    /* insertion sort over the result slots only */
    for (size_t i = 0; i < t->n_blocks; i++) {
        if (!t->blocks[i].is_result)
            continue;
        turn_block b = t->blocks[i];
        size_t kb = key[i], j = i;
        for (;;) {
            size_t prev = j;
            while (prev > 0 && !t->blocks[prev - 1].is_result)
                prev--;
            if (prev == 0 || key[prev - 1] <= kb)
                break;
            t->blocks[j] = t->blocks[prev - 1];
            key[j] = key[prev - 1];
            j = prev - 1;
        }
        t->blocks[j] = b;
        key[j] = kb;
    }
    free(key);
    return 0;
}

static int build_turns(const json_t *messages, conversation *c)
{
    size_t n = json_array_size(messages);
    c->turns = dsk_calloc(n + 1, sizeof *c->turns);
    if (!c->turns)
        return -1;
    /* tools and response_format hang on the first system message, or on an empty one put first */
    size_t carrier = n;
    for (size_t i = 0; i < n && carrier == n; i++) {
        int role = -1;
        if (!role_of(json_array_get(messages, i), i, &role) && role == R_SYSTEM)
            carrier = i;
    }
    if (carrier == n && (c->tools || c->response_format))
        c->turns[c->n++] = (turn){.role = R_SYSTEM, .carries_tools = 1};
    const json_t *last_calls = NULL;
    for (size_t i = 0; i < n; i++) {
        const json_t *msg = json_array_get(messages, i);
        int role = -1;
        if (!json_is_object(msg))
            return dsk_err("messages[%zu] must be an object", i);
        if (role_of(msg, i, &role))
            return -1;
        const char *r = json_string_value(json_object_get(msg, "role"));
        if (role == R_USER) {
            /* a tool result joins the user turn before it; a user message joins a turn too */
            turn *t = c->n && c->turns[c->n - 1].role == R_USER ? &c->turns[c->n - 1] : NULL;
            if (!t) {
                t = &c->turns[c->n++];
                *t = (turn){.role = R_USER, .msg = msg, .index = i};
            }
            int is_result = !strcmp(r, "tool");
            const char *id = json_string_value(json_object_get(msg, "tool_call_id"));
            if (add_block(t, (turn_block){is_result, json_object_get(msg, "content"), id ? id : "", i}))
                return -1;
            continue;
        }
        c->turns[c->n++] = (turn){.role = role, .msg = msg, .index = i, .carries_tools = i == carrier};
    }
    for (size_t i = 0; i < c->n; i++) {
        turn *t = &c->turns[i];
        const json_t *calls = t->role == R_ASSISTANT ? json_object_get(t->msg, "tool_calls") : NULL;
        if (json_array_size(calls))
            last_calls = calls;
        if (t->role == R_USER && last_calls && order_results(t, last_calls))
            return -1;
    }
    return 0;
}

/* ---- rendering ---- */

/* A message's content as text: a string, null, or a list of text parts joined by blank lines. */
static int content_text(dsml_prompt *p, const json_t *content, size_t index)
{
    if (!content || json_is_null(content))
        return 0;
    if (json_is_string(content))
        return dsml_text(p, json_string_value(content), json_string_length(content));
    if (!json_is_array(content))
        return dsk_err("messages[%zu].content must be a string, null or a list of parts", index);
    size_t i, written = 0;
    const json_t *part;
    json_array_foreach(content, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(text))
            return dsk_err("messages[%zu].content[%zu]: part type '%s' is not supported (text only)",
                           index, i, type ? type : "?");
        if (!json_string_length(text))
            continue;
        if ((written++ && dsml_text(p, "\n\n", 2)) ||
            dsml_text(p, json_string_value(text), json_string_length(text)))
            return -1;
    }
    return 0;
}

/* A tool result's body: its content verbatim (other JSON values as JSON text). */
static int result_text(dsml_prompt *p, const json_t *content, size_t index)
{
    if (content && !json_is_string(content) && !json_is_array(content) && !json_is_null(content))
        return pyjson_dump(&p->text, content);
    return content_text(p, content, index);
}

static int text_str(dsml_prompt *p, const char *s)
{
    return dsml_text(p, s, strlen(s));
}

static int render_system(dsml_prompt *p, const conversation *c, const turn *t, size_t idx)
{
    if (idx > 0 && dsml_mark(p, DSML_SYSTEM))
        return -1;
    if (t->msg && content_text(p, json_object_get(t->msg, "content"), t->index))
        return -1;
    if (t->carries_tools && c->tools && (text_str(p, "\n\n") || dsml_render_tools(p, c->tools)))
        return -1;
    if (t->carries_tools && c->response_format &&
        (text_str(p, "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema "
                     "to reply:\n") ||
         pyjson_dump(&p->text, c->response_format)))
        return -1;
    return 0;
}

static int render_user(dsml_prompt *p, const turn *t)
{
    if (dsml_mark(p, DSML_USER))
        return -1;
    for (size_t i = 0; i < t->n_blocks; i++) {
        const turn_block *b = &t->blocks[i];
        if (i && text_str(p, "\n\n"))
            return -1;
        if (b->is_result ? text_str(p, "<tool_result>") || result_text(p, b->content, b->index) ||
                               text_str(p, "</tool_result>")
                         : content_text(p, b->content, b->index))
            return -1;
    }
    return 0;
}

static int render_assistant(dsml_prompt *p, const conversation *c, const turn *t, size_t idx,
                            long last_user)
{
    /* reasoning only after the last user turn, unless dropping is off */
    if (c->thinking && (!c->drop || (long)idx > last_user)) {
        const json_t *r = json_object_get(t->msg, "reasoning_content");
        if (r && !json_is_string(r) && !json_is_null(r))
            return dsk_err("messages[%zu].reasoning_content must be a string", t->index);
        if ((json_is_string(r) && dsml_text(p, json_string_value(r), json_string_length(r))) ||
            dsml_mark(p, DSML_END_THINK))
            return -1;
    }
    if (content_text(p, json_object_get(t->msg, "content"), t->index))
        return -1;
    const json_t *calls = json_object_get(t->msg, "tool_calls");
    if (calls && !json_is_null(calls) && json_array_size(calls)) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu].tool_calls", t->index);
        if (dsml_render_calls(p, calls, where))
            return -1;
    }
    return dsml_mark(p, DSML_EOS);
}

static int render(const conversation *c, dsml_prompt *p)
{
    long last_user = -1; /* a later system turn counts as a user turn */
    for (size_t i = 0; i < c->n; i++)
        if (c->turns[i].role == R_USER || (c->turns[i].role == R_SYSTEM && i > 0))
            last_user = (long)i;
    if (dsml_mark(p, DSML_BOS))
        return -1;
    for (size_t i = 0; i < c->n; i++) {
        const turn *t = &c->turns[i];
        if (i == 0 && (c->thinking || t->role == R_SYSTEM) && dsml_mark(p, DSML_SYSTEM))
            return -1;
        if (i == 0 && c->thinking &&
            dsk_buf_printf(&p->text, "Reasoning Effort: %d (range 1-100, the higher the value, the "
                                     "more thorough the reasoning)\n\n", c->effort))
            return -1;
        int rc = 0;
        switch (t->role) {
        case R_SYSTEM:
            rc = render_system(p, c, t, i);
            break;
        case R_USER:
            rc = render_user(p, t);
            break;
        case R_REMINDER:
            rc = dsml_mark(p, DSML_REMINDER) || content_text(p, json_object_get(t->msg, "content"), t->index);
            break;
        default:
            rc = render_assistant(p, c, t, i, last_user);
        }
        if (rc)
            return -1;
        /* the generation header, after a user turn (or a later system turn) that ends the prompt or
         * is answered by the assistant next */
        int next = i + 1 < c->n ? c->turns[i + 1].role : -1;
        if (next != -1 && next != R_ASSISTANT && next != R_REMINDER)
            continue;
        if (t->role == R_USER || (t->role == R_SYSTEM && i > 0)) {
            int open = c->thinking && (!c->drop || (long)i >= last_user);
            if (dsml_mark(p, DSML_ASSISTANT) || dsml_mark(p, open ? DSML_THINK : DSML_END_THINK))
                return -1;
        }
    }
    return 0;
}

int chat_render(const json_t *request, dsml_prompt *out, chat_prompt *info)
{
    *out = (dsml_prompt){0};
    conversation c = {0};
    const json_t *messages = json_object_get(request, "messages");
    if (!json_is_object(request) || !json_is_array(messages) || !json_array_size(messages))
        return dsk_err("the request needs a non-empty \"messages\" array");
    int rc = parse_options(request, &c) || build_turns(messages, &c) || render(&c, out) ? -1 : 0;
    if (!rc && info) {
        const dsml_span *last = out->n_markers ? &out->markers[out->n_markers - 1] : NULL;
        info->thinking_mode = c.thinking;
        info->thinking = last && last->off + last->len == out->text.len &&
                         last->len == strlen(DSML_THINK) &&
                         !memcmp(out->text.data + last->off, DSML_THINK, last->len);
    }
    conversation_free(&c);
    if (rc)
        dsml_prompt_free(out);
    return rc;
}

int chat_encode(const dsk_tokenizer *tok, const json_t *request, unsigned flags, chat_prompt *out)
{
    dsml_prompt p;
    *out = (chat_prompt){0};
    if (chat_render(request, &p, out))
        return -1;
    int rc = -1;
    const char *text = p.text.data;
    if (flags & CHAT_SPECIALS_IN_TEXT) {
        rc = tok_encode_append(tok, text, p.text.len, TOK_SPECIAL, &out->ids);
        goto done;
    }
    size_t run = 0; /* start of the text not yet encoded */
    for (size_t i = 0; i < p.n_markers; i++) {
        char name[64];
        const dsml_span *m = &p.markers[i];
        snprintf(name, sizeof name, "%.*s", (int)m->len, text + m->off);
        int32_t id = tok_id(tok, name);
        if (id < 0)
            continue; /* not a token of this tokenizer: it stays in the text */
        if (tok_encode_append(tok, text + run, m->off - run, 0, &out->ids) ||
            tok_ids_push(&out->ids, id))
            goto done;
        run = m->off + m->len;
    }
    rc = tok_encode_append(tok, text + run, p.text.len - run, 0, &out->ids);
done:
    dsml_prompt_free(&p);
    if (rc)
        chat_prompt_free(out);
    return rc;
}

void chat_prompt_free(chat_prompt *p)
{
    tok_ids_free(&p->ids);
}
