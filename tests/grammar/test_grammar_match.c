/* Matchers on the real vocabulary: masks against brute force (every one of the 129,280 ids tried on
 * a copy), the matcher API (clone, copy, refusals, EOS, control tokens), random walks whose outputs
 * must parse, DSML tool calls that must parse back with dsml_parse into the offered calls, and masks
 * built by several threads at once on one grammar. Full JSON Schema validation of walk outputs is
 * the Python oracle's job (check_samples.py). */
#include "runtime/tokenizer/dsml.h"
#include "tests/common/test_util.h"
#include "tests/grammar/grammar_test_util.h"

#include <pthread.h>
#include <time.h>

static dsk_tokenizer *tok;
static grammar_vocab *vocab;
static grammar_walk_env env;
static uint32_t *mask, *mask2;
static uint64_t seed;

static int setup(void **state)
{
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/grammar/tok_match", test_binary_dir());
    if (gt_load_tokenizer(test_source_dir(), dir, &tok) || grammar_vocab_new(tok, GT_VOCAB, tok_eos(tok), &vocab)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        return -1;
    }
    grammar_walk_env_init(&env, tok, vocab);
    mask = malloc(grammar_mask_words(vocab) * sizeof *mask);
    mask2 = malloc(grammar_mask_words(vocab) * sizeof *mask2);
    seed = (uint64_t)time(NULL);
    printf("random seed %llu\n", (unsigned long long)seed);
    return mask && mask2 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    free(mask);
    free(mask2);
    grammar_vocab_free(vocab);
    tok_free(tok);
    return 0;
}

static grammar *schema_grammar(const char *json)
{
    json_error_t e;
    json_t *s = json_loads(json, 0, &e);
    if (!s)
        fail_msg("bad test schema: %s", e.text);
    grammar *g;
    if (grammar_from_schema(vocab, s, NULL, &g))
        fail_msg("schema %s: %s", json, dsk_err_msg());
    json_decref(s);
    return g;
}

static const char *const walk_schemas[] = {
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12}, \"age\": {\"type\": "
    "\"integer\", \"minimum\": 0, \"maximum\": 130}, \"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"a\", "
    "\"b\", \"c\"]}, \"maxItems\": 4}}, \"required\": [\"name\"]}",
    "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"id\": {\"type\": \"integer\"}, \"children\": "
    "{\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}, \"maxItems\": 2}}, \"required\": [\"id\", "
    "\"children\"]}}, \"$ref\": \"#/$defs/node\"}",
    "{\"anyOf\": [{\"type\": \"string\", \"pattern\": \"^[A-Z]{3}-[0-9]{2}$\"}, {\"type\": \"number\", \"minimum\": -1, "
    "\"maximum\": 1}, {\"type\": \"array\", \"prefixItems\": [{\"type\": \"boolean\"}, {\"format\": \"date\"}]}]}",
    "{\"type\": \"object\"}",
    "{\"type\": \"object\", \"properties\": {\"mail\": {\"type\": \"string\", \"format\": \"email\"}, \"host\": {\"type\": "
    "\"string\", \"pattern\": \"^[a-z0-9-]+(\\\\.[a-z0-9-]+)*\\\\.(com|org)$\"}, \"note\": {\"type\": \"string\", \"pattern\": "
    "\"x\"}}, \"required\": [\"mail\", \"host\", \"note\"]}",
};

static const char tools_json[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 24}, \"unit\": {\"enum\": [\"c\", \"f\"]}, "
    "\"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}}, \"required\": [\"city\"]}}},"
    " {\"type\": \"function\", \"namespace\": \"web\", \"function\": {\"name\": \"search\", \"parameters\": {\"type\": "
    "\"object\", \"properties\": {\"q\": {\"type\": \"string\"}, \"filters\": {\"type\": \"array\", \"items\": "
    "{\"type\": \"object\", \"properties\": {\"k\": {\"type\": \"string\"}, \"v\": {}}, \"required\": [\"k\", \"v\"]}, "
    "\"maxItems\": 2}, \"limit\": {\"type\": [\"integer\", \"string\"]}}, \"required\": [\"q\"]}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

/* The mask at m equals "accept_token succeeds" for every id of the model's vocabulary. */
static void brute_force(const grammar_matcher *m, const char *what)
{
    grammar_matcher *probe;
    assert_ok(grammar_matcher_clone(m, &probe));
    assert_ok(grammar_allowed((grammar_matcher *)m, mask));
    for (int32_t id = 0; id < GT_VOCAB; id++) {
        assert_ok(grammar_matcher_copy(probe, m));
        int ok = grammar_accept_token(probe, id) == 0;
        if (ok != grammar_mask_has(mask, id))
            fail_msg("%s: token %d: mask %d, accept_token %d", what, id, grammar_mask_has(mask, id), ok);
    }
    grammar_matcher_free(probe);
}

/* Walk a few tokens at random, then compare with brute force, a few times per grammar. */
static void check_brute_force(const grammar *g, const char *what, dsk_rng *r)
{
    int32_t *ids = malloc(GT_VOCAB * sizeof *ids);
    assert_non_null(ids);
    for (int rep = 0; rep < 3; rep++) {
        grammar_matcher *m;
        assert_ok(grammar_matcher_new(g, &m));
        size_t steps = dsk_rng_below(r, 24);
        for (size_t s = 0; s < steps; s++) {
            assert_ok(grammar_allowed(m, mask));
            size_t n = gt_mask_ids(mask, grammar_mask_words(vocab), ids);
            int32_t pick = n ? ids[dsk_rng_below(r, n)] : -1;
            if (pick < 0 || pick == env.eos)
                break;
            assert_ok(grammar_accept_token(m, pick));
        }
        brute_force(m, what);
        grammar_matcher_free(m);
    }
    free(ids);
}

static void test_masks_vs_brute_force(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, seed);
    for (size_t i = 0; i < sizeof walk_schemas / sizeof walk_schemas[0]; i++) {
        grammar *g = schema_grammar(walk_schemas[i]);
        check_brute_force(g, walk_schemas[i], &r);
        grammar_free(g);
    }
    static const char *const regexes[] = {".*foo", "[^x]{2,5}y", "[a-z]+@[a-z]+\\.com", "[A-Za-z0-9 .]{0,40}!"};
    for (size_t i = 0; i < 4; i++) {
        grammar *g;
        assert_ok(grammar_from_regex(vocab, regexes[i], strlen(regexes[i]), NULL, &g));
        check_brute_force(g, regexes[i], &r);
        grammar_free(g);
    }
    json_t *tools = json_loads(tools_json, 0, NULL);
    grammar *g;
    assert_ok(grammar_from_tools(vocab, tools, NULL, 2, NULL, &g));
    check_brute_force(g, "tools", &r);
    grammar_free(g);
    json_decref(tools);
}

/* Grammars whose token sets the character-chain shortcut (runtime/grammar/plain.c) decides in its
 * harder ways: texts ended by a character they may also hold, words opening after a space (the
 * tokens opening with ' ' as a level of their own), classes that change after the first character,
 * dot-separated bounded parts, a last character allowed only at the end, non-ASCII exceptions, a
 * letter that may leave a text of letters (a rare one, and a common one whose tokens are not walked:
 * only those holding what may follow it), non-ASCII characters (and tokens that end inside one) as
 * the exception or dead. */
static const char *const text_regexes[] = {
    "[^\\n]{0,40}\\.",
    "(?:[A-Z][a-z]+ ){1,4}[0-9]{2}",
    "[a-z]+(?: [a-z]+){0,6}!",
    "[a-z][A-Z0-9 ]{0,12}",
    "x[^.]{0,10}\\.[^.]{0,10}",
    "[A-Za-z0-9_+-]{1,16}(?:\\.[A-Za-z0-9_+-]{1,16}){0,2}@[a-z]{2,8}",
    ", [^\\n]{0,30}[.!?]",
    " ?[^ ]{0,20} [^ ]{0,20}",
    "[^\u00e9]{0,12}\u00e9.{0,12}",
    "(?:[a-z]{1,3}[ .,;]){0,12}",
    "[a-z ]{0,20}q[0-9]{1,3}",
    "[a-wyz ]{0,30}ex",
    "[a-z ]{0,10}[^\\x00-\\x7f][a-z ]{0,10}",
    "[ -~]{0,30}",
};

static const char text_schema[] =
    "{\"type\": \"object\", \"properties\": {\"mail\": {\"type\": \"string\", \"format\": \"email\"}, "
    "\"title\": {\"type\": \"string\", \"pattern\": \"^[A-Z][a-z]+(?: [A-Z][a-z]+)*$\", \"maxLength\": 30}}, "
    "\"required\": [\"mail\", \"title\"]}";

/* Walks on freshly compiled grammars (every state's token set is built on the walk's first visit
 * to it, as one request sees it), each step's mask compared with brute force. */
static void check_cold_walks(const char *what, int regex, dsk_rng *r)
{
    int32_t *ids = malloc(GT_VOCAB * sizeof *ids);
    assert_non_null(ids);
    for (int rep = 0; rep < 2; rep++) {
        grammar *g;
        grammar_matcher *m;
        if (regex)
            assert_ok(grammar_from_regex(vocab, what, strlen(what), NULL, &g));
        else
            g = schema_grammar(what);
        assert_ok(grammar_matcher_new(g, &m));
        for (int step = 0; step < 5; step++) {
            brute_force(m, what); /* leaves the mask in mask */
            size_t n = gt_mask_ids(mask, grammar_mask_words(vocab), ids);
            int32_t pick = n ? ids[dsk_rng_below(r, n)] : -1;
            if (pick < 0 || pick == env.eos)
                break;
            assert_ok(grammar_accept_token(m, pick));
        }
        grammar_matcher_free(m);
        grammar_free(g);
    }
    free(ids);
}

static void test_text_masks_vs_brute_force(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, seed + 3);
    for (size_t i = 0; i < sizeof text_regexes / sizeof text_regexes[0]; i++)
        check_cold_walks(text_regexes[i], 1, &r);
    check_cold_walks(text_schema, 0, &r);
}

static void test_matcher_api(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"maxItems\": 2}");
    grammar_matcher *m, *c;
    assert_ok(grammar_matcher_new(g, &m));
    assert_int_equal(grammar_remaining(m), 2); /* "[]" */
    int32_t open = tok_id(tok, "["), one = tok_id(tok, "1"), close = tok_id(tok, "]"), quote = tok_id(tok, "\"");
    assert_true(open >= 0 && one >= 0 && close >= 0 && quote >= 0);
    /* a refused token leaves the matcher as it was */
    assert_int_equal(grammar_accept_token(m, quote), -1);
    assert_non_null(strstr(dsk_err_msg(), "not allowed"));
    assert_int_equal(grammar_accept_token(m, env.eos), -1);
    assert_ok(grammar_accept_token(m, open));
    assert_ok(grammar_matcher_clone(m, &c));
    assert_ok(grammar_accept_token(m, one));
    assert_int_equal(grammar_remaining(m), 1);
    /* the clone did not move; copying rolls m back */
    assert_ok(grammar_allowed(c, mask));
    assert_true(grammar_mask_has(mask, close) && grammar_mask_has(mask, one) && !grammar_mask_has(mask, env.eos));
    assert_ok(grammar_matcher_copy(m, c));
    assert_ok(grammar_allowed(m, mask2));
    assert_memory_equal(mask, mask2, grammar_mask_words(vocab) * sizeof *mask);
    assert_ok(grammar_accept_token(m, close));
    assert_true(grammar_is_accepting(m));
    assert_int_equal(grammar_remaining(m), 0);
    /* control tokens other than EOS, and ids the tokenizer lacks, are never allowed */
    assert_ok(grammar_allowed(m, mask));
    size_t n_allowed = 0;
    for (int32_t id = 0; id < GT_VOCAB; id++)
        n_allowed += grammar_mask_has(mask, id);
    assert_int_equal(n_allowed, 1);
    assert_true(grammar_mask_has(mask, env.eos));
    assert_int_equal(grammar_accept_token(m, tok_id(tok, "<｜User｜>")), -1);
    assert_int_equal(grammar_accept_token(m, GT_VOCAB - 1), -1);
    assert_int_equal(grammar_accept_token(m, GT_VOCAB), -1);
    assert_ok(grammar_accept_token(m, env.eos));
    assert_true(grammar_is_finished(m) && !grammar_is_accepting(m));
    assert_ok(grammar_allowed(m, mask));
    for (size_t w = 0; w < grammar_mask_words(vocab); w++)
        assert_int_equal(mask[w], 0);
    assert_int_equal(grammar_accept_token(m, env.eos), -1);
    grammar *other = schema_grammar("{\"type\": \"null\"}");
    grammar_matcher *o;
    assert_ok(grammar_matcher_new(other, &o));
    assert_int_equal(grammar_matcher_copy(o, m), -1);
    grammar_matcher_free(o);
    grammar_free(other);
    grammar_matcher_free(c);
    grammar_matcher_free(m);
    grammar_free(g);
    /* vocabulary arguments */
    grammar_vocab *v;
    assert_int_equal(grammar_vocab_new(tok, 1000, 1, &v), -1);
    assert_int_equal(grammar_vocab_new(tok, GT_VOCAB, GT_VOCAB, &v), -1);
    assert_int_equal(grammar_mask_words(vocab), (GT_VOCAB + 31) / 32);
}

/* Walk outputs of the JSON grammars parse as JSON of the right kind. */
static void test_walks_parse(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, seed + 1);
    for (size_t i = 0; i < sizeof walk_schemas / sizeof walk_schemas[0]; i++) {
        grammar *g = schema_grammar(walk_schemas[i]);
        for (int k = 0; k < 6; k++) {
            grammar_matcher *m;
            assert_ok(grammar_matcher_new(g, &m));
            grammar_walk w = {0};
            if (grammar_random_walk(&env, m, &r, 120, 0, &w))
                fail_msg("walk %zu.%d: %s", i, k, dsk_err_msg());
            json_error_t e;
            json_t *j = json_loadb(w.text.data, w.text.len, JSON_DECODE_ANY, &e);
            if (!j)
                fail_msg("walk %zu.%d output is not JSON (%s): %.*s", i, k, e.text, (int)w.text.len, w.text.data);
            if (i == 0 || i == 1 || i == 3)
                assert_true(json_is_object(j));
            json_decref(j);
            assert_true(w.finished && grammar_is_finished(m));
            grammar_matcher_free(m);
            grammar_walk_free(&w);
        }
        grammar_free(g);
    }
}



/* Every walk of the tools grammar parses back into 1..max_calls calls of offered tools whose
 * arguments are JSON objects holding the required parameters. */
static void check_tool_walks(const grammar *g, const char *force, int max_calls, dsk_rng *r)
{
    for (int k = 0; k < 6; k++) {
        grammar_matcher *m;
        assert_ok(grammar_matcher_new(g, &m));
        grammar_walk w = {0};
        if (grammar_random_walk(&env, m, r, 150, 0, &w))
            fail_msg("tool walk: %s", dsk_err_msg());
        dsml_parser p;
        assert_ok(dsml_parse(w.text.data, w.text.len, 0, &p));
        if (!p.n_calls)
            fail_msg("no tool call parsed from: %.*s", (int)w.text.len, w.text.data);
        assert_true(p.n_calls <= (size_t)(max_calls ? max_calls : 1000));
        assert_int_equal(p.content.len, 0);
        for (size_t i = 0; i < p.n_calls; i++) {
            const char *name = p.calls[i].name;
            assert_true(!force || !strcmp(name, force));
            json_t *args = json_loads(p.calls[i].arguments, 0, NULL);
            assert_true(json_is_object(args));
            if (!strcmp(name, "get_weather"))
                assert_true(json_is_string(json_object_get(args, "city")));
            else if (!strcmp(name, "web::search"))
                assert_true(json_is_string(json_object_get(args, "q")));
            else if (!strcmp(name, "now"))
                assert_int_equal(json_object_size(args), 0);
            else
                fail_msg("unknown tool %s", name);
            json_decref(args);
        }
        dsml_parser_free(&p);
        grammar_matcher_free(m);
        grammar_walk_free(&w);
    }
}

static void test_tools(void **state)
{
    (void)state;
    json_t *tools = json_loads(tools_json, 0, NULL);
    assert_non_null(tools);
    dsk_rng r;
    dsk_rng_seed(&r, seed + 2);
    grammar *g;
    assert_ok(grammar_from_tools(vocab, tools, NULL, 3, NULL, &g));
    check_tool_walks(g, NULL, 3, &r);
    /* what the renderer writes for a history call is in the language (parameters in declared order:
     * the grammar keeps the schema's order) */
    json_t *calls = json_loads("[{\"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": "
                               "\\\"Paris <3\\\", \\\"days\\\": 3}\"}}, {\"namespace\": \"web\", \"function\": "
                               "{\"name\": \"search\", \"arguments\": {\"q\": \"a\\nb\", \"filters\": [{\"k\": "
                               "\"x\", \"v\": [1, null]}], \"limit\": \"all\"}}}]", 0, NULL);
    dsml_prompt pr = {0};
    assert_ok(dsml_render_calls(&pr, calls, "calls"));
    tok_ids ids = {0};
    assert_ok(tok_encode_append(tok, pr.text.data, pr.text.len, TOK_SPECIAL, &ids));
    grammar_matcher *m;
    assert_ok(grammar_matcher_new(g, &m));
    for (size_t i = 0; i < ids.len; i++)
        if (grammar_accept_token(m, ids.data[i]))
            fail_msg("rendered call refused at token %zu: %s\n%.*s", i, dsk_err_msg(), (int)pr.text.len, pr.text.data);
    assert_true(grammar_is_accepting(m));
    grammar_matcher_free(m);
    /* the marker's text spelled out is not the marker */
    assert_ok(grammar_matcher_new(g, &m));
    tok_ids plain = {0};
    assert_ok(tok_encode_append(tok, "\n\n<｜DSML｜", strlen("\n\n<｜DSML｜"), 0, &plain));
    int all = 1;
    for (size_t i = 0; i < plain.len && all; i++)
        all = grammar_accept_token(m, plain.data[i]) == 0;
    assert_false(all);
    grammar_matcher_free(m);
    tok_ids_free(&plain);
    tok_ids_free(&ids);
    dsml_prompt_free(&pr);
    json_decref(calls);
    grammar_free(g);
    /* one forced function, any number of calls */
    assert_ok(grammar_from_tools(vocab, tools, "web::search", 0, NULL, &g));
    check_tool_walks(g, "web::search", 0, &r);
    grammar_free(g);
    assert_int_equal(grammar_from_tools(vocab, tools, "missing", 1, NULL, &g), -1);
    assert_non_null(strstr(dsk_err_msg(), "missing"));
    json_t *bad = json_loads("[{\"function\": {\"name\": \"f\", \"parameters\": {\"anyOf\": []}}}]", 0, NULL);
    assert_int_equal(grammar_from_tools(vocab, bad, NULL, 1, NULL, &g), -1);
    assert_non_null(strstr(dsk_err_msg(), "anyOf"));
    json_decref(bad);
    json_decref(tools);
}

typedef struct {
    const grammar *g;
    const char *text;
    uint32_t *mask;
    int rc;
} thread_job;

/* Advance along text, building every mask on the way (into the shared, lazily filled cache). */
static void *mask_thread(void *arg)
{
    thread_job *j = arg;
    grammar_matcher *m;
    j->rc = -1;
    if (grammar_matcher_new(j->g, &m))
        return NULL;
    tok_ids ids = {0};
    if (tok_encode_append(tok, j->text, strlen(j->text), 0, &ids))
        return NULL;
    for (size_t i = 0; i < ids.len; i++)
        if (grammar_allowed(m, j->mask) || grammar_accept_token(m, ids.data[i]))
            goto out;
    j->rc = grammar_allowed(m, j->mask);
out:
    tok_ids_free(&ids);
    grammar_matcher_free(m);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    const char *text = "{\"name\": \"Ada Lovelace\", \"age\": 36, \"tags\": [\"a\", \"c\"";
    thread_job jobs[4];
    pthread_t th[4];
    grammar *g = schema_grammar(walk_schemas[0]);
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){g, text, malloc(grammar_mask_words(vocab) * sizeof(uint32_t)), 0};
        assert_non_null(jobs[i].mask);
        assert_int_equal(pthread_create(&th[i], NULL, mask_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    grammar *fresh = schema_grammar(walk_schemas[0]);
    thread_job alone = {fresh, text, mask, 0};
    mask_thread(&alone);
    assert_ok(alone.rc);
    for (int i = 0; i < 4; i++) {
        assert_ok(jobs[i].rc);
        assert_memory_equal(jobs[i].mask, mask, grammar_mask_words(vocab) * sizeof *mask);
        free(jobs[i].mask);
    }
    grammar_free(fresh);
    grammar_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_vs_brute_force), cmocka_unit_test(test_text_masks_vs_brute_force),
        cmocka_unit_test(test_matcher_api),
        cmocka_unit_test(test_walks_parse),          cmocka_unit_test(test_tools),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
