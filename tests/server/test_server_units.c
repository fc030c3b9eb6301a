/* The server's pure parts: SHA-256 (FIPS 180-4 vectors), the key file and the key check, stop strings over
 * streamed tokens (random texts and stops, the real tokenizer), OpenAI request checks, and the reply writer
 * on DSML tool calls (the tiny model's random weights never write one, so the end-to-end tests cannot), and
 * the prompt cache's prefix rule and choice against brute force. */
#include "tests/common/test_util.h"

#include "runtime/common/error.h"
#include "runtime/common/escape.h"
#include "runtime/common/rng.h"
#include "runtime/server/auth.h"
#include "runtime/server/constrain.h"
#include "runtime/server/detok.h"
#include "runtime/server/oai_parse.h"
#include "runtime/server/oai_reply.h"
#include "runtime/server/prepare.h"
#include "runtime/server/prompt_cache.h"
#include "runtime/server/sha256.h"

#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static dsk_tokenizer *TOK;
static dsk_rng R;

static int setup(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/data/tokenizer/deepseek-v3-tokenizer.json", test_source_dir());
    if (tok_load(path, &TOK)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        return -1;
    }
    uint64_t seed = test_seed("server units");
    dsk_rng_seed(&R, seed);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tok_free(TOK);
    return 0;
}

static void hex(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha256_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *msg, *digest;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    char h[65];
    uint8_t d[32];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        sha256(v[i].msg, strlen(v[i].msg), d);
        hex(d, h);
        assert_string_equal(h, v[i].digest);
    }
    /* a million 'a', fed in pieces of random sizes (the block boundary falls everywhere) */
    static char a[1000000];
    memset(a, 'a', sizeof a);
    sha256_ctx c;
    sha256_init(&c);
    for (size_t off = 0; off < sizeof a;) {
        size_t n = 1 + dsk_rng_below(&R, 200);
        if (n > sizeof a - off)
            n = sizeof a - off;
        sha256_update(&c, a + off, n);
        off += n;
    }
    sha256_final(&c, d);
    hex(d, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    uint8_t e[32];
    memcpy(e, d, 32);
    assert_true(sha256_equal_ct(d, e, 32));
    e[31] ^= 1;
    assert_false(sha256_equal_ct(d, e, 32));
}

static const char *write_keys(const char *text, mode_t mode)
{
    static char path[4200];
    snprintf(path, sizeof path, "%s/server-keys-XXXXXX", test_binary_dir());
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    chmod(path, mode);
    return path;
}

static void test_keys(void **state)
{
    (void)state;
    srv_keys k;
    /* sha256("secret-two") */
    const char *p = write_keys("# keys\r\n  secret-one  \r\n\nsha256:"
                               "7A0E8A1B5C7A3C5F7D1C9AA5B0C7B5E1E0B4E1DA1D0D2D5A8E50E79E8C2A6B63\n", 0600);
    assert_ok(srv_keys_load(p, &k));
    assert_int_equal(k.n, 2);
    assert_true(srv_keys_check(&k, "Bearer secret-one"));
    assert_true(srv_keys_check(&k, "bearer  secret-one "));
    assert_false(srv_keys_check(&k, "Bearer secret-on"));
    assert_false(srv_keys_check(&k, "secret-one"));
    assert_false(srv_keys_check(&k, NULL));
    srv_keys_free(&k);
    unlink(p);
    uint8_t d[32];
    char line[200], h[65];
    sha256("secret-two", 10, d);
    hex(d, h);
    snprintf(line, sizeof line, "sha256:%s\n", h);
    p = write_keys(line, 0600);
    assert_ok(srv_keys_load(p, &k));
    assert_true(srv_keys_check(&k, "Bearer secret-two"));
    assert_false(srv_keys_check(&k, "Bearer sha256:" ));
    srv_keys_free(&k);
    unlink(p);
    /* refusals name the problem */
    p = write_keys("k\n", 0644);
    assert_int_equal(srv_keys_load(p, &k), -1);
    assert_non_null(strstr(dsk_err_msg(), "chmod 600"));
    unlink(p);
    p = write_keys("sha256:abc\n", 0600);
    assert_int_equal(srv_keys_load(p, &k), -1);
    assert_non_null(strstr(dsk_err_msg(), "line 1"));
    unlink(p);
    p = write_keys("\n# nothing\n", 0600);
    assert_int_equal(srv_keys_load(p, &k), -1);
    assert_non_null(strstr(dsk_err_msg(), "no key"));
    unlink(p);
    assert_int_equal(srv_keys_load(test_binary_dir(), &k), -1);
    /* no keys: every request passes */
    srv_keys none = {0};
    assert_true(srv_keys_check(&none, NULL));
}

/* Random text from a small alphabet (ASCII and multi-byte), so stops recur and cut characters' tokens. */
static size_t random_text(char *out, size_t cap)
{
    static const char *const pieces[] = {"a", "b", "ab", " ", "\n", "é", "中", "文", "🙂", "stop", "END", ".", "x"};
    size_t n = 0, k = 5 + dsk_rng_below(&R, 60);
    for (size_t i = 0; i < k; i++) {
        const char *p = pieces[dsk_rng_below(&R, sizeof pieces / sizeof pieces[0])];
        if (n + strlen(p) + 1 > cap)
            break;
        memcpy(out + n, p, strlen(p));
        n += strlen(p);
    }
    out[n] = 0;
    return n;
}

static void test_stop_strings(void **state)
{
    (void)state;
    for (int trial = 0; trial < 400; trial++) {
        char text[512];
        size_t n = random_text(text, sizeof text);
        int32_t *ids;
        size_t n_ids;
        assert_ok(tok_encode(TOK, text, n, 0, &ids, &n_ids));
        /* stops: substrings of the text or strings that are not in it; whole characters, as a stop arrives
         * in a JSON string (a stop starting inside a character matched the plain stream mid-character, where
         * the released text, always whole characters, cannot end) */
        char s1[64] = {0}, s2[64] = {0};
        size_t a = dsk_rng_below(&R, n), l = 1 + dsk_rng_below(&R, 6);
        while (a > 0 && ((unsigned char)text[a] & 0xC0) == 0x80)
            a--;
        if (a + l > n)
            l = n - a;
        while (a + l < n && l < 60 && ((unsigned char)text[a + l] & 0xC0) == 0x80)
            l++;
        memcpy(s1, text + a, l);
        snprintf(s2, sizeof s2, "%s", dsk_rng_below(&R, 2) ? "zzz" : "ab ");
        char *stops[2] = {s1, s2};
        int n_stops = (int)(1 + dsk_rng_below(&R, 2));
        /* the stop can start inside a cut character: then the decoder's text differs from text; compare
         * with the stream decoded without stops instead */
        srv_detok plain, cut;
        dsk_buf all = {0}, out = {0};
        srv_detok_init(&plain, TOK, NULL, 0);
        srv_detok_init(&cut, TOK, stops, n_stops);
        int stopped = 0, st;
        size_t *upto = malloc(sizeof(size_t) * (n_ids + 1)); /* the plain text's length after each token */
        for (size_t i = 0; i < n_ids; i++) {
            assert_ok(srv_detok_push(&plain, ids[i], &all, &st));
            upto[i] = all.len;
            if (!stopped)
                assert_ok(srv_detok_push(&cut, ids[i], &out, &stopped));
        }
        assert_ok(srv_detok_finish(&plain, &all));
        upto[n_ids] = all.len;
        if (!stopped)
            assert_ok(srv_detok_finish(&cut, &out));
        /* a stop ends the reply at the token that completes it: the text is cut before the earliest stop
         * complete in the text known then (a longer stop that began earlier but is not complete yet loses) */
        size_t first = all.len;
        for (size_t k = 0; k <= n_ids && first == all.len; k++)
            for (int s = 0; s < n_stops; s++) {
                const char *at = memmem(all.data, upto[k], stops[s], strlen(stops[s]));
                if (at && (size_t)(at - all.data) < first)
                    first = (size_t)(at - all.data);
            }
        free(upto);
        assert_int_equal(stopped, first < all.len);
        assert_int_equal(out.len, first);
        assert_memory_equal(out.data, all.data, first);
        srv_detok_free(&plain);
        srv_detok_free(&cut);
        dsk_buf_free(&all);
        dsk_buf_free(&out);
        free(ids);
    }
}

static json_t *parse(const char *s)
{
    json_error_t e;
    json_t *j = json_loads(s, 0, &e);
    if (!j)
        fail_msg("bad test JSON: %s", e.text);
    return j;
}

static void test_request_checks(void **state)
{
    (void)state;
    static const struct {
        const char *body, *param; /* param NULL: accepted */
    } cases[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": 0.5, \"top_p\": 1, \"top_k\": -1,"
         " \"seed\": 3, \"stop\": \"x\", \"max_completion_tokens\": 5, \"user\": \"u\", \"n\": 1, \"logprobs\": true,"
         " \"top_logprobs\": 20, \"presence_penalty\": 0, \"logit_bias\": {}, \"response_format\": {\"type\": \"text\"}}",
         NULL},
        {"{\"messages\": [], \"max_tokens\": 3}", "messages"},
        {"{\"messages\": [{}], \"max_tokens\": 3.5}", "max_tokens"},
        {"{\"messages\": [{}], \"max_tokens\": 1e300}", "max_tokens"},
        {"{\"messages\": [{}], \"max_tokens\": 7.0}", NULL},
        {"{\"messages\": [{}], \"max_tokens\": 3, \"max_completion_tokens\": 3}", "max_tokens"},
        {"{\"messages\": [{}], \"top_logprobs\": 21, \"logprobs\": true}", "top_logprobs"},
        {"{\"messages\": [{}], \"stop\": [\"\"]}", "stop"},
        {"{\"messages\": [{}], \"temperature\": -1}", "temperature"},
        {"{\"messages\": [{}], \"min_p\": 0.1}", "min_p"},
        {"{\"messages\": [{}], \"repetition_penalty\": 1.1}", "repetition_penalty"},
        {"{\"messages\": [{}], \"functions\": []}", "functions"},
        {"{\"messages\": [{}], \"stream\": true, \"stream_options\": {\"continuous_usage_stats\": true}}",
         "stream_options"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = parse(cases[i].body);
        oai_params p;
        oai_error e = {0};
        int rc = oai_parse_chat(j, "m", &p, &e);
        if (cases[i].param) {
            assert_int_equal(rc, -1);
            assert_string_equal(e.param, cases[i].param);
            assert_int_equal(e.status, 400);
        } else if (rc)
            fail_msg("case %zu refused: %s", i, e.message);
        oai_params_free(&p);
        json_decref(j);
    }
    /* thinking defaults on; asked off stays off; tool_choice none drops the tools */
    json_t *j = parse("{\"messages\": [{}], \"tools\": [{}], \"tool_choice\": \"none\"}");
    oai_params p;
    oai_error e;
    assert_ok(oai_parse_chat(j, "m", &p, &e));
    assert_true(json_is_true(json_object_get(json_object_get(p.chat, "chat_template_kwargs"), "thinking")));
    assert_null(json_object_get(p.chat, "tools"));
    assert_non_null(json_object_get(j, "tools")); /* the request itself is untouched */
    oai_params_free(&p);
    json_decref(j);
    j = parse("{\"messages\": [{}], \"chat_template_kwargs\": {\"enable_thinking\": false}}");
    assert_ok(oai_parse_chat(j, "m", &p, &e));
    assert_null(json_object_get(json_object_get(p.chat, "chat_template_kwargs"), "thinking"));
    oai_params_free(&p);
    json_decref(j);
}

/* Structured-output fields: which constraint, from which field, and the refusals that name it. */
static void test_structured_specs(void **state)
{
    (void)state;
    static const char tools[] = "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                                "{\"type\": \"object\"}}}, {\"type\": \"function\", \"namespace\": \"ns\", \"function\": "
                                "{\"name\": \"g\"}}]";
    static const struct {
        const char *extra;
        int kind;
        const char *field; /* the spec's field, or the refused param when kind < 0 */
    } cases[] = {
        {"\"response_format\": {\"type\": \"text\"}", CONS_NONE, ""},
        {"\"response_format\": {\"type\": \"json_object\"}", CONS_JSON_OBJECT, "response_format"},
        {"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\", \"strict\": true, "
         "\"schema\": {\"type\": \"integer\"}}}", CONS_SCHEMA, "response_format"},
        {"\"guided_json\": {\"type\": \"integer\"}", CONS_SCHEMA, "guided_json"},
        {"\"guided_json\": \"{\\\"type\\\": \\\"integer\\\"}\"", CONS_SCHEMA, "guided_json"},
        {"\"guided_regex\": \"a+\"", CONS_REGEX, "guided_regex"},
        {"\"guided_choice\": [\"a\", \"b\"]", CONS_CHOICE, "guided_choice"},
        {"\"tool_choice\": \"required\"", CONS_TOOLS, "tool_choice"},
        {"\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}", CONS_TOOLS, "tool_choice"},
        {"\"tool_choice\": {\"type\": \"function\", \"namespace\": \"ns\", \"function\": {\"name\": \"g\"}}",
         CONS_TOOLS, "tool_choice"},
        {"\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}", -1, "tool_choice"},
        {"\"tool_choice\": \"auto\"", CONS_NONE, ""},
        {"\"guided_json\": {}, \"guided_regex\": \"a\"", -1, "guided_regex"},
        {"\"tool_choice\": \"required\", \"response_format\": {\"type\": \"json_object\"}", -1, "tool_choice"},
        {"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": 5}}", -1, "response_format"},
        {"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {}, \"extra\": 1}}", -1,
         "response_format"},
        {"\"response_format\": {\"type\": \"json_object\", \"json_schema\": {}}", -1, "response_format"},
        {"\"guided_choice\": []", -1, "guided_choice"},
        {"\"guided_json\": \"[1,\"", -1, "guided_json"},
        {"\"guided_json\": \"5\"", -1, "guided_json"},
        {"\"guided_regex\": 5", -1, "guided_regex"},
        {"\"guided_grammar\": \"x\"", -1, "guided_grammar"},
        {"\"guided_decoding_backend\": \"xgrammar\"", -1, "guided_decoding_backend"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{\"messages\": [{}], %s, %s}", tools, cases[i].extra);
        json_t *j = parse(body);
        oai_params p;
        oai_error e = {0};
        int rc = oai_parse_chat(j, "m", &p, &e);
        if (cases[i].kind < 0) {
            if (rc == 0)
                fail_msg("case %zu accepted", i);
            assert_string_equal(e.param, cases[i].field);
            assert_int_equal(e.status, 400);
        } else {
            if (rc)
                fail_msg("case %zu refused: %s", i, e.message);
            assert_int_equal(p.spec.kind, cases[i].kind);
            assert_string_equal(p.spec.kind ? p.spec.field : "", cases[i].field);
        }
        if (i == 9)
            assert_string_equal(p.spec.force_name, "ns::g"); /* as the prompt spells it */
        if (i == 8)
            assert_int_equal(p.spec.max_calls, 0);
        oai_params_free(&p);
        json_decref(j);
    }
    json_t *j = parse("{\"prompt\": \"x\", \"guided_regex\": \"[0-9]+\"}");
    oai_params p;
    oai_error e;
    assert_ok(oai_parse_completion(j, "m", &p, &e));
    assert_int_equal(p.spec.kind, CONS_REGEX);
    oai_params_free(&p);
    json_decref(j);
}

/* Steering: a walk that takes any token its mask allows (uniformly: a model with no preference) ends with
 * EOS within its budget, for budgets from the shortest completion up. */
static void test_steering_completes(void **state)
{
    (void)state;
    srv_genv env;
    assert_ok(srv_genv_init(&env, TOK, 129280));
    static const char *const schemas[] = {
        "{\"type\": \"object\", \"properties\": {\"user\": {\"type\": \"object\", \"properties\": {\"name\": {\"type\": "
        "\"string\", \"maxLength\": 10}, \"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120}}, "
        "\"required\": [\"name\", \"age\"]}, \"ok\": {\"type\": \"boolean\"}}, \"required\": [\"user\"]}",
        "{\"type\": \"array\", \"items\": {\"enum\": [\"red\", \"green\", 3]}, \"maxItems\": 5}",
        NULL,
    };
    uint32_t *mask = malloc(sizeof(uint32_t) * env.words);
    assert_non_null(mask);
    dsk_rng rng;
    dsk_rng_seed(&rng, 12);
    for (int si = 0; si < 3; si++) {
        grammar *g = NULL;
        if (schemas[si]) {
            json_t *js = parse(schemas[si]);
            assert_ok(grammar_from_schema(env.v, js, NULL, &g));
            json_decref(js);
        } else {
            static const char rx[] = "[a-z]{3,8}@(example|test)\\.(com|org)( [A-Za-z ]{0,40})?";
            assert_ok(grammar_from_regex(env.v, rx, strlen(rx), NULL, &g));
        }
        for (int walk = 0; walk < 12; walk++) {
            srv_cseq c;
            assert_ok(srv_cseq_open(&c, &env, g, 0, 1));
            int64_t rem = grammar_remaining(c.m), budget = rem + 1 + (walk % 4) * 7 + walk;
            int64_t t = 0;
            int done = 0;
            for (; t < budget && !done; t++) {
                assert_ok(srv_cseq_mask(&env, &c, c.m, c.active, budget - t, mask));
                uint64_t n = 0;
                for (size_t w = 0; w < env.words; w++)
                    n += (uint64_t)__builtin_popcount(mask[w]);
                if (n == 0)
                    fail_msg("schema %d walk %d: an empty mask at token %lld", si, walk, (long long)t);
                uint64_t pick = dsk_rng_below(&rng, n);
                int32_t id = -1;
                for (size_t w = 0; id < 0; w++)
                    for (uint32_t b = mask[w]; b && id < 0; b &= b - 1)
                        if (pick-- == 0)
                            id = (int32_t)(w * 32) + __builtin_ctz(b);
                assert_ok(srv_cseq_advance(&env, c.m, &c.active, id));
                done = id == env.eos;
            }
            if (!done)
                fail_msg("schema %d walk %d: no EOS within a budget of %lld (shortest completion %lld)", si, walk,
                         (long long)budget, (long long)rem);
            srv_cseq_close(&c);
        }
        grammar_free(g);
    }
    free(mask);
    srv_genv_free(&env);
}

/* A reply text with reasoning, content and two DSML calls, as the scheduler would publish it. */
static const char reply_text[] =
    "let me look</think>Checking both.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
    "<｜DSML｜ parameter name=\"city\" string=\"true\">Paris</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
    "<｜DSML｜ invoke name=\"get_time\">\n<｜DSML｜ parameter name=\"utc\" string=\"false\">true</｜DSML｜ parameter>\n"
    "</｜DSML｜ invoke>\n</｜DSML｜ calls>";

static srv_req *fake_req(const char *text)
{
    srv_req *r = srv_req_new();
    assert_non_null(r);
    dsk_buf_append(&r->text, text, strlen(text));
    r->n_prompt = 10;
    r->n_tokens = 7;
    r->done = 1;
    r->finish = FIN_STOP;
    return r;
}

static void test_reply_tool_calls(void **state)
{
    (void)state;
    srv_req *r = fake_req(reply_text);
    oai_writer w;
    oai_writer_init(&w, OAI_CHAT, "chatcmpl-x", "m", 1);
    json_t *body = oai_reply(&w, r);
    assert_non_null(body);
    json_t *ch = json_array_get(json_object_get(body, "choices"), 0), *msg = json_object_get(ch, "message");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    assert_string_equal(json_string_value(json_object_get(msg, "reasoning_content")), "let me look");
    assert_string_equal(json_string_value(json_object_get(msg, "content")), "Checking both.");
    json_t *calls = json_object_get(msg, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    json_t *c0 = json_array_get(calls, 0);
    assert_string_equal(json_string_value(json_object_get(c0, "id")), "call_chatcmpl-x_0");
    assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "function"), "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "function"), "arguments")),
                        "{\"city\": \"Paris\"}");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(body, "usage"), "total_tokens")), 17);
    json_decref(body);
    oai_writer_free(&w);
    /* parallel_tool_calls false: the first call only */
    oai_writer_init(&w, OAI_CHAT, "chatcmpl-x", "m", 1);
    w.parallel_tool_calls = 0;
    body = oai_reply(&w, r);
    msg = json_object_get(json_array_get(json_object_get(body, "choices"), 0), "message");
    assert_int_equal(json_array_size(json_object_get(msg, "tool_calls")), 1);
    json_decref(body);
    oai_writer_free(&w);
    srv_req_unref(r);
}

/* The stream of the same reply, fed a few bytes at a time: the deltas add up to the same message. */
static void test_stream_tool_calls(void **state)
{
    (void)state;
    srv_req *r = fake_req("");
    oai_writer w;
    oai_writer_init(&w, OAI_CHAT, "chatcmpl-y", "m", 1);
    w.include_usage = 1;
    size_t n = strlen(reply_text);
    for (size_t off = 0; off < n;) {
        size_t k = 1 + dsk_rng_below(&R, 9);
        if (k > n - off)
            k = n - off;
        dsk_buf_append(&r->text, reply_text + off, k);
        off += k;
        assert_ok(oai_stream_update(&w, r->text.data, r->text.len, NULL, NULL, 0));
    }
    assert_ok(oai_stream_finish(&w, r));
    dsk_buf reasoning = {0}, content = {0};
    int n_calls = 0, saw_role = 0, saw_usage = 0, saw_done = 0;
    const char *finish = NULL;
    json_t *events = json_array();
    for (char *line = strtok(w.out.data, "\n"); line; line = strtok(NULL, "\n")) {
        assert_true(!strncmp(line, "data: ", 6));
        if (!strcmp(line + 6, "[DONE]")) {
            saw_done = 1;
            continue;
        }
        json_t *ev = parse(line + 6);
        json_array_append_new(events, ev);
        json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
        if (!ch) {
            saw_usage = json_is_object(json_object_get(ev, "usage"));
            continue;
        }
        json_t *d = json_object_get(ch, "delta");
        saw_role |= json_object_get(d, "role") != NULL;
        const char *s;
        if ((s = json_string_value(json_object_get(d, "reasoning_content"))))
            dsk_buf_append(&reasoning, s, strlen(s));
        if ((s = json_string_value(json_object_get(d, "content"))))
            dsk_buf_append(&content, s, strlen(s));
        json_t *tc = json_object_get(d, "tool_calls");
        if (tc) {
            assert_int_equal(json_integer_value(json_object_get(json_array_get(tc, 0), "index")), n_calls);
            n_calls++;
        }
        if (json_is_string(json_object_get(ch, "finish_reason")))
            finish = json_string_value(json_object_get(ch, "finish_reason"));
    }
    assert_true(saw_role && saw_usage && saw_done);
    assert_string_equal(reasoning.data, "let me look");
    assert_string_equal(content.data, "Checking both.");
    assert_int_equal(n_calls, 2);
    assert_string_equal(finish, "tool_calls");
    json_decref(events);
    dsk_buf_free(&reasoning);
    dsk_buf_free(&content);
    oai_writer_free(&w);
    srv_req_unref(r);
}

/* A calls block that is not well formed comes back as content, byte for byte. */
static void test_reply_malformed_calls(void **state)
{
    (void)state;
    const char *text = "Sure.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" "
                       "string=\"false\">{not json</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
    srv_req *r = fake_req(text);
    oai_writer w;
    oai_writer_init(&w, OAI_CHAT, "id", "m", 0);
    json_t *body = oai_reply(&w, r);
    json_t *ch = json_array_get(json_object_get(body, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    assert_string_equal(json_string_value(json_object_get(json_object_get(ch, "message"), "content")), text);
    json_decref(body);
    oai_writer_free(&w);
    srv_req_unref(r);
}

/* An error that echoes what the client sent can always be answered (fuzz_request's findings): its error
 * body builds, its message and param are printable. A field name of 62 'a's and an 'é' was cut in the
 * middle of the 'é' (param holds 63 bytes), so the body did not build and the client got no answer; a
 * control character in the body came back raw in jansson's "near '...'" text, and in a field name. */
static void expect_answerable(const oai_error *e)
{
    size_t n = strlen(e->message), np = strlen(e->param);
    if (!dsk_is_printable(e->message, n, DSK_ESC_KEEP_NEWLINES) || !dsk_is_printable(e->param, np, 0))
        fail_msg("not printable: param '%s', message '%s'", e->param, e->message);
    char *body = oai_error_body(e->message, e->type, e->param, e->code);
    assert_non_null(body);
    free(body);
}

static void test_error_text(void **state)
{
    (void)state;
    char key[80], body[200];
    memset(key, 'a', 62);
    snprintf(key + 62, sizeof key - 62, "\xc3\xa9");
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"%s\": 1}", key);
    json_t *j = parse(body);
    oai_params p;
    oai_error e = {0};
    assert_int_equal(oai_parse_chat(j, "m", &p, &e), -1);
    assert_string_equal(e.code, "unrecognized_argument");
    assert_int_equal(strncmp(e.param, key, 62), 0);
    expect_answerable(&e);
    oai_params_free(&p);
    json_decref(j);
    j = parse("{\"messages\": [{}], \"\\u001b[31mred\": 1}");
    assert_int_equal(oai_parse_chat(j, "m", &p, &e), -1);
    expect_answerable(&e);
    assert_non_null(strstr(e.message, "'\\x1B[31mred'"));
    oai_params_free(&p);
    json_decref(j);
    static const char bad[] = "{\"messages\": [], \"max_tokens\"\x1a 3}";
    json_t *out;
    assert_int_equal(srv_body_json(bad, sizeof bad - 1, &out, &e), -1);
    assert_int_equal(e.status, 400);
    expect_answerable(&e);
    assert_non_null(strstr(e.message, "\\x1A"));
}

/* ---- the prompt cache ---- */

enum { PC_IMG = 129264 };

/* Whether a prefix of length l is allowed: every span starting below l, in a or in b, ends by l and is in
 * the other with the same position, length and key. The rule's definition, checked position by position. */
static int pc_valid(const pc_span *a, int na, const pc_span *b, int nb, int64_t l)
{
    for (int side = 0; side < 2; side++) {
        const pc_span *x = side ? b : a, *y = side ? a : b;
        int nx = side ? nb : na, ny = side ? na : nb;
        for (int i = 0; i < nx; i++) {
            if (x[i].pos >= l)
                continue;
            if (x[i].pos + x[i].len > l)
                return 0;
            int found = 0;
            for (int j = 0; j < ny; j++)
                found |= y[j].pos == x[i].pos && y[j].len == x[i].len && y[j].key == x[i].key;
            if (!found)
                return 0;
        }
    }
    return 1;
}

static int64_t pc_brute(const int32_t *a, int64_t na, const pc_span *sa, int nsa, const int32_t *b, int64_t nb,
                        const pc_span *sb, int nsb, int64_t limit)
{
    int64_t l = 0;
    while (l < na && l < nb && l < limit && a[l] == b[l])
        l++;
    while (!pc_valid(sa, nsa, sb, nsb, l))
        l--;
    return l;
}

/* Random spans over [0, n): some gaps, lengths 4..12, keys from a small set (so equal keys happen). */
static int random_spans(int64_t n, pc_span *sp, int max, int32_t *tokens)
{
    int k = 0;
    for (int64_t p = (int64_t)dsk_rng_below(&R, 6); k < max;) {
        int64_t len = 4 + (int64_t)dsk_rng_below(&R, 9);
        if (p + len > n)
            break;
        sp[k++] = (pc_span){p, len, 1 + dsk_rng_below(&R, 3)};
        for (int64_t i = p; i < p + len; i++)
            tokens[i] = PC_IMG;
        p += len + (int64_t)dsk_rng_below(&R, 8);
    }
    return k;
}

/* Two prompts that share a random-length start (ids, and spans copied with it, a key changed sometimes),
 * compared by pc_common_prefix and by the rule's definition, at random limits. */
static void test_prompt_cache_prefix(void **state)
{
    (void)state;
    int64_t hits = 0, cut = 0;
    for (int iter = 0; iter < 4000; iter++) {
        int32_t a[96], b[96];
        pc_span sa[8], sb[8];
        int64_t na = 1 + (int64_t)dsk_rng_below(&R, 96), nb = 1 + (int64_t)dsk_rng_below(&R, 96);
        for (int i = 0; i < 96; i++) {
            a[i] = (int32_t)dsk_rng_below(&R, 4);
            b[i] = (int32_t)dsk_rng_below(&R, 4);
        }
        int nsa = random_spans(na, sa, 8, a), nsb;
        /* b: a's first `shared` positions (ids and the spans inside), then its own */
        int64_t shared = (int64_t)dsk_rng_below(&R, (uint64_t)(na < nb ? na : nb) + 1);
        memcpy(b, a, sizeof(int32_t) * (size_t)shared);
        nsb = 0;
        for (int i = 0; i < nsa; i++)
            if (sa[i].pos + sa[i].len <= shared || (sa[i].pos < shared && sa[i].pos + sa[i].len <= nb)) {
                sb[nsb] = sa[i];
                if (dsk_rng_below(&R, 5) == 0)
                    sb[nsb].key ^= 0x100; /* another image, the same ids */
                if (dsk_rng_below(&R, 9) == 0 && sb[nsb].pos + sb[nsb].len < nb)
                    sb[nsb].len++; /* another size: one position more */
                for (int64_t p = sb[nsb].pos; p < sb[nsb].pos + sb[nsb].len; p++)
                    b[p] = PC_IMG;
                nsb++;
            }
        pc_entry c = {.tokens = a, .n_tokens = na, .spans = sa, .n_spans = nsa};
        pc_query q = {b, nb, sb, nsb, 0};
        int64_t limit = dsk_rng_below(&R, 4) ? nb : (int64_t)dsk_rng_below(&R, (uint64_t)nb + 1);
        int64_t got = pc_common_prefix(&c, &q, limit);
        int64_t want = pc_brute(a, na, sa, nsa, b, nb, sb, nsb, limit);
        if (got != want)
            fail_msg("iteration %d: common prefix %lld, the rule gives %lld", iter, (long long)got, (long long)want);
        hits += got > 0;
        int64_t lcp = 0;
        while (lcp < na && lcp < nb && lcp < limit && a[lcp] == b[lcp])
            lcp++;
        cut += got < lcp;
    }
    /* the cases that matter happened: long prefixes, and prefixes cut at a span */
    assert_true(hits > 1000);
    assert_true(cut > 200);

    /* the worked case: the same text and placeholders, another image's key: the prefix stops at its span */
    int32_t t[20];
    for (int i = 0; i < 20; i++)
        t[i] = i < 5 || i >= 13 ? 100 + i : PC_IMG;
    pc_span one = {5, 8, 0xabc}, other = {5, 8, 0xdef};
    pc_entry c = {.tokens = t, .n_tokens = 20, .spans = &one, .n_spans = 1};
    pc_query q = {t, 20, &other, 1, 0};
    assert_int_equal(pc_common_prefix(&c, &q, 20), 5);
    q.spans = &one;
    assert_int_equal(pc_common_prefix(&c, &q, 20), 20);
    assert_int_equal(pc_common_prefix(&c, &q, 9), 5); /* a prefix ending inside the span: cut to its start */
}

/* pc_find against brute force over random caches: the longest usable prefix (at most n - 1, a roll back
 * within the window, a reservation that covers the request), the most recent of equals; and LRU order. */
static void test_prompt_cache_find(void **state)
{
    (void)state;
    enum { N = 6, LEN = 40 };
    int found = 0, refused = 0;
    for (int iter = 0; iter < 2000; iter++) {
        prompt_cache pc;
        assert_ok(pc_init(&pc, N));
        int32_t base[LEN], q_ids[LEN];
        for (int i = 0; i < LEN; i++)
            base[i] = (int32_t)dsk_rng_below(&R, 1000);
        int n = 1 + (int)dsk_rng_below(&R, N);
        for (int i = 0; i < n; i++) {
            int32_t ids[LEN];
            int64_t len = 1 + (int64_t)dsk_rng_below(&R, LEN);
            memcpy(ids, base, sizeof ids);
            ids[dsk_rng_below(&R, LEN)] = -1; /* each differs somewhere */
            int64_t hi = len + (int64_t)dsk_rng_below(&R, 3);
            assert_ok(pc_add(&pc, 10 + i, 30 + (int64_t)dsk_rng_below(&R, 40), hi, ids, len / 2, ids + len / 2,
                             len - len / 2, NULL, 0));
        }
        if (dsk_rng_below(&R, 3) == 0) { /* an older entry re-added later: ties must go to the most recent */
            pc_entry *c = &pc.e[0];
            int32_t copy[LEN];
            memcpy(copy, c->tokens, sizeof(int32_t) * (size_t)c->n_tokens);
            if (pc.n < N)
                assert_ok(pc_add(&pc, 99, c->reserve, c->hi, copy, c->n_tokens, NULL, 0, NULL, 0));
        }
        memcpy(q_ids, base, sizeof q_ids);
        int64_t qn = 1 + (int64_t)dsk_rng_below(&R, LEN);
        pc_query q = {q_ids, qn, NULL, 0, 30 + (int64_t)dsk_rng_below(&R, 40)};
        int max_rollback = (int)dsk_rng_below(&R, 12);
        int best = -1;
        int64_t best_keep = 0;
        for (int i = 0; i < pc.n; i++) {
            const pc_entry *c = &pc.e[i];
            int64_t l = 0;
            while (l < c->n_tokens && l < qn - 1 && c->tokens[l] == q_ids[l])
                l++;
            if (c->reserve < q.reserve || l < 1 || c->hi - l > max_rollback)
                continue;
            if (l > best_keep || (l == best_keep && c->used > pc.e[best].used))
                best = i, best_keep = l;
        }
        int64_t keep = -7;
        int got = pc_find(&pc, &q, max_rollback, &keep);
        assert_int_equal(got, best);
        if (got >= 0) {
            assert_int_equal(keep, best_keep);
            assert_true(keep >= 1 && keep <= qn - 1 && pc.e[got].hi - keep <= max_rollback);
            assert_true(pc.e[got].reserve >= q.reserve);
            found++;
        } else
            refused++;
        /* LRU: removing the least recent each time gives the entries in the order they were kept */
        uint64_t last = 0;
        while (pc.n) {
            int i = pc_lru(&pc);
            assert_true(pc.e[i].used > last);
            last = pc.e[i].used;
            pc_remove(&pc, i);
        }
        pc_free(&pc);
    }
    assert_true(found > 200 && refused > 200);
    /* a full cache refuses another entry, naming its bound */
    prompt_cache pc;
    assert_ok(pc_init(&pc, 1));
    int32_t one = 7;
    assert_ok(pc_add(&pc, 0, 8, 1, &one, 1, NULL, 0, NULL, 0));
    assert_int_equal(pc_add(&pc, 1, 8, 1, &one, 1, NULL, 0, NULL, 0), -1);
    assert_non_null(strstr(dsk_err_msg(), "holds 1 sequences already"));
    pc_free(&pc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_vectors),   cmocka_unit_test(test_keys),
        cmocka_unit_test(test_stop_strings),     cmocka_unit_test(test_request_checks),
        cmocka_unit_test(test_structured_specs), cmocka_unit_test(test_steering_completes),
        cmocka_unit_test(test_reply_tool_calls), cmocka_unit_test(test_stream_tool_calls),
        cmocka_unit_test(test_reply_malformed_calls), cmocka_unit_test(test_error_text),
        cmocka_unit_test(test_prompt_cache_prefix), cmocka_unit_test(test_prompt_cache_find),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
