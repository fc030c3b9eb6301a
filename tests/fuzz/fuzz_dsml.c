/* Parse any reply text (the first byte picks thinking mode and how the text is chunked): never a
 * crash; one-shot and streamed parsing agree; without tool calls no text is lost; tool calls render
 * back to DSML that parses to the same calls. */
#include "runtime/tokenizer/dsml.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same(const dsk_buf *a, const dsk_buf *b)
{
    return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    int thinking = data[0] & 1;
    size_t chunk = 1 + (data[0] >> 1);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    dsml_parser whole, parts;
    dsml_delta d = {0};
    FUZZ_CHECK(dsml_parse(text, len, thinking, &whole) == 0);
    size_t n = len, eos = strlen(DSML_EOS);
    if (n >= eos && !memcmp(text + n - eos, DSML_EOS, eos))
        n -= eos;
    dsml_parser_init(&parts, thinking);
    for (size_t at = 0; at < n; at += chunk)
        FUZZ_CHECK(dsml_feed(&parts, text + at, at + chunk < n ? chunk : n - at, &d) == 0);
    FUZZ_CHECK(dsml_finish(&parts, &d) == 0);
    FUZZ_CHECK(same(&whole.reasoning, &parts.reasoning) && same(&whole.content, &parts.content));
    FUZZ_CHECK(same(&d.reasoning, &whole.reasoning) && same(&d.content, &whole.content));
    FUZZ_CHECK(whole.n_calls == parts.n_calls);
    if (!whole.n_calls) {
        /* reasoning [+ </think> + content] is the text */
        dsk_buf joined = {0};
        FUZZ_CHECK(dsk_buf_append(&joined, whole.reasoning.data, whole.reasoning.len) == 0);
        if (thinking && (whole.content.len || (n >= whole.reasoning.len + 8 &&
                                                !memcmp(text + whole.reasoning.len, DSML_END_THINK, 8))))
            FUZZ_CHECK(dsk_buf_append(&joined, DSML_END_THINK, 8) == 0);
        FUZZ_CHECK(dsk_buf_append(&joined, whole.content.data, whole.content.len) == 0);
        FUZZ_CHECK(joined.len == n && (!n || !memcmp(joined.data, text, n)));
        dsk_buf_free(&joined);
    } else {
        json_t *msg = dsml_message(&whole, "call_");
        FUZZ_CHECK(msg);
        dsml_prompt p = {0};
        FUZZ_CHECK(dsml_render_calls(&p, json_object_get(msg, "tool_calls"), "tool_calls") == 0);
        dsml_parser again;
        FUZZ_CHECK(dsml_parse(p.text.data, p.text.len, 0, &again) == 0);
        FUZZ_CHECK(again.n_calls == whole.n_calls && again.content.len == 0);
        for (size_t i = 0; i < whole.n_calls; i++)
            FUZZ_CHECK(!strcmp(again.calls[i].name, whole.calls[i].name) &&
                       !strcmp(again.calls[i].arguments, whole.calls[i].arguments));
        dsml_parser_free(&again);
        dsml_prompt_free(&p);
        json_decref(msg);
    }
    dsml_delta_free(&d);
    dsml_parser_free(&whole);
    dsml_parser_free(&parts);
    return 0;
}
