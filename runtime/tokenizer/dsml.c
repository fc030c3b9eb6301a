/* DSML rendering: the prompt builder, tool calls and the tools block. */
#include "runtime/tokenizer/dsml.h"
#include "runtime/common/error.h"
#include "runtime/tokenizer/pyjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the prompt builder ---- */

int dsml_text(dsml_prompt *p, const char *s, size_t len)
{
    return dsk_buf_append(&p->text, s, len);
}

int dsml_mark(dsml_prompt *p, const char *marker)
{
    if (p->n_markers == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        dsml_span *m = dsk_realloc(p->markers, cap * sizeof *m);
        if (!m)
            return -1;
        p->markers = m;
        p->cap = cap;
    }
    size_t len = strlen(marker);
    p->markers[p->n_markers++] = (dsml_span){p->text.len, len};
    return dsk_buf_append(&p->text, marker, len);
}

void dsml_prompt_free(dsml_prompt *p)
{
    dsk_buf_free(&p->text);
    free(p->markers);
    free(p->images);
    *p = (dsml_prompt){0};
}

static int text_str(dsml_prompt *p, const char *s)
{
    return dsml_text(p, s, strlen(s));
}

/* Text in which the strings "｜DSML｜", "<think>" and "</think>" are control tokens. */
static int text_with_markers(dsml_prompt *p, const char *s)
{
    static const char *const markers[] = {DSML_TOKEN, DSML_THINK, DSML_END_THINK};
    while (*s) {
        const char *best = NULL;
        int which = 0;
        for (int i = 0; i < 3; i++) {
            const char *q = strstr(s, markers[i]);
            if (q && (!best || q < best)) {
                best = q;
                which = i;
            }
        }
        if (!best)
            return text_str(p, s);
        if (dsml_text(p, s, (size_t)(best - s)) || dsml_mark(p, markers[which]))
            return -1;
        s = best + strlen(markers[which]);
    }
    return 0;
}

/* ---- rendering ---- */

int dsml_tool_name(const json_t *outer, const json_t *function, dsk_buf *out)
{
    const json_t *name = json_object_get(function, "name");
    if (!json_is_string(name))
        return dsk_err("function.name must be a string");
    const json_t *ns = json_object_get(outer, "namespace");
    if (!ns)
        ns = json_object_get(function, "namespace");
    if (ns && !json_is_null(ns)) {
        if (!json_is_string(ns))
            return dsk_err("namespace must be a string");
        if (dsk_buf_append(out, json_string_value(ns), json_string_length(ns)) ||
            dsk_buf_append(out, "::", 2))
            return -1;
    }
    return dsk_buf_append(out, json_string_value(name), json_string_length(name));
}

/* A call's arguments as an object: OpenAI sends a JSON string (accepted double-encoded too) or an
 * object; anything else becomes {"arguments": original}, as the reference encoder does. */
static json_t *arguments_object(const json_t *arguments)
{
    json_t *v = json_incref((json_t *)arguments);
    for (int i = 0; i < 2 && json_is_string(v); i++) {
        json_t *parsed = json_loadb(json_string_value(v), json_string_length(v),
                                    JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!parsed)
            break;
        json_decref(v);
        v = parsed;
    }
    if (json_is_object(v))
        return v;
    json_decref(v);
    json_t *wrap = json_object();
    if (wrap)
        json_object_set(wrap, "arguments", arguments ? (json_t *)arguments : json_null());
    return wrap;
}

static int render_call(dsml_prompt *p, const json_t *call, const char *where, size_t i)
{
    const json_t *fn = json_object_get(call, "function");
    if (!json_is_object(fn))
        return dsk_err("%s[%zu]: a tool call needs a \"function\" object", where, i);
    dsk_buf name = {0};
    json_t *args = NULL;
    int rc = -1;
    if (dsml_tool_name(call, fn, &name)) {
        dsk_err_ctx("%s[%zu]", where, i);
        goto done;
    }
    if (!(args = arguments_object(json_object_get(fn, "arguments"))))
        goto done;
    if (text_str(p, "<") || dsml_mark(p, DSML_TOKEN) || text_str(p, " invoke name=\"") ||
        dsml_text(p, name.data ? name.data : "", name.len) || text_str(p, "\">\n"))
        goto done;
    const char *key;
    size_t key_len;
    json_t *v;
    int first = 1;
    json_object_keylen_foreach(args, key, key_len, v) {
        int is_str = json_is_string(v);
        if ((!first && text_str(p, "\n")) || text_str(p, "<") || dsml_mark(p, DSML_TOKEN) ||
            text_str(p, " parameter name=\"") || dsml_text(p, key, key_len) ||
            text_str(p, is_str ? "\" string=\"true\">" : "\" string=\"false\">"))
            goto done;
        if (is_str ? dsml_text(p, json_string_value(v), json_string_length(v))
                   : pyjson_dump(&p->text, v))
            goto done;
        if (text_str(p, "</") || dsml_mark(p, DSML_TOKEN) || text_str(p, " parameter>"))
            goto done;
        first = 0;
    }
    if (text_str(p, "\n</") || dsml_mark(p, DSML_TOKEN) || text_str(p, " invoke>"))
        goto done;
    rc = 0;
done:
    dsk_buf_free(&name);
    json_decref(args);
    return rc;
}

int dsml_render_calls(dsml_prompt *p, const json_t *tool_calls, const char *where)
{
    if (!json_is_array(tool_calls))
        return dsk_err("%s must be an array", where);
    if (text_str(p, "\n\n<") || dsml_mark(p, DSML_TOKEN) || text_str(p, " calls>\n"))
        return -1;
    size_t i;
    const json_t *call;
    json_array_foreach(tool_calls, i, call) {
        if ((i && text_str(p, "\n")) || render_call(p, call, where, i))
            return -1;
    }
    return text_str(p, "\n</") || dsml_mark(p, DSML_TOKEN) || text_str(p, " calls>") ? -1 : 0;
}

static const char tools_head[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
    "invoke tools by writing a \"<｜DSML｜ calls>\" block like the following:\n\n"
    "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜ parameter>\n...\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n"
    "</｜DSML｜ invoke>\n</｜DSML｜ calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
static const char tools_tail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";

int dsml_render_tools(dsml_prompt *p, const json_t *tools)
{
    if (text_with_markers(p, tools_head))
        return -1;
    size_t i;
    const json_t *tool;
    json_array_foreach(tools, i, tool) {
        const json_t *fn = json_object_get(tool, "function");
        if (!json_is_object(fn))
            return dsk_err("tools[%zu]: expected {\"type\": \"function\", \"function\": {...}}", i);
        /* one schema per line: the function object, with a namespace folded into its name */
        json_t *schema = json_deep_copy(fn);
        dsk_buf name = {0};
        int rc = !schema || dsml_tool_name(tool, fn, &name) ||
                 json_object_set_new(schema, "name", json_stringn(name.data, name.len)) ||
                 (json_object_get(schema, "namespace") && json_object_del(schema, "namespace")) ||
                 (i && text_str(p, "\n")) || pyjson_dump(&p->text, schema);
        json_decref(schema);
        dsk_buf_free(&name);
        if (rc)
            return dsk_err_ctx("tools[%zu]", i);
    }
    return text_str(p, tools_tail);
}
