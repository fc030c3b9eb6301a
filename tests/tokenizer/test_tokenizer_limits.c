/* Hostile tokenizer.json files are refused fast and in bounded memory (issue 15), before jansson builds
 * a document of them or any table is sized: the file's size, jansson's estimated cost (a 16 MiB file of
 * empty objects cost 1.3 GB and seconds), a token's length, all added tokens together, a Split
 * pattern's length. The real tokenizer stays far inside every limit. Each hostile case runs in a child
 * with a time limit and, outside AddressSanitizer, a 256 MiB address-space limit. */
#include "runtime/common/error.h"
#include "runtime/common/json_cost.h"
#include "runtime/common/util.h"
#include "runtime/tokenizer/tok_internal.h"
#include "tests/common/test_proc.h"
#include "tests/common/test_util.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

static char *source_file(const char *rel, size_t *len)
{
    char path[1024], *text;
    snprintf(path, sizeof path, "%s/%s", test_source_dir(), rel);
    assert_ok(dsk_read_file(path, &text, len));
    return text;
}

/* The synthetic tokenizer's JSON with fn's change, serialised. */
typedef void (*json_edit)(json_t *root);

static char *edited(json_edit fn)
{
    size_t len;
    char *text = source_file("tests/tokenizer/data/synthetic-tokenizer.json", &len);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    assert_non_null(root);
    fn(root);
    char *out = json_dumps(root, JSON_COMPACT);
    assert_non_null(out);
    json_decref(root);
    return out;
}

typedef struct {
    const char *text;
    size_t len;
    const char *path; /* when set, tok_load of this file instead */
    const char *needle;
} load_case;

/* In the child: the load must fail with the needle in its message. */
static int load_refused(void *arg)
{
    const load_case *c = arg;
    dsk_tokenizer *tok;
    int rc = c->path ? tok_load(c->path, &tok) : tok_load_json(c->text, c->len, &tok);
    if (rc == 0)
        return 3;
    if (!strstr(dsk_err_msg(), c->needle)) {
        fprintf(stderr, "the message '%s' does not say '%s'\n", dsk_err_msg(), c->needle);
        return 4;
    }
    return 0;
}

static void expect_refused(const load_case *c)
{
    test_status st = test_run_fn(load_refused, (void *)c, TEST_HANG_S, 256 * MIB);
    if (!st.exited || st.exit_code != 0)
        fail_msg("loading a hostile tokenizer (expecting '%s'): exit %d, signal %d", c->needle, st.exit_code, st.signal);
}

/* The reported shape: millions of empty objects, valid JSON, no tokenizer at all. */
static void test_parse_cost(void **state)
{
    (void)state;
    size_t n = 16 * MIB / 3;
    char *text = malloc(n * 3 + 16);
    assert_non_null(text);
    size_t len = (size_t)sprintf(text, "{\"x\":[");
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(text + len, "%s{}", i ? "," : "");
    len += (size_t)sprintf(text + len, "]}");
    assert_true(dsk_json_cost(text, len) > TOK_MAX_PARSE_BYTES);
    load_case c = {text, len, NULL, "would take about"};
    double t0 = dsk_now();
    expect_refused(&c);
    /* a linear scan of 16 MiB: well under a second even under the sanitizers (jansson took seconds) */
    double secs = dsk_now() - t0;
    if (secs > 5.0)
        fail_msg("refusing 16 MiB of empty objects took %.2f s", secs);
    free(text);
}

/* A file past the size limit is refused from its size alone (a sparse file: nothing is read). */
static void test_file_size(void **state)
{
    (void)state;
    char path[] = "/tmp/dskit-test-tok-limits-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)(TOK_MAX_FILE_BYTES + 1)), 0);
    close(fd);
    load_case c = {NULL, 0, path, "more than"};
    expect_refused(&c);
    unlink(path);
}

static void long_vocab_entry(json_t *root)
{
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    char name[TOK_MAX_TOKEN_BYTES + 2];
    memset(name, 'a', sizeof name - 1);
    name[sizeof name - 1] = 0;
    assert_int_equal(json_object_set_new(vocab, name, json_integer((json_int_t)json_object_size(vocab))), 0);
}

/* Enough added tokens of 1000 bytes to pass the total (each under the per-token limit). */
static void many_long_added(json_t *root)
{
    json_t *added = json_object_get(root, "added_tokens");
    char content[1001];
    int n = (int)(TOK_MAX_ADDED_BYTES / 1000) + 2;
    for (int i = 0; i < n; i++) {
        memset(content, 'b', 1000);
        char prefix[16];
        memcpy(content, prefix, (size_t)snprintf(prefix, sizeof prefix, "<%09d", i)); /* distinct tokens */
        content[1000] = 0;
        json_t *a = json_pack("{s:s, s:b, s:b}", "content", content, "special", 1, "normalized", 0);
        assert_non_null(a);
        assert_int_equal(json_array_append_new(added, a), 0);
    }
}

static void long_pattern(json_t *root)
{
    char *pattern = malloc(TOK_MAX_PATTERN_BYTES + 2);
    memset(pattern, 'x', TOK_MAX_PATTERN_BYTES + 1);
    pattern[TOK_MAX_PATTERN_BYTES + 1] = 0;
    json_t *split = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", pattern, "behavior",
                              "Isolated", "invert", 0);
    free(pattern);
    json_t *seq = json_pack("{s:s, s:[o, {s:s, s:b, s:b}]}", "type", "Sequence", "pretokenizers", split, "type",
                            "ByteLevel", "add_prefix_space", 0, "use_regex", 0);
    assert_non_null(seq);
    assert_int_equal(json_object_set_new(root, "pre_tokenizer", seq), 0);
}

static void test_lengths(void **state)
{
    (void)state;
    static const struct {
        json_edit fn;
        const char *needle;
    } cases[] = {
        {long_vocab_entry, "more than the 1024 a token may have"},
        {many_long_added, "all of them together"},
        {long_pattern, "more than the 65536 one may have"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = edited(cases[i].fn);
        load_case c = {text, strlen(text), NULL, cases[i].needle};
        expect_refused(&c);
        free(text);
    }
}

static int load_real(void *arg)
{
    dsk_tokenizer *tok;
    if (tok_load(arg, &tok)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        return 3;
    }
    tok_free(tok);
    return 0;
}

/* The real tokenizer: its estimated parse cost far under the limit, and it loads in the same 256 MiB. */
static void test_real_inside(void **state)
{
    (void)state;
    size_t len;
    char *text = source_file("data/tokenizer/deepseek-v3-tokenizer.json", &len);
    size_t cost = dsk_json_cost(text, len);
    free(text);
    assert_true(len < TOK_MAX_FILE_BYTES / 8);
    if (cost > TOK_MAX_PARSE_BYTES / 8)
        fail_msg("the real tokenizer's estimated parse cost is %zu MiB, near the %zu MiB limit", cost >> 20,
                 TOK_MAX_PARSE_BYTES >> 20);
    char path[1024];
    snprintf(path, sizeof path, "%s/data/tokenizer/deepseek-v3-tokenizer.json", test_source_dir());
    test_status st = test_run_fn(load_real, path, TEST_HANG_S, 256 * MIB);
    assert_true(st.exited);
    assert_int_equal(st.exit_code, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_cost),
        cmocka_unit_test(test_file_size),
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_real_inside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
