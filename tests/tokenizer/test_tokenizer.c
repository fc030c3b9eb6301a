/* The tokenizer against Hugging Face's goldens (tests/tokenizer/make_goldens.py), plus properties
 * that need no reference: lossless round trips for any bytes, the streaming decoder's output, the
 * Unicode classes, and errors that name unsupported features. */
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/tokenizer/tok_internal.h"
#include "runtime/tokenizer/unicode_tables.h"
#include "runtime/tokenizer/utf8.h"
#include "tests/common/test_util.h"
#include "tests/common/test_proc.h"

#include <jansson.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static dsk_tokenizer *real_tok;
static json_t *goldens;
static uint64_t seed;

static char *source_path(const char *rel)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", test_source_dir(), rel);
    return path;
}

static int setup(void **state)
{
    (void)state;
    if (tok_load(source_path("data/tokenizer/deepseek-v3-tokenizer.json"), &real_tok)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        return -1;
    }
    json_error_t err;
    goldens = json_load_file(source_path("tests/tokenizer/goldens.json"), JSON_ALLOW_NUL, &err);
    if (!goldens) {
        fprintf(stderr, "goldens.json: %s\n", err.text);
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
    json_decref(goldens);
    return 0;
}

/* The cases of a corpus file: its text split at lines that are exactly "%%%%". */
typedef struct {
    char *data;
    size_t n;
    const char *text[4096];
    size_t len[4096];
} corpus;

static void read_corpus(const char *name, corpus *c)
{
    char rel[256];
    snprintf(rel, sizeof rel, "tests/tokenizer/corpus/%s", name);
    size_t size;
    assert_ok(dsk_read_file(source_path(rel), &c->data, &size));
    const char *sep = "\n%%%%\n", *p = c->data, *end = c->data + size;
    c->n = 0;
    for (;;) {
        const char *q = memmem(p, (size_t)(end - p), sep, 6);
        assert_true(c->n < 4096);
        c->text[c->n] = p;
        c->len[c->n++] = (size_t)((q ? q : end) - p);
        if (!q)
            break;
        p = q + 6;
    }
}

static void assert_ids(const tok_ids *got, const json_t *want, const char *what, size_t k)
{
    if (got->len != json_array_size(want))
        fail_msg("%s case %zu: %zu ids, want %zu", what, k, got->len, json_array_size(want));
    for (size_t i = 0; i < got->len; i++)
        if (got->data[i] != json_integer_value(json_array_get(want, i)))
            fail_msg("%s case %zu: id %zu is %d, want %lld", what, k, i, got->data[i],
                     (long long)json_integer_value(json_array_get(want, i)));
}

/* decode(ids) == text, and the streaming decoder gives the same text (it is valid UTF-8). */
static void assert_round_trip(const dsk_tokenizer *tok, const tok_ids *ids, const char *text,
                              size_t len, int check_stream)
{
    char *back;
    size_t blen;
    assert_ok(tok_decode(tok, ids->data, ids->len, &back, &blen));
    assert_int_equal(blen, len);
    assert_memory_equal(back, text, len);
    free(back);
    if (!check_stream)
        return;
    tok_stream st;
    dsk_buf out = {0};
    tok_stream_init(&st, tok);
    for (size_t i = 0; i < ids->len; i++)
        assert_ok(tok_stream_push(&st, ids->data[i], &out));
    assert_ok(tok_stream_flush(&st, &out));
    assert_int_equal(out.len, len);
    if (len)
        assert_memory_equal(out.data, text, len);
    dsk_buf_free(&out);
}

static void test_goldens_real(void **state)
{
    (void)state;
    const json_t *files = json_object_get(goldens, "files");
    const char *name;
    const json_t *rows;
    size_t total = 0, plain_checked = 0, files_n = 0;
    json_object_foreach((json_t *)files, name, rows) {
        corpus *c = malloc(sizeof *c);
        assert_non_null(c);
        read_corpus(name, c);
        assert_int_equal(c->n, json_array_size(rows));
        for (size_t k = 0; k < c->n; k++) {
            const json_t *row = json_array_get(rows, k);
            tok_ids ids = {0}, plain = {0};
            assert_ok(tok_encode_append(real_tok, c->text[k], c->len[k], TOK_SPECIAL, &ids));
            assert_ids(&ids, json_object_get(row, "ids"), name, k);
            assert_ok(tok_encode_append(real_tok, c->text[k], c->len[k], 0, &plain));
            const json_t *want_plain = json_object_get(row, "plain");
            assert_ids(&plain, want_plain ? want_plain : json_object_get(row, "ids"), name, k);
            plain_checked += want_plain != NULL;
            assert_round_trip(real_tok, &ids, c->text[k], c->len[k], 1);
            tok_ids_free(&ids);
            tok_ids_free(&plain);
            total++;
        }
        files_n++;
        free(c->data);
        free(c);
    }
    printf("real tokenizer: %zu golden cases in %zu files equal (%zu with added-token strings "
           "also checked as plain text)\n", total, files_n, plain_checked);
    assert_true(total > 2000);
}

static void test_goldens_synthetic(void **state)
{
    (void)state;
    dsk_tokenizer *tok;
    assert_ok(tok_load(source_path("tests/tokenizer/data/synthetic-tokenizer.json"), &tok));
    const json_t *syn = json_object_get(goldens, "synthetic");
    const json_t *want = json_object_get(syn, "ids");
    size_t k = 0, i;
    const json_t *v;
    json_array_foreach(json_object_get(syn, "cases"), i, v) {
        tok_ids ids = {0};
        assert_ok(tok_encode_append(tok, json_string_value(v), json_string_length(v), TOK_SPECIAL,
                                    &ids));
        assert_ids(&ids, json_array_get(want, k), "synthetic", k);
        tok_ids_free(&ids);
        k++;
    }
    json_array_foreach(json_object_get(syn, "corpus"), i, v) {
        corpus *c = malloc(sizeof *c);
        assert_non_null(c);
        read_corpus(json_string_value(v), c);
        for (size_t j = 0; j < c->n; j++, k++) {
            tok_ids ids = {0};
            assert_ok(tok_encode_append(tok, c->text[j], c->len[j], TOK_SPECIAL, &ids));
            assert_ids(&ids, json_array_get(want, k), "synthetic corpus", k);
            assert_round_trip(tok, &ids, c->text[j], c->len[j], 1);
            tok_ids_free(&ids);
        }
        free(c->data);
        free(c);
    }
    assert_int_equal(k, json_array_size(want));
    /* each id alone decodes as Hugging Face's decode([id]) does (invalid UTF-8 -> U+FFFD) */
    const json_t *decoded = json_object_get(syn, "decoded");
    assert_int_equal(json_array_size(decoded), (size_t)tok_vocab_size(tok));
    json_array_foreach(decoded, i, v) {
        tok_stream st;
        dsk_buf out = {0};
        tok_stream_init(&st, tok);
        assert_ok(tok_stream_push(&st, (int32_t)i, &out));
        assert_ok(tok_stream_flush(&st, &out));
        if (out.len != json_string_length(v) || memcmp(out.data, json_string_value(v), out.len))
            fail_msg("id %zu decodes to '%.*s', want '%s'", i, (int)out.len, out.data,
                     json_string_value(v));
        dsk_buf_free(&out);
    }
    printf("synthetic tokenizer: %zu golden cases and %zu single-id decodes equal\n", k,
           json_array_size(decoded));
    tok_free(tok);
}

static void test_lookups(void **state)
{
    (void)state;
    assert_int_equal(tok_vocab_size(real_tok), 128815);
    assert_int_equal(tok_bos(real_tok), 0);
    assert_int_equal(tok_eos(real_tok), 1);
    assert_int_equal(tok_id(real_tok, "<｜User｜>"), 128803);
    assert_int_equal(tok_id(real_tok, "<｜Assistant｜>"), 128804);
    assert_int_equal(tok_id(real_tok, "Ġthe"), 270);
    assert_int_equal(tok_id(real_tok, "<｜System｜>"), -1);
    assert_true(tok_is_special(real_tok, 0));
    assert_false(tok_is_special(real_tok, 128803)); /* the file marks <｜User｜> non-special */
    assert_null(tok_str(real_tok, -1));
    assert_null(tok_str(real_tok, 128815));
    size_t present = 0;
    for (int32_t id = 0; id < tok_vocab_size(real_tok); id++) {
        const char *s = tok_str(real_tok, id);
        if (!s)
            continue;
        present++;
        assert_int_equal(tok_id(real_tok, s), id);
    }
    assert_int_equal(present, 128000 + 815);
}

/* Random bytes, mostly text-like, with ill-formed UTF-8 mixed in. */
static size_t random_bytes(dsk_rng *r, uint8_t *buf, size_t cap)
{
    static const char *const pieces[] = {"the", " ", "  ", "\n", "\r\n", "你好", "é", "😀", "\u200d",
                                         "123", "<｜User｜>", "<｜", "\xE4\xBD", "\xF0\x9F\x98",
                                         "\xED\xA0\x80", "\xC0\xAF", "\xFF", "\x80\x80"};
    size_t n = 0, want = (size_t)dsk_rng_below(r, cap / 8);
    while (n < want) {
        if (dsk_rng_below(r, 4) == 0) {
            buf[n++] = (uint8_t)dsk_rng_below(r, 256);
        } else {
            const char *p = pieces[dsk_rng_below(r, sizeof pieces / sizeof pieces[0])];
            size_t l = strlen(p);
            memcpy(buf + n, p, l);
            n += l;
        }
    }
    return n;
}

static void test_any_bytes_round_trip(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, seed);
    uint8_t buf[4096];
    size_t invalid = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = random_bytes(&r, buf, sizeof buf);
        invalid += !utf8_valid(buf, n);
        for (unsigned flags = 0; flags <= TOK_SPECIAL; flags += TOK_SPECIAL) {
            tok_ids ids = {0};
            assert_ok(tok_encode_append(real_tok, (const char *)buf, n, flags, &ids));
            assert_round_trip(real_tok, &ids, (const char *)buf, n, utf8_valid(buf, n));
            tok_ids_free(&ids);
        }
    }
    assert_true(invalid > 1000);
}

/* The policy for ill-formed UTF-8: each of its bytes is its own byte token, and the well-formed
 * stretches either side are encoded as separate texts. */
static void test_invalid_utf8_policy(void **state)
{
    (void)state;
    static const char *const bad[] = {"\xFF", "\x80", "\xC0\xAF", "\xE4\xBD", "\xED\xA0\x80",
                                      "\xF4\x90\x80\x80", "\xF0\x9F\x98"};
    static const char *const sides[] = {"hello", " world", "你好", "  ", "x1234", "😀"};
    int32_t byte_token[256]; /* the id that decodes to exactly that one byte */
    memset(byte_token, 0xFF, sizeof byte_token);
    for (int32_t id = 0; id < tok_vocab_size(real_tok); id++) {
        size_t l;
        const uint8_t *bytes = tok_bytes(real_tok, id, &l);
        if (bytes && l == 1)
            byte_token[bytes[0]] = id;
    }
    dsk_rng r;
    dsk_rng_seed(&r, seed + 1);
    for (int iter = 0; iter < 200; iter++) {
        const char *a = sides[dsk_rng_below(&r, 6)], *b = sides[dsk_rng_below(&r, 6)];
        const char *x = bad[dsk_rng_below(&r, 7)];
        char text[64];
        snprintf(text, sizeof text, "%s%s%s", a, x, b);
        tok_ids got = {0}, want = {0};
        assert_ok(tok_encode_append(real_tok, text, strlen(text), TOK_SPECIAL, &got));
        assert_ok(tok_encode_append(real_tok, a, strlen(a), TOK_SPECIAL, &want));
        for (const char *p = x; *p; p++) {
            int32_t id = byte_token[(uint8_t)*p];
            assert_true(id >= 0);
            assert_ok(tok_ids_push(&want, id));
        }
        assert_ok(tok_encode_append(real_tok, b, strlen(b), TOK_SPECIAL, &want));
        assert_int_equal(got.len, want.len);
        assert_memory_equal(got.data, want.data, got.len * sizeof *got.data);
        tok_ids_free(&got);
        tok_ids_free(&want);
    }
}

/* U+FFFD for each maximal ill-formed subpart, as the reference decoder (from_utf8_lossy) does. */
static void lossy(const uint8_t *s, size_t n, dsk_buf *out)
{
    size_t i = 0, l;
    while (i < n) {
        int r = utf8_next(s + i, n - i, &l);
        if (r == UTF8_OK)
            assert_ok(dsk_buf_append(out, s + i, l));
        else
            assert_ok(dsk_buf_append(out, "\xEF\xBF\xBD", 3));
        i += l;
    }
}

static void test_stream_decode(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, seed + 2);
    int32_t n_ids = tok_vocab_size(real_tok);
    for (int iter = 0; iter < 2000; iter++) {
        tok_ids ids = {0};
        size_t n = (size_t)dsk_rng_below(&r, 40);
        for (size_t i = 0; i < n; i++) {
            /* byte tokens (ids that decode to 1 byte) often, to cut characters */
            int32_t id = (int32_t)dsk_rng_below(&r, (uint64_t)n_ids);
            if (dsk_rng_below(&r, 2)) {
                size_t l;
                while (!tok_bytes(real_tok, id, &l) || l != 1)
                    id = (int32_t)dsk_rng_below(&r, 256 + 64);
            }
            if (!tok_str(real_tok, id))
                id = 0;
            assert_ok(tok_ids_push(&ids, id));
        }
        char *full;
        size_t flen;
        assert_ok(tok_decode(real_tok, ids.data, ids.len, &full, &flen));
        dsk_buf want = {0}, got = {0};
        lossy((const uint8_t *)full, flen, &want);
        tok_stream st;
        tok_stream_init(&st, real_tok);
        for (size_t i = 0; i < ids.len; i++) {
            assert_ok(tok_stream_push(&st, ids.data[i], &got));
            assert_true(utf8_valid((const uint8_t *)got.data, got.len)); /* never a cut character */
            assert_true(got.len <= want.len && !memcmp(got.data, want.data, got.len));
        }
        assert_ok(tok_stream_flush(&st, &got));
        assert_int_equal(got.len, want.len);
        if (got.len)
            assert_memory_equal(got.data, want.data, got.len);
        free(full);
        dsk_buf_free(&want);
        dsk_buf_free(&got);
        tok_ids_free(&ids);
    }
    assert_int_not_equal(tok_stream_push(&(tok_stream){.tok = real_tok}, n_ids, &(dsk_buf){0}), 0);
}

/* Every code point is in the patched PCRE2 class exactly when the reference table says so. */
static void test_unicode_classes(void **state)
{
    (void)state;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    for (int c = 0; c < UNI_NCLASSES; c++) {
        pcre2_code *re;
        const char *pat = uni_classes[c].pattern;
        assert_ok(pretok_compile(pat, strlen(pat), 0, &re));
        size_t k = 0, members = 0;
        for (uint32_t cp = 0; cp < 0x110000; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF)
                continue;
            while (k < uni_classes[c].n && uni_classes[c].ranges[k][1] < cp)
                k++;
            int want = k < uni_classes[c].n && cp >= uni_classes[c].ranges[k][0];
            uint8_t u[4];
            int l = utf8_encode(cp, u);
            int got = pcre2_match(re, u, (size_t)l, 0, PCRE2_ANCHORED, md, NULL) >= 0;
            if (got != want)
                fail_msg("%s: U+%04X is %s the reference class", pat, cp, want ? "in" : "not in");
            members += (size_t)want;
        }
        assert_true(members > 20);
        pcre2_code_free(re);
    }
    pcre2_match_data_free(md);
}

/* Load the synthetic tokenizer with one value (JSON text) set at path_in_json. 0: the load failed with a
 * message naming needle; 1: it loaded; 2: another message (printed). No cmocka calls, so it may run in a
 * child process. */
static int load_changed(const char *path_in_json, const char *json_value, const char *needle)
{
    char *text;
    size_t len;
    if (dsk_read_file(source_path("tests/tokenizer/data/synthetic-tokenizer.json"), &text, &len))
        return 3;
    json_t *root = json_loadb(text, len, 0, NULL);
    free(text);
    json_t *value = json_loads(json_value, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!root || !value)
        return 3;
    /* path_in_json: "a/b/c" of object keys, or a numeric array index */
    char path[256];
    snprintf(path, sizeof path, "%s", path_in_json);
    json_t *obj = root;
    char *save, *key = strtok_r(path, "/", &save), *next;
    while ((next = strtok_r(NULL, "/", &save))) {
        obj = json_is_array(obj) ? json_array_get(obj, (size_t)atoi(key)) : json_object_get(obj, key);
        if (!obj)
            return 3;
        key = next;
    }
    if (json_is_array(obj))
        json_array_set_new(obj, (size_t)atoi(key), value);
    else
        json_object_set_new(obj, key, value);
    char *changed = json_dumps(root, 0);
    json_decref(root);
    dsk_tokenizer *tok = NULL;
    int rc = tok_load_json(changed, strlen(changed), &tok);
    free(changed);
    if (rc == 0) {
        tok_free(tok);
        return 1;
    }
    if (tok || !strstr(dsk_err_msg(), needle)) {
        fprintf(stderr, "error '%s' does not mention '%s'\n", dsk_err_msg(), needle);
        return 2;
    }
    return 0;
}

/* Loading a variant of the synthetic tokenizer with one feature changed gives an error naming it. */
static void expect_load_error(const char *path_in_json, const char *json_value, const char *needle)
{
    int rc = load_changed(path_in_json, json_value, needle);
    if (rc == 1)
        fail_msg("setting %s to %s loaded", path_in_json, json_value);
    if (rc)
        fail_msg("setting %s to %s: not the error expected (%d)", path_in_json, json_value, rc);
}

static void test_unsupported_features(void **state)
{
    (void)state;
    expect_load_error("normalizer", "{\"type\": \"NFC\"}", "normalizer 'NFC'");
    expect_load_error("model/type", "\"WordPiece\"", "model type 'WordPiece'");
    expect_load_error("model/dropout", "0.1", "dropout");
    expect_load_error("model/continuing_subword_prefix", "\"##\"", "continuing_subword_prefix");
    expect_load_error("decoder", "{\"type\": \"Metaspace\"}", "decoder 'Metaspace'");
    expect_load_error("added_tokens/0/single_word", "true", "single_word");
    expect_load_error("pre_tokenizer/pretokenizers/0/behavior", "\"Removed\"", "behavior 'Removed'");
    expect_load_error("pre_tokenizer/pretokenizers/0/invert", "true", "invert");
    expect_load_error("pre_tokenizer/pretokenizers/1/pattern", "{\"Regex\": \"\\\\d+\"}", "\\d");
    expect_load_error("pre_tokenizer/pretokenizers/1/pattern", "{\"Regex\": \"\\\\p{Lu}\"}",
                      "\\p{Lu}");
    expect_load_error("pre_tokenizer/pretokenizers/1/pattern", "{\"Regex\": \"(?i)a\"}", "(?i)");
    expect_load_error("pre_tokenizer/pretokenizers/1/pattern", "{\"Regex\": \"[a\"}",
                      "unterminated");
    expect_load_error("pre_tokenizer/pretokenizers/0",
                      "{\"type\": \"Whitespace\"}", "pre_tokenizer 'Whitespace'");
    expect_load_error("pre_tokenizer/pretokenizers/2/add_prefix_space", "true", "add_prefix_space");
    expect_load_error("model/merges/0", "\"a b c\"", "merges[0]");
    /* PCRE2's verbs are not Oniguruma syntax (they were accepted, and (*LIMIT_MATCH=1) changed matching) */
    expect_load_error("pre_tokenizer/pretokenizers/1/pattern", "{\"Regex\": \"(*LIMIT_MATCH=1)a\"}",
                      "(*LIMIT_MATCH");
    expect_load_error("pre_tokenizer/pretokenizers/1/pattern", "{\"Regex\": \"a(*SKIP)b\"}", "(*SKIP)");
    /* a NUL is a character of the pattern, not its end: what follows it is compiled (and here fails) */
    expect_load_error("pre_tokenizer/pretokenizers/1/pattern", "{\"Regex\": \"a\\u0000(\"}",
                      "PCRE2 cannot compile");
}

/* Added tokens are numbered as Hugging Face numbers them, not by the file's id fields: the file ids
 * below are 900, 5, 950, 3; tokenizers 0.23 gives 703 (after the 703 vocab entries), 187 (the vocab's
 * own "ÿ"), 704, 705. */
static void test_added_token_ids(void **state)
{
    (void)state;
    char *text;
    size_t len;
    assert_ok(dsk_read_file(source_path("tests/tokenizer/data/synthetic-tokenizer.json"), &text, &len));
    json_t *root = json_loadb(text, len, 0, NULL);
    free(text);
    assert_non_null(root);
    json_t *added = json_array();
    static const struct {
        int id;
        const char *content;
        int special;
    } list[] = {{900, "<x>", 1}, {5, "ÿ", 1}, {950, "<y>", 1}, {3, "<z>", 0}};
    for (int i = 0; i < 4; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", list[i].id,
                                               "content", list[i].content, "single_word", 0, "lstrip", 0,
                                               "rstrip", 0, "normalized", 0, "special", list[i].special));
    json_object_set_new(root, "added_tokens", added);
    char *changed = json_dumps(root, 0);
    json_decref(root);
    dsk_tokenizer *tok;
    assert_ok(tok_load_json(changed, strlen(changed), &tok));
    free(changed);
    int32_t *ids;
    size_t n;
    assert_ok(tok_encode(tok, "<x>ÿ<y><z>", strlen("<x>ÿ<y><z>"), 0, &ids, &n));
    assert_int_equal(n, 4);
    assert_int_equal(ids[0], 703);
    assert_int_equal(ids[1], 187);
    assert_int_equal(ids[2], 704);
    assert_int_equal(ids[3], 705);
    assert_int_equal(tok_vocab_size(tok), 706);
    free(ids);
    tok_free(tok);
}

/* Several threads encoding and decoding with one tokenizer get what one thread gets. */
typedef struct {
    const corpus *c;
    const tok_ids *want; /* [c->n] */
    int ok;
} thread_job;

static void *encode_all(void *arg)
{
    thread_job *j = arg;
    j->ok = 1;
    for (int rep = 0; rep < 3; rep++)
        for (size_t k = 0; k < j->c->n; k++) {
            tok_ids ids = {0};
            char *back;
            size_t len;
            if (tok_encode_append(real_tok, j->c->text[k], j->c->len[k], TOK_SPECIAL, &ids) ||
                ids.len != j->want[k].len ||
                memcmp(ids.data, j->want[k].data, ids.len * sizeof *ids.data) ||
                tok_decode(real_tok, ids.data, ids.len, &back, &len) || len != j->c->len[k])
                j->ok = 0;
            else
                free(back);
            tok_ids_free(&ids);
        }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    corpus *c = malloc(sizeof *c);
    assert_non_null(c);
    read_corpus("random.txt", c);
    tok_ids *want = calloc(c->n, sizeof *want);
    assert_non_null(want);
    for (size_t k = 0; k < c->n; k++)
        assert_ok(tok_encode_append(real_tok, c->text[k], c->len[k], TOK_SPECIAL, &want[k]));
    pthread_t th[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){c, want, 0};
        assert_int_equal(pthread_create(&th[i], NULL, encode_all, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(jobs[i].ok);
    }
    for (size_t k = 0; k < c->n; k++)
        tok_ids_free(&want[k]);
    free(want);
    free(c->data);
    free(c);
}

static int load_huge_id(void *arg)
{
    (void)arg;
    return load_changed("model/vocab/zzzz", "1073741822", "ids must be below 2097151");
}

/* An id of 2^30 - 2 is refused before any table is sized by it (it allocated 4.2 GB first): under a
 * 1 GiB address-space limit. */
static void test_huge_id(void **state)
{
    (void)state;
    test_status st = test_run_fn(load_huge_id, NULL, TEST_HANG_S, (size_t)1 << 30);
    if (!st.exited || st.exit_code)
        fail_msg("a vocab id of 2^30 - 2: exit %d, signal %d", st.exit_code, st.signal);
    expect_load_error("model/vocab/zzzz", "2097151", "ids must be below 2097151");
}

/* A NUL inside a Split regex is part of the pattern: with "q\0a" the text "q\0and" splits into "q\0a"
 * and "nd" (then ByteLevel's split: q, \0, a, nd); the pattern cut at the NUL ("q") left "and" whole, one
 * token of the synthetic vocabulary. */
static void test_nul_in_pattern(void **state)
{
    (void)state;
    char *text;
    size_t len;
    assert_ok(dsk_read_file(source_path("tests/tokenizer/data/synthetic-tokenizer.json"), &text, &len));
    json_t *root = json_loadb(text, len, 0, NULL);
    free(text);
    assert_non_null(root);
    json_t *steps = json_object_get(json_object_get(root, "pre_tokenizer"), "pretokenizers");
    json_t *p = json_object_get(json_array_get(steps, 1), "pattern");
    json_object_set_new(p, "Regex", json_stringn("q\0a", 3));
    char *whole = json_dumps(root, 0);
    json_object_set_new(p, "Regex", json_string("q"));
    char *cut = json_dumps(root, 0);
    json_decref(root);
    dsk_tokenizer *a, *b;
    assert_ok(tok_load_json(whole, strlen(whole), &a));
    assert_ok(tok_load_json(cut, strlen(cut), &b));
    free(whole);
    free(cut);
    tok_ids ia = {0}, ib = {0}, want = {0};
    assert_ok(tok_encode_append(a, "q\0and", 5, 0, &ia));
    assert_ok(tok_encode_append(b, "q\0and", 5, 0, &ib));
    static const char *const pieces[] = {"q", "", "a", "nd"}; /* "" stands for the NUL */
    for (int i = 0; i < 4; i++)
        assert_ok(tok_encode_append(a, i == 1 ? "\0" : pieces[i], i == 1 ? 1 : strlen(pieces[i]), 0, &want));
    assert_int_equal(ia.len, want.len);
    assert_memory_equal(ia.data, want.data, want.len * sizeof *want.data);
    assert_false(ia.len == ib.len && !memcmp(ia.data, ib.data, ia.len * sizeof *ia.data));
    tok_ids_free(&ia);
    tok_ids_free(&ib);
    tok_ids_free(&want);
    tok_free(a);
    tok_free(b);
}

/* A 10 MB run of spaces: one pre-token, 78,125 tokens of 128 spaces (PCRE2's fixed match limit failed
 * it, "match limit exceeded", while 5 MB worked). */
static void test_long_space_run(void **state)
{
    (void)state;
    size_t n = 10000000;
    char *spaces = malloc(n);
    assert_non_null(spaces);
    memset(spaces, ' ', n);
    tok_ids one = {0}, ids = {0};
    assert_ok(tok_encode_append(real_tok, spaces, 128, 0, &one));
    assert_int_equal(one.len, 1);
    assert_ok(tok_encode_append(real_tok, spaces, n, 0, &ids));
    assert_int_equal(ids.len, n / 128);
    for (size_t i = 0; i < ids.len; i++)
        if (ids.data[i] != one.data[0])
            fail_msg("id %zu is %d, expected %d", i, ids.data[i], one.data[0]);
    tok_ids_free(&one);
    tok_ids_free(&ids);
    free(spaces);
}

static int load_fifo(void *arg)
{
    dsk_tokenizer *tok;
    if (tok_load(arg, &tok) == 0)
        return 3;
    return strstr(dsk_err_msg(), "not a regular file") ? 0 : 4;
}

/* A FIFO as tokenizer.json is refused at once; `dskit tokenize --decode` refuses a NUL among the ids
 * (what followed it was ignored). */
static void test_hostile_files(void **state)
{
    (void)state;
    char dir[64] = "/tmp/dskit-test-tok-XXXXXX", fifo[128], in[128], dskit[600], out[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/tokenizer.json", dir);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    test_status st = test_run_fn(load_fifo, fifo, TEST_HANG_S, 0);
    if (!st.exited || st.exit_code)
        fail_msg("tokenizer.json FIFO: exit %d, signal %d (14: it hung)", st.exit_code, st.signal);
    snprintf(in, sizeof in, "%s/ids.txt", dir);
    assert_ok(dsk_write_file_atomic(in, "1 2\0 3", 7));
    snprintf(dskit, sizeof dskit, "%s/dskit", test_binary_dir());
    char *argv[] = {dskit, "tokenize", "--tokenizer", source_path("data/tokenizer/deepseek-v3-tokenizer.json"),
                    "--decode", NULL};
    st = test_run_in(argv, in, out, sizeof out, TEST_HANG_S, 0);
    if (!st.exited || st.exit_code != 1 || !strstr(out, "byte 3 ('\\0') is not part of a token id"))
        fail_msg("dskit tokenize --decode with a NUL: exit %d:\n%s", st.exit_code, out);
    unlink(fifo);
    unlink(in);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goldens_real),
        cmocka_unit_test(test_goldens_synthetic),
        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_any_bytes_round_trip),
        cmocka_unit_test(test_invalid_utf8_policy),
        cmocka_unit_test(test_stream_decode),
        cmocka_unit_test(test_unicode_classes),
        cmocka_unit_test(test_unsupported_features),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_added_token_ids),
        cmocka_unit_test(test_huge_id),
        cmocka_unit_test(test_nul_in_pattern),
        cmocka_unit_test(test_long_space_run),
        cmocka_unit_test(test_hostile_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
