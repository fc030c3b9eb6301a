/* The chat encoder against prompts written out by hand from model.md §5, its ids against encoding
 * the rendered string, the DSML parser (well-formed, streamed, malformed), and Python-style JSON. */
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/tokenizer/chat.h"
#include "runtime/tokenizer/pyjson.h"
#include "tests/common/test_util.h"

#include <math.h>
#include <string.h>
#include <time.h>

static dsk_tokenizer *real_tok, *v4_tok;
static uint64_t seed;

#define BOS "<｜begin▁of▁sentence｜>"
#define EOS "<｜end▁of▁sentence｜>"
#define SYS "<｜System｜>"
#define USER "<｜User｜>"
#define ASST "<｜Assistant｜>"
#define EFFORT(n) "Reasoning Effort: " #n " (range 1-100, the higher the value, the more thorough the reasoning)\n\n"
#define D "｜DSML｜"

static char *source_path(const char *rel)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", test_source_dir(), rel);
    return path;
}

/* The real tokenizer with V4.1's control tokens added (the committed file is V3's, which lacks
 * <｜System｜>, <think>, ｜DSML｜ ...), so that markers become single ids. */
static int setup(void **state)
{
    (void)state;
    const char *path = source_path("data/tokenizer/deepseek-v3-tokenizer.json");
    if (tok_load(path, &real_tok)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        return -1;
    }
    json_t *root = json_load_file(path, 0, NULL);
    json_t *added = json_object_get(root, "added_tokens");
    static const char *const markers[] = {"<｜System｜>", "<｜latest_reminder｜>", "<think>", "</think>",
                                          "｜DSML｜"};
    for (int i = 0; i < 5; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 128900 + i,
                                               "content", markers[i], "single_word", 0, "lstrip", 0,
                                               "rstrip", 0, "normalized", 0, "special", 1));
    char *text = json_dumps(root, 0);
    json_decref(root);
    int rc = tok_load_json(text, strlen(text), &v4_tok);
    free(text);
    if (rc) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        return -1;
    }
    seed = (uint64_t)time(NULL);
    printf("random seed %llu\n", (unsigned long long)seed);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tok_free(real_tok);
    tok_free(v4_tok);
    return 0;
}

/* Render request (JSON text) and compare with want; also check that encoding it with markers as
 * ids equals encoding the rendered string with added tokens matched (what the reference does). */
static void check_render(const char *request, const char *want, int want_thinking)
{
    json_error_t err;
    json_t *req = json_loads(request, 0, &err);
    if (!req)
        fail_msg("bad test JSON: %s", err.text);
    dsml_prompt p;
    chat_prompt info;
    assert_ok(chat_render(req, &p, &info));
    if (p.text.len != strlen(want) || memcmp(p.text.data, want, p.text.len))
        fail_msg("rendered:\n%.*s\nwant:\n%s", (int)p.text.len, p.text.data, want);
    assert_int_equal(info.thinking, want_thinking);
    const dsk_tokenizer *toks[] = {real_tok, v4_tok};
    for (int t = 0; t < 2; t++) {
        chat_prompt got, raw;
        int32_t *ref;
        size_t n;
        assert_ok(chat_encode(toks[t], req, 0, &got));
        assert_ok(chat_encode(toks[t], req, CHAT_SPECIALS_IN_TEXT, &raw));
        assert_ok(tok_encode(toks[t], p.text.data, p.text.len, 0, &ref, &n));
        assert_int_equal(got.ids.len, n);
        assert_memory_equal(got.ids.data, ref, n * sizeof *ref);
        assert_int_equal(raw.ids.len, n);
        assert_memory_equal(raw.ids.data, ref, n * sizeof *ref);
        assert_int_equal(got.ids.data[0], tok_bos(toks[t]));
        assert_int_equal(got.thinking, want_thinking);
        free(ref);
        chat_prompt_free(&got);
        chat_prompt_free(&raw);
    }
    dsml_prompt_free(&p);
    json_decref(req);
}

static void check_error(const char *request, const char *needle)
{
    json_t *req = json_loads(request, 0, NULL);
    assert_non_null(req);
    chat_prompt out;
    assert_int_equal(chat_encode(real_tok, req, 0, &out), -1);
    if (!strstr(dsk_err_msg(), needle))
        fail_msg("error '%s' does not mention '%s'", dsk_err_msg(), needle);
    json_decref(req);
}

static void test_basic_turns(void **state)
{
    (void)state;
    /* chat mode: thinking closed at once, no effort prefix, no System token */
    check_render("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}",
                 BOS USER "hi" ASST "</think>", 0);
    /* thinking mode: the System token opens message 0 even for a user turn, default effort 75 */
    check_render("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
                 " \"chat_template_kwargs\": {\"thinking\": true}}",
                 BOS SYS EFFORT(75) USER "hi" ASST "<think>", 1);
    check_render("{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                 " {\"role\": \"user\", \"content\": \"hi\"}]}",
                 BOS SYS "Be brief." USER "hi" ASST "</think>", 0);
    /* developer is a system message; content may be a list of text parts (joined by blank lines) */
    check_render("{\"messages\": [{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"A\"},"
                 " {\"type\": \"text\", \"text\": \"\"}, {\"type\": \"text\", \"text\": \"B\"}]},"
                 " {\"role\": \"user\", \"content\": null}]}",
                 BOS SYS "A\n\nB" USER ASST "</think>", 0);
    /* an assistant turn ends with EOS; a final assistant message gets no header after it */
    check_render("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"},"
                 " {\"role\": \"assistant\", \"content\": \"b\"}]}",
                 BOS USER "a" ASST "</think>b" EOS, 0);
}

static void test_effort(void **state)
{
    (void)state;
    static const struct {
        const char *value, *text;
    } cases[] = {{"\"low\"", EFFORT(50)}, {"\"high\"", EFFORT(75)}, {"\"max\"", EFFORT(100)},
                 {"1", EFFORT(1)},        {"37", EFFORT(37)},       {"100", EFFORT(100)}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char req[256], want[512];
        /* an effort implies thinking mode */
        snprintf(req, sizeof req, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}],"
                                  " \"reasoning_effort\": %s}", cases[i].value);
        snprintf(want, sizeof want, BOS SYS "%s" USER "q" ASST "<think>", cases[i].text);
        check_render(req, want, 1);
        /* ... unless thinking is switched off, and then it is not rendered */
        snprintf(req, sizeof req, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}],"
                                  " \"chat_template_kwargs\": {\"enable_thinking\": false,"
                                  " \"reasoning_effort\": %s}}", cases[i].value);
        check_render(req, BOS USER "q" ASST "</think>", 0);
    }
    static const char *const bad[] = {"\"medium\"", "0", "101", "7.5", "true", "\"75\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char req[256];
        snprintf(req, sizeof req, "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}],"
                                  " \"reasoning_effort\": %s}", bad[i]);
        check_error(req, "reasoning_effort");
    }
}

#define HISTORY                                                                                    \
    "\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"u1\"},"  \
    " {\"role\": \"assistant\", \"content\": \"a1\", \"reasoning_content\": \"r1\"},"              \
    " {\"role\": \"user\", \"content\": \"u2\"}]"

static void test_drop_thinking(void **state)
{
    (void)state;
    /* default: reasoning before the last user turn is dropped; history reads </think>answer */
    check_render("{" HISTORY ", \"chat_template_kwargs\": {\"thinking\": true}}",
                 BOS SYS EFFORT(75) "S" USER "u1" ASST "</think>a1" EOS USER "u2" ASST "<think>", 1);
    check_render("{" HISTORY ", \"chat_template_kwargs\": {\"thinking\": true, \"drop_thinking\": false}}",
                 BOS SYS EFFORT(75) "S" USER "u1" ASST "<think>r1</think>a1" EOS USER "u2" ASST "<think>",
                 1);
    /* chat mode never shows reasoning */
    check_render("{" HISTORY "}", BOS SYS "S" USER "u1" ASST "</think>a1" EOS USER "u2" ASST "</think>", 0);
    /* an assistant turn after the last user turn keeps its reasoning */
    check_render("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\","
                 " \"content\": \"a\", \"reasoning_content\": \"r\"}], \"reasoning_effort\": 60}",
                 BOS SYS EFFORT(60) USER "u" ASST "<think>r</think>a" EOS, 0);
}

static void test_system_and_reminder(void **state)
{
    (void)state;
    /* a later system message is its own turn and counts as a user turn for the header */
    check_render("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\","
                 " \"content\": \"a\", \"reasoning_content\": \"r\"}, {\"role\": \"system\", \"content\": \"s2\"}],"
                 " \"chat_template_kwargs\": {\"thinking\": true}}",
                 BOS SYS EFFORT(75) USER "u" ASST "</think>a" EOS SYS "s2" ASST "<think>", 1);
    /* a user turn followed by another system turn gets no header */
    check_render("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"},"
                 " {\"role\": \"system\", \"content\": \"s2\"}]}",
                 BOS SYS "s" USER "u" SYS "s2" ASST "</think>", 0);
    /* latest_reminder: the header goes after the user turn it follows */
    check_render("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"latest_reminder\","
                 " \"content\": \"be nice\"}]}",
                 BOS USER "u" ASST "</think><｜latest_reminder｜>be nice", 0);
    /* response_format goes on the system message */
    check_render("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}],"
                 " \"response_format\": {\"type\": \"json_object\"}}",
                 BOS SYS "s\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to "
                 "reply:\n{\"type\": \"json_object\"}" USER "u" ASST "</think>", 0);
    check_render("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}], \"response_format\": {\"type\": \"text\"}}",
                 BOS USER "u" ASST "</think>", 0);
}

#define TOOLS_HEAD                                                                                 \
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "  \
    "invoke tools by writing a \"<" D " calls>\" block like the following:\n\n<" D " calls>\n<" D  \
    " invoke name=\"$TOOL_NAME\">\n<" D " parameter name=\"$PARAMETER_NAME\" string=\"true|false\">" \
    "$PARAMETER_VALUE</" D " parameter>\n...\n</" D " invoke>\n<" D " invoke name=\"$TOOL_NAME2\">\n" \
    "...\n</" D " invoke>\n</" D " calls>\n\nString parameters should be specified as is and set "    \
    "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in " \
    "JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), " \
    "you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or "    \
    "final response.\n\nOtherwise, output directly after </think> with tool calls or final "         \
    "response.\n\n### Available Tool Schemas\n\n"
#define TOOLS_TAIL                                                                                 \
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool " \
    "calls.\n"

static void test_tools(void **state)
{
    (void)state;
    /* tools without a system message: an empty one is put first; tools keep all reasoning; tool
     * results merge into one user turn with the next user message, ordered as the calls were */
    check_render(
        "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"},"
        " {\"role\": \"assistant\", \"content\": null, \"reasoning_content\": \"need data\", \"tool_calls\": ["
        "  {\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
        "   \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3, \\\"hourly\\\": false, \\\"n\\\": \\\"3\\\"}\"}},"
        "  {\"id\": \"c2\", \"type\": \"function\", \"namespace\": \"clock\", \"function\": {\"name\": \"now\","
        "   \"arguments\": {}}}]},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c2\", \"content\": \"12:00\"},"
        " {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": [{\"type\": \"text\", \"text\": \"sunny\"},"
        "   {\"type\": \"text\", \"text\": \"20C\"}]},"
        " {\"role\": \"user\", \"content\": \"thanks\"}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Wx é\","
        "   \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}},"
        "  {\"type\": \"function\", \"namespace\": \"clock\", \"function\": {\"name\": \"now\", \"parameters\": {}}}],"
        " \"chat_template_kwargs\": {\"thinking\": true}}",
        BOS SYS EFFORT(75) "\n\n" TOOLS_HEAD
        "{\"name\": \"get_weather\", \"description\": \"Wx é\", \"parameters\": {\"type\": \"object\","
        " \"properties\": {\"city\": {\"type\": \"string\"}}}}\n{\"name\": \"clock::now\", \"parameters\": {}}"
        TOOLS_TAIL USER "weather?" ASST "<think>need data</think>\n\n<" D " calls>\n<" D
        " invoke name=\"get_weather\">\n<" D " parameter name=\"city\" string=\"true\">Paris</" D
        " parameter>\n<" D " parameter name=\"days\" string=\"false\">3</" D " parameter>\n<" D
        " parameter name=\"hourly\" string=\"false\">false</" D " parameter>\n<" D
        " parameter name=\"n\" string=\"true\">3</" D " parameter>\n</" D " invoke>\n<" D
        " invoke name=\"clock::now\">\n\n</" D " invoke>\n</" D " calls>" EOS USER
        "<tool_result>sunny\n\n20C</tool_result>\n\n<tool_result>12:00</tool_result>\n\nthanks" ASST
        "<think>",
        1);
    /* arguments that are not a JSON object are wrapped as {"arguments": original} */
    check_render("{\"messages\": [{\"role\": \"user\", \"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"ok\","
                 " \"tool_calls\": [{\"id\": \"x\", \"function\": {\"name\": \"f\", \"arguments\": \"not json\"}},"
                 " {\"id\": \"y\", \"function\": {\"name\": \"g\", \"arguments\": \"\\\"{\\\\\\\"k\\\\\\\": [1, 2.50]}\\\"\"}}]}]}",
                 BOS USER "u" ASST "</think>ok\n\n<" D " calls>\n<" D " invoke name=\"f\">\n<" D
                 " parameter name=\"arguments\" string=\"true\">not json</" D " parameter>\n</" D
                 " invoke>\n<" D " invoke name=\"g\">\n<" D " parameter name=\"k\" string=\"false\">[1, 2.5]</" D
                 " parameter>\n</" D " invoke>\n</" D " calls>" EOS,
                 0);
    /* a tool message with no user turn before it starts one; results of unknown ids keep order */
    check_render("{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"tool\", \"tool_call_id\": \"q\","
                 " \"content\": {\"ok\": 1}}, {\"role\": \"tool\", \"content\": \"b\"}]}",
                 BOS SYS "s" USER "<tool_result>{\"ok\": 1}</tool_result>\n\n<tool_result>b</tool_result>" ASST
                 "</think>",
                 0);
}

static void test_request_errors(void **state)
{
    (void)state;
    check_error("{\"messages\": []}", "messages");
    check_error("{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", "role 'wizard'");
    check_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
                "image_url");
    check_error("{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content");
    check_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}", "tools");
    check_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}",
                "tools[0]");
    check_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\","
                " \"tool_calls\": [{\"id\": \"a\"}]}]}",
                "messages[1].tool_calls[0]");
    check_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}],"
                " \"chat_template_kwargs\": {\"thinking\": \"yes\"}}",
                "thinking");
}

/* Image parts (vision.md §1.3): rendered in part order with "\n\n" between parts as one marker; encoded as
 * no id, the image's place recorded (its span goes there); accepted in user messages and tool results
 * only; the placeholder typed as text is text, not an image. */
static void test_images(void **state)
{
    (void)state;
    const char *req_text =
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"What is this?\"},"
        " {\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,AAAA\", \"detail\": \"high\"}},"
        " {\"type\": \"text\", \"text\": \"And <｜deepseek_image｜>?\"}]}]}";
    json_t *req = json_loads(req_text, 0, NULL);
    assert_non_null(req);
    dsml_prompt p;
    chat_prompt info;
    assert_ok(chat_render(req, &p, &info));
    const char *want = "What is this?\n\n" DSML_IMAGE "\n\nAnd " DSML_IMAGE "?";
    const char *at = memmem(p.text.data, p.text.len, want, strlen(want));
    assert_non_null(at);
    assert_int_equal(p.n_images, 1);
    chat_prompt got;
    assert_ok(chat_encode(real_tok, req, 0, &got));
    assert_int_equal(got.n_images, 1);
    assert_int_equal(got.images[0].message, 0);
    assert_int_equal(got.images[0].part, 1);
    assert_true(got.images[0].url_len == strlen("data:image/png;base64,AAAA") &&
                !memcmp(got.images[0].url, "data:image/png;base64,AAAA", got.images[0].url_len));
    /* the ids are the text before the marker, then the text after it, each encoded on its own */
    size_t split = (size_t)(at - p.text.data) + strlen("What is this?\n\n");
    int32_t *a, *b;
    size_t na, nb;
    assert_ok(tok_encode(real_tok, p.text.data, split, 0, &a, &na));
    assert_ok(tok_encode(real_tok, p.text.data + split + strlen(DSML_IMAGE), p.text.len - split - strlen(DSML_IMAGE),
                         0, &b, &nb));
    /* the marker-as-ids encoding of the prefix puts control tokens by id; compare lengths and the tail */
    assert_int_equal(got.images[0].at + nb, got.ids.len);
    assert_memory_equal(got.ids.data + got.images[0].at, b, nb * sizeof *b);
    assert_int_equal(got.images[0].at, na);
    free(a);
    free(b);
    chat_prompt_free(&got);
    chat_prompt raw;
    assert_int_equal(chat_encode(real_tok, req, CHAT_SPECIALS_IN_TEXT, &raw), -1);
    dsml_prompt_free(&p);
    json_decref(req);
    check_error("{\"messages\": [{\"role\": \"system\", \"content\": [{\"type\": \"image_url\", \"image_url\":"
                " {\"url\": \"data:,\"}}]}, {\"role\": \"user\", \"content\": \"x\"}]}",
                "messages[0].content[0]: image parts are accepted in user messages and tool results only");
    check_error("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\":"
                " [{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:,\"}}]}]}",
                "messages[1].content[0]");
    check_error("{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
                "image_url.url");
}

/* Control-token strings in message text are plain text by default; with CHAT_SPECIALS_IN_TEXT
 * they are matched, as the reference's encode-the-string does. */
static void test_specials_in_text(void **state)
{
    (void)state;
    json_t *req = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"x<｜User｜>y</think>\"}]}", 0,
                             NULL);
    chat_prompt safe, raw;
    assert_ok(chat_encode(v4_tok, req, 0, &safe));
    assert_ok(chat_encode(v4_tok, req, CHAT_SPECIALS_IN_TEXT, &raw));
    int32_t user = tok_id(v4_tok, USER), end_think = tok_id(v4_tok, "</think>");
    size_t n_user = 0, n_end = 0, r_user = 0, r_end = 0;
    for (size_t i = 0; i < safe.ids.len; i++) {
        n_user += safe.ids.data[i] == user;
        n_end += safe.ids.data[i] == end_think;
    }
    for (size_t i = 0; i < raw.ids.len; i++) {
        r_user += raw.ids.data[i] == user;
        r_end += raw.ids.data[i] == end_think;
    }
    assert_int_equal(n_user, 1); /* only the turn's own */
    assert_int_equal(n_end, 1);
    assert_int_equal(r_user, 2);
    assert_int_equal(r_end, 2);
    /* the markers are single ids in this tokenizer: BOS User x ... Assistant </think> */
    assert_int_equal(safe.ids.data[0], tok_bos(v4_tok));
    assert_int_equal(safe.ids.data[1], user);
    assert_int_equal(safe.ids.data[safe.ids.len - 2], tok_id(v4_tok, ASST));
    assert_int_equal(safe.ids.data[safe.ids.len - 1], end_think);
    chat_prompt_free(&safe);
    chat_prompt_free(&raw);
    json_decref(req);
}

/* ---- the reply parser ---- */

typedef struct {
    const char *reasoning, *content;
    size_t n_calls;
    const char *name0, *args0, *name1, *args1;
} reply;

static int buf_is(const dsk_buf *b, const char *s)
{
    return b->len == strlen(s) && (!b->len || !memcmp(b->data, s, b->len));
}

static void check_reply(const char *text, int thinking, reply want)
{
    dsml_parser p;
    assert_ok(dsml_parse(text, strlen(text), thinking, &p));
    if (!buf_is(&p.reasoning, want.reasoning))
        fail_msg("reasoning '%.*s', want '%s'", (int)p.reasoning.len, p.reasoning.data, want.reasoning);
    if (!buf_is(&p.content, want.content))
        fail_msg("content '%.*s', want '%s'", (int)p.content.len, p.content.data, want.content);
    assert_int_equal(p.n_calls, want.n_calls);
    if (want.n_calls > 0) {
        assert_string_equal(p.calls[0].name, want.name0);
        assert_string_equal(p.calls[0].arguments, want.args0);
    }
    if (want.n_calls > 1) {
        assert_string_equal(p.calls[1].name, want.name1);
        assert_string_equal(p.calls[1].arguments, want.args1);
    }
    /* fed in random pieces, the parser reaches the same result, and its deltas add up to it */
    dsk_rng r;
    dsk_rng_seed(&r, seed ^ strlen(text));
    for (int rep = 0; rep < 20; rep++) {
        dsml_parser q;
        dsml_delta d = {0};
        dsml_parser_init(&q, thinking);
        size_t n = strlen(text), at = 0;
        if (n >= strlen(EOS) && !strcmp(text + n - strlen(EOS), EOS))
            n -= strlen(EOS);
        while (at < n) {
            size_t k = 1 + (size_t)dsk_rng_below(&r, 7);
            if (k > n - at)
                k = n - at;
            assert_ok(dsml_feed(&q, text + at, k, &d));
            at += k;
        }
        assert_ok(dsml_finish(&q, &d));
        assert_int_equal(d.reasoning.len, p.reasoning.len);
        assert_int_equal(d.content.len, p.content.len);
        if (d.content.len)
            assert_memory_equal(d.content.data, p.content.data, d.content.len);
        assert_int_equal(q.n_calls, p.n_calls);
        for (size_t i = 0; i < q.n_calls; i++)
            assert_string_equal(q.calls[i].arguments, p.calls[i].arguments);
        dsml_delta_free(&d);
        dsml_parser_free(&q);
    }
    dsml_parser_free(&p);
}

#define CALL_A                                                                                     \
    "<" D " invoke name=\"get_weather\">\n<" D " parameter name=\"city\" string=\"true\">Paris, \"FR\"</" D \
    " parameter>\n<" D " parameter name=\"days\" string=\"false\">3</" D " parameter>\n<" D           \
    " parameter name=\"n\" string=\"true\">3</" D " parameter>\n<" D                                 \
    " parameter name=\"o\" string=\"false\">{\"a\": [1, 2.50, null]}</" D " parameter>\n</" D " invoke>"
#define ARGS_A "{\"city\": \"Paris, \\\"FR\\\"\", \"days\": 3, \"n\": \"3\", \"o\": {\"a\": [1, 2.5, null]}}"
#define CALL_B "<" D " invoke name=\"ns::now\">\n\n</" D " invoke>"

static void test_parse_replies(void **state)
{
    (void)state;
    check_reply("Let me think.</think>The answer is 4.", 1, (reply){"Let me think.", "The answer is 4.", 0, NULL, NULL, NULL, NULL});
    check_reply("The answer is 4." EOS, 0, (reply){"", "The answer is 4.", 0, NULL, NULL, NULL, NULL});
    check_reply("still thinking </thi", 1, (reply){"still thinking </thi", "", 0, NULL, NULL, NULL, NULL});
    check_reply("a</think>b</think>c", 1, (reply){"a", "b</think>c", 0, NULL, NULL, NULL, NULL});
    check_reply("I'll check.\n\n<" D " calls>\n" CALL_A "\n" CALL_B "\n</" D " calls>" EOS, 0,
                (reply){"", "I'll check.", 2, "get_weather", ARGS_A, "ns::now", "{}"});
    check_reply("hmm</think>\n\n<" D " calls>\n" CALL_A "\n</" D " calls>\n", 1,
                (reply){"hmm", "", 1, "get_weather", ARGS_A, NULL, NULL});
    /* reasoning that talks about DSML is still reasoning */
    check_reply("<" D " calls></think>ok", 1, (reply){"<" D " calls>", "ok", 0, NULL, NULL, NULL, NULL});
}

/* Malformed DSML comes back as content text, exactly as written. */
static void test_malformed_dsml(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "\n\n<" D " calls>\n" CALL_A,                                         /* never closed */
        "\n\n<" D " calls>\n</" D " calls>",                                  /* no invoke */
        "\n\n<" D " calls>\n" CALL_A "\n</" D " calls>\ntrailing text",       /* text after */
        "\n\n<" D " calls>\n<" D " invoke name=\"f\">\n<" D " parameter name=\"x\" string=\"false\">{bad json</" D
        " parameter>\n</" D " invoke>\n</" D " calls>",                       /* bad JSON value */
        "\n\n<" D " calls>\n<" D " invoke name=\"f\">\n<" D " parameter name=\"x\" string=\"maybe\">1</" D
        " parameter>\n</" D " invoke>\n</" D " calls>",                       /* bad string= */
        "\n\n<" D " calls>\n<" D " invoke name=\"\">\n</" D " invoke>\n</" D " calls>", /* no name */
        "\n\n<" D " calls>\n<" D " tool_calls>\n</" D " calls>",              /* unknown tag */
        "\n\n<" D " calls>\n<" D " invoke name=\"f\">\n<" D " parameter name=\"x\" string=\"true\">v</" D
        " invoke>\n</" D " calls>",                                           /* parameter not closed */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[2048];
        snprintf(text, sizeof text, "Before.%s", bad[i]);
        check_reply(text, 0, (reply){"", text, 0, NULL, NULL, NULL, NULL});
    }
}

/* Tool calls rendered by the encoder parse back to the same calls (the string="true|false" rule). */
static void test_render_parse_round_trip(void **state)
{
    (void)state;
    json_t *calls = json_loads(
        "[{\"id\": \"1\", \"function\": {\"name\": \"f\", \"arguments\": \"{\\\"s\\\": \\\"x\\\\ny </\\\", \\\"i\\\": -7,"
        " \\\"f\\\": 1e-7, \\\"b\\\": true, \\\"z\\\": null, \\\"l\\\": [\\\"a\\\", {\\\"k\\\": 0.1}], \\\"e\\\": \\\"\\\","
        " \\\"u\\\": \\\"é😀\\\", \\\"num_str\\\": \\\"12\\\"}\"}},"
        " {\"id\": \"2\", \"function\": {\"name\": \"g\", \"arguments\": \"{}\"}}]",
        0, NULL);
    assert_non_null(calls);
    dsml_prompt p = {0};
    assert_ok(dsml_render_calls(&p, calls, "calls"));
    dsml_parser q;
    assert_ok(dsml_parse(p.text.data, p.text.len, 0, &q));
    assert_int_equal(q.n_calls, 2);
    assert_int_equal(q.content.len, 0);
    assert_string_equal(q.calls[0].name, "f");
    assert_string_equal(q.calls[0].arguments,
                        "{\"s\": \"x\\ny </\", \"i\": -7, \"f\": 1e-07, \"b\": true, \"z\": null, \"l\": "
                        "[\"a\", {\"k\": 0.1}], \"e\": \"\", \"u\": \"é😀\", \"num_str\": \"12\"}");
    assert_string_equal(q.calls[1].arguments, "{}");
    json_t *msg = dsml_message(&q, "call_7_");
    assert_non_null(msg);
    char *dump = json_dumps(msg, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(dump, "{\"content\":null,\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":"
                              "\"{\\\"s\\\": \\\"x\\\\ny </\\\", \\\"i\\\": -7, \\\"f\\\": 1e-07, \\\"b\\\": true, "
                              "\\\"z\\\": null, \\\"l\\\": [\\\"a\\\", {\\\"k\\\": 0.1}], \\\"e\\\": \\\"\\\", "
                              "\\\"u\\\": \\\"é😀\\\", \\\"num_str\\\": \\\"12\\\"}\",\"name\":\"f\"},\"id\":\"call_7_0\","
                              "\"type\":\"function\"},{\"function\":{\"arguments\":\"{}\",\"name\":\"g\"},"
                              "\"id\":\"call_7_1\",\"type\":\"function\"}]}");
    free(dump);
    json_decref(msg);
    dsml_parser_free(&q);
    dsml_prompt_free(&p);
    json_decref(calls);
}

/* Python's json.dumps spellings. */
static void test_pyjson(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"0.1", "0.1"}, {"1e16", "1e+16"}, {"1e15", "1000000000000000.0"}, {"1.5e-5", "1.5e-05"},
        {"0.0001", "0.0001"}, {"100.0", "100.0"}, {"-0.0", "-0.0"}, {"5e-324", "5e-324"},
        {"1.7976931348623157e308", "1.7976931348623157e+308"}, {"0.3333333333333333", "0.3333333333333333"},
        {"123456789.123", "123456789.123"}, {"-2.5e20", "-2.5e+20"}, {"9007199254740993", "9007199254740993"},
        {"\"a\\u0000\\u001f\\u007f\\\"\\\\/\\b\\f\\n\\r\\t\\u2028é\"", "\"a\\u0000\\u001f\x7f\\\"\\\\/\\b\\f\\n\\r\\t\xe2\x80\xa8é\""},
        {"{\"z\": [], \"a\": {}, \"m\": [true, false, null]}", "{\"z\": [], \"a\": {}, \"m\": [true, false, null]}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *v = json_loads(cases[i].in, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        assert_non_null(v);
        dsk_buf b = {0};
        assert_ok(pyjson_dump(&b, v));
        if (b.len != strlen(cases[i].want) || memcmp(b.data, cases[i].want, b.len))
            fail_msg("%s -> '%.*s', want '%s'", cases[i].in, (int)b.len, b.data, cases[i].want);
        dsk_buf_free(&b);
        json_decref(v);
    }
    /* any double: the shortest text that reads back as the same double */
    dsk_rng r;
    dsk_rng_seed(&r, seed + 5);
    for (int i = 0; i < 20000; i++) {
        uint64_t bits = dsk_rng_u64(&r);
        double d;
        memcpy(&d, &bits, sizeof d);
        if (!isfinite(d))
            continue;
        json_t *v = json_real(d);
        dsk_buf b = {0};
        assert_ok(pyjson_dump(&b, v));
        assert_ok(dsk_buf_append(&b, "", 1));
        assert_true(strtod(b.data, NULL) == d);
        dsk_buf_free(&b);
        json_decref(v);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_turns),       cmocka_unit_test(test_effort),
        cmocka_unit_test(test_drop_thinking),     cmocka_unit_test(test_system_and_reminder),
        cmocka_unit_test(test_tools),             cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_specials_in_text),  cmocka_unit_test(test_parse_replies),
        cmocka_unit_test(test_malformed_dsml),    cmocka_unit_test(test_render_parse_round_trip),
        cmocka_unit_test(test_pyjson),            cmocka_unit_test(test_images),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
