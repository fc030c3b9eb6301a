/* The grammar compilers, by language membership: strings each grammar must accept or reject
 * (regex, choices, JSON Schema keyword by keyword), fed as real tokens with the mask checked against
 * accept_token at every step; then the refusals, which must name the keyword and its path, and the
 * size limits. */
#include "tests/common/test_util.h"
#include "tests/grammar/grammar_test_util.h"


static dsk_tokenizer *tok;
static grammar_vocab *vocab;
static uint32_t *mask;

static int setup(void **state)
{
    (void)state;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/grammar/tok_compile", test_binary_dir());
    if (gt_load_tokenizer(test_source_dir(), dir, &tok) || grammar_vocab_new(tok, GT_VOCAB, tok_eos(tok), &vocab)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        return -1;
    }
    mask = malloc(grammar_mask_words(vocab) * sizeof *mask);
    return mask ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    free(mask);
    grammar_vocab_free(vocab);
    tok_free(tok);
    return 0;
}

/* Feed text as tokens (control-token strings as their ids), checking at every step that the mask
 * bit equals whether accept_token takes the token. 1 if every token was taken. */
static int feed(grammar_matcher *m, const char *text, size_t len)
{
    tok_ids ids = {0};
    assert_ok(tok_encode_append(tok, text, len, TOK_SPECIAL, &ids));
    int ok = 1;
    for (size_t i = 0; i < ids.len && ok; i++) {
        assert_ok(grammar_allowed(m, mask));
        int bit = grammar_mask_has(mask, ids.data[i]);
        ok = grammar_accept_token(m, ids.data[i]) == 0;
        if (bit != ok)
            fail_msg("token %d (#%zu of \"%s\"): mask says %d, accept_token says %d", ids.data[i], i, text, bit, ok);
    }
    tok_ids_free(&ids);
    return ok;
}

/* Whether g's language holds text; the EOS bit must agree with grammar_is_accepting. */
static int accepts_n(const grammar *g, const char *text, size_t len)
{
    grammar_matcher *m;
    assert_ok(grammar_matcher_new(g, &m));
    int ok = feed(m, text, len);
    if (ok) {
        assert_ok(grammar_allowed(m, mask));
        assert_int_equal(grammar_mask_has(mask, tok_eos(tok)), grammar_is_accepting(m));
        ok = grammar_is_accepting(m);
    }
    grammar_matcher_free(m);
    return ok;
}

static int accepts(const grammar *g, const char *text)
{
    return accepts_n(g, text, strlen(text));
}

typedef struct {
    const char *text;
    int in;
} sample;

static void check_samples(const grammar *g, const char *what, const sample *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (accepts(g, s[i].text) != s[i].in)
            fail_msg("%s: \"%s\" should be %s", what, s[i].text, s[i].in ? "accepted" : "rejected");
}

static grammar *regex_grammar(const char *re)
{
    grammar *g;
    if (grammar_from_regex(vocab, re, strlen(re), NULL, &g))
        fail_msg("regex %s: %s", re, dsk_err_msg());
    return g;
}

static grammar *schema_grammar_opt(const char *json, const grammar_options *opt)
{
    json_error_t e;
    json_t *s = json_loads(json, JSON_DECODE_ANY, &e);
    if (!s)
        fail_msg("bad test schema %s: %s", json, e.text);
    grammar *g;
    if (grammar_from_schema(vocab, s, opt, &g))
        fail_msg("schema %s: %s", json, dsk_err_msg());
    json_decref(s);
    return g;
}

static grammar *schema_grammar(const char *json)
{
    return schema_grammar_opt(json, NULL);
}

#define CHECK(g, what, ...)                                                                        \
    do {                                                                                           \
        static const sample s_[] = {__VA_ARGS__};                                                  \
        check_samples(g, what, s_, sizeof s_ / sizeof s_[0]);                                      \
    } while (0)

static void test_regex_language(void **state)
{
    (void)state;
    static const struct {
        const char *re;
        sample s[6];
    } cases[] = {
        {"abc", {{"abc", 1}, {"ab", 0}, {"abcd", 0}, {"", 0}}},
        {"a|bc", {{"a", 1}, {"bc", 1}, {"b", 0}, {"abc", 0}}},
        {"[a-c]+x?", {{"abcx", 1}, {"cab", 1}, {"x", 0}, {"abxx", 0}}},
        {"\\d{3}-\\d{2,4}", {{"123-45", 1}, {"123-4567", 1}, {"123-4", 0}, {"123-45678", 0}, {"12a-45", 0}}},
        {"(ab)*c", {{"ababc", 1}, {"c", 1}, {"abc", 1}, {"aac", 0}}},
        {"[^a-z]", {{"Q", 1}, {"q", 0}, {"é", 1}, {"\n", 1}, {"ab", 0}}},
        {".", {{"\n", 0}, {"é", 1}, {"😀", 1}, {"x", 1}}},
        {"\\w+\\s\\S", {{"a_1 x", 1}, {"a_1\tx", 1}, {"é x", 0}, {"ab  x", 0}}},
        {"[\\W]", {{"!", 1}, {"é", 0}, {"a", 0}}}, /* a negated shorthand stays within ASCII */
        {"x{2,}", {{"xx", 1}, {"xxxxx", 1}, {"x", 0}}},
        {"a{,2}b", {{"b", 1}, {"aab", 1}, {"aaab", 0}}},
        {"a{", {{"a{", 1}, {"a", 0}}}, /* not a quantifier: a literal, as in Python */
        {"^ab$", {{"ab", 1}, {"abab", 0}}},
        {"(?:a|b)(?P<n>c)", {{"bc", 1}, {"ac", 1}, {"c", 0}}},
        {"\\u00e9\\x41\\.", {{"éA.", 1}, {"éAx", 0}}},
        {"[\\]-]+", {{"]-]", 1}, {"a", 0}}},
        {"[]a]", {{"]", 1}, {"a", 1}, {"b", 0}}},
        {"é+😀*", {{"éé", 1}, {"é😀😀", 1}, {"😀", 0}}},
        {"a*?b", {{"aab", 1}, {"b", 1}}},
        {"(a|)b", {{"b", 1}, {"ab", 1}}},
        {"\\$\\(x\\)", {{"$(x)", 1}}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        grammar *g = regex_grammar(cases[i].re);
        size_t n = 0;
        while (n < 6 && cases[i].s[n].text)
            n++;
        check_samples(g, cases[i].re, cases[i].s, n);
        grammar_free(g);
    }
}

static void expect_error(int rc, const char *what, const char *const *needles)
{
    if (!rc)
        fail_msg("%s: expected an error", what);
    for (; *needles; needles++)
        if (!strstr(dsk_err_msg(), *needles))
            fail_msg("%s: the error \"%s\" does not mention \"%s\"", what, dsk_err_msg(), *needles);
}

static void test_regex_errors(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"(a", "not closed"}, {"a)", "unmatched"}, {"*a", "nothing to repeat"}, {"a**", "repeated"},
        {"\\1", "\\1"}, {"(?=a)", "(?"}, {"\\bx", "\\b"}, {"[z-a]", "backwards"}, {"a{5,2}", "backwards"},
        {"a{2000}", "1000"}, {"a^b", "'^'"}, {"[a", "unterminated"}, {"\\p{L}", "\\p"}, {"a*+", "possessive"},
        {"[\\d-z]", "range"}, {"\\", "end"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        grammar *g = NULL;
        const char *needles[] = {bad[i][1], "regex", NULL};
        expect_error(grammar_from_regex(vocab, bad[i][0], strlen(bad[i][0]), NULL, &g), bad[i][0], needles);
        assert_null(g);
    }
}

static void test_choices(void **state)
{
    (void)state;
    const char *c[] = {"yes", "no", "maybe", "ye", "✓ done"};
    size_t lens[] = {3, 2, 5, 2, strlen("✓ done")};
    grammar *g;
    assert_ok(grammar_from_choices(vocab, c, lens, 5, &g));
    CHECK(g, "choices", {"yes", 1}, {"no", 1}, {"maybe", 1}, {"ye", 1}, {"✓ done", 1}, {"y", 0}, {"yesno", 0},
          {"", 0}, {"maybe ", 0});
    grammar_free(g);
    const char *e[] = {""};
    size_t el[] = {0};
    assert_ok(grammar_from_choices(vocab, e, el, 1, &g));
    assert_true(accepts(g, ""));
    grammar_free(g);
    assert_int_equal(grammar_from_choices(vocab, e, el, 0, &g), -1);
}

static void test_schema_numbers(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\": \"integer\", \"minimum\": -5, \"maximum\": 12}");
    CHECK(g, "integer -5..12", {"-5", 1}, {"12", 1}, {"0", 1}, {"7", 1}, {"13", 0}, {"-6", 0}, {"007", 0},
          {"1.0", 0}, {"-", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"integer\", \"exclusiveMinimum\": 0, \"exclusiveMaximum\": 100}");
    CHECK(g, "integer (0, 100)", {"0", 0}, {"1", 1}, {"99", 1}, {"100", 0}, {"-1", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"integer\", \"minimum\": 95, \"maximum\": 1234}");
    CHECK(g, "integer 95..1234", {"95", 1}, {"99", 1}, {"100", 1}, {"999", 1}, {"1000", 1}, {"1234", 1},
          {"1235", 0}, {"94", 0}, {"9", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"number\", \"minimum\": 0.5, \"maximum\": 2.25}");
    CHECK(g, "number 0.5..2.25", {"0.5", 1}, {"0.49", 0}, {"2.25", 1}, {"2.251", 0}, {"1", 1}, {"2.2500", 1},
          {"0.50001", 1}, {"2", 1}, {"3", 0}, {"0.5e1", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"number\", \"exclusiveMinimum\": -1.5, \"maximum\": 0}");
    CHECK(g, "number (-1.5, 0]", {"-1.5", 0}, {"-1.49", 1}, {"-1", 1}, {"0", 1}, {"0.1", 0}, {"-0.0", 1},
          {"-1.500", 0}, {"-1.5001", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"number\", \"exclusiveMaximum\": 0}");
    CHECK(g, "number < 0", {"0", 0}, {"-0.5", 1}, {"-7", 1}, {"-0.0", 0}, {"1", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"number\"}");
    CHECK(g, "number", {"1e5", 1}, {"-0.5E-3", 1}, {"01", 0}, {"1.", 0}, {".5", 0}, {"1e999", 0},
          {"123456789012345678", 1}, {"1234567890123456789", 0}, {"-0", 1});
    grammar_free(g);
}

static void test_schema_strings(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}");
    CHECK(g, "string 2..3", {"\"ab\"", 1}, {"\"a\"", 0}, {"\"abcd\"", 0}, {"\"é😀\"", 1}, {"\"a\\n\"", 1},
          {"\"\\\"\\\\\"", 1}, {"ab", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"string\"}");
    CHECK(g, "string", {"\"\"", 1}, {"\"\\ud83d\\ude00\"", 1}, {"\"\\ud83d\"", 0}, {"\"\\u0000\"", 0},
          {"\"\\u00e9x\"", 1}, {"\"a\nb\"", 0}, {"\"\\x\"", 0}, {"\"tab\\t\"", 1});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"string\", \"pattern\": \"^[a-z]+\\\\d$\"}");
    CHECK(g, "pattern anchored", {"\"abc1\"", 1}, {"\"abc\"", 0}, {"\"Abc1\"", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"string\", \"pattern\": \"o\\\"o\"}");
    CHECK(g, "pattern search", {"\"fo\\\"obar\"", 1}, {"\"o\\\"o\"", 1}, {"\"fobar\"", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"string\", \"pattern\": \"^a.c$\", \"maxLength\": 3}");
    CHECK(g, "pattern and length", {"\"abc\"", 1}, {"\"a\\nc\"", 0}, {"\"a\\\"c\"", 1});
    grammar_free(g);
    static const struct {
        const char *format;
        sample s[5];
    } formats[] = {
        {"date", {{"\"2024-02-28\"", 1}, {"\"2024-02-30\"", 0}, {"\"2024-13-01\"", 0}, {"\"0000-01-01\"", 0},
                  {"\"2024-04-31\"", 0}}},
        {"time", {{"\"23:59:59Z\"", 1}, {"\"12:00:00.123+05:30\"", 1}, {"\"24:00:00Z\"", 0}, {"\"12:00:00\"", 0}}},
        {"date-time", {{"\"2024-01-31T08:00:00-01:00\"", 1}, {"\"2024-01-31 08:00:00Z\"", 0}}},
        {"uuid", {{"\"123e4567-E89B-12d3-a456-426614174000\"", 1}, {"\"123e4567e89b12d3a456426614174000\"", 0}}},
        {"email", {{"\"a.b+c@mail.example.org\"", 1}, {"\"a@b\"", 0}, {"\"@x.org\"", 0}}},
        {"ipv4", {{"\"192.168.0.1\"", 1}, {"\"256.1.1.1\"", 0}, {"\"01.1.1.1\"", 0}, {"\"1.2.3\"", 0}}},
    };
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        char schema[128];
        snprintf(schema, sizeof schema, "{\"type\": \"string\", \"format\": \"%s\"}", formats[i].format);
        g = schema_grammar(schema);
        size_t n = 0;
        while (n < 5 && formats[i].s[n].text)
            n++;
        check_samples(g, formats[i].format, formats[i].s, n);
        grammar_free(g);
    }
}

static void test_schema_literals(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"enum\": [\"a\", 1, null, [1, {\"b\": true}], 2.5, \"｜\"]}");
    CHECK(g, "enum", {"\"a\"", 1}, {"1", 1}, {"null", 1}, {"[1,{\"b\":true}]", 1}, {"2.5", 1}, {"2", 0},
          {"\"b\"", 0}, {"\"｜\"", 1});
    grammar_free(g);
    g = schema_grammar("{\"const\": \"x\\\"y\\n\"}");
    CHECK(g, "const", {"\"x\\\"y\\n\"", 1}, {"\"x\"", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"integer\", \"enum\": [1, \"1\", 2.0, 2.5]}");
    CHECK(g, "enum filtered by type", {"1", 1}, {"\"1\"", 0}, {"2.0", 1}, {"2.5", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": [\"boolean\", \"null\"]}");
    CHECK(g, "type list", {"true", 1}, {"false", 1}, {"null", 1}, {"0", 0});
    grammar_free(g);
}

static void test_schema_objects(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, "
                                "\"b\": {\"type\": \"string\"}}, \"required\": [\"b\"]}");
    CHECK(g, "object", {"{\"b\":\"x\"}", 1}, {"{\"a\":1,\"b\":\"x\"}", 1}, {"{\"b\":\"x\",\"a\":1}", 0},
          {"{\"a\":1}", 0}, {"{}", 0}, {"{ \"b\" : \"x\" }", 1}, {"{\n  \"a\": 1,\n  \"b\": \"\"\n}", 1},
          {"{\"b\":\"x\",}", 0}, {"{\"b\":\"x\",\"c\":1}", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, "
                       "\"additionalProperties\": {\"type\": \"boolean\"}}");
    CHECK(g, "additional", {"{\"a\":1,\"z\":true}", 1}, {"{\"z\":true,\"y\":false}", 1}, {"{\"a\":1,\"a\":true}", 0},
          {"{\"zz\":1}", 0}, {"{}", 1}, {"{\"ab\":true}", 1});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"object\"}");
    CHECK(g, "any object", {"{\"k\":[1,{\"x\":null}],\"m\":\"s\",\"\":-2.5e3}", 1}, {"[]", 0}, {"{}", 1});
    grammar_free(g);
    g = schema_grammar("{\"properties\": {\"é\\\"\": {\"const\": 1}}, \"required\": [\"é\\\"\", \"extra\"], "
                       "\"additionalProperties\": true}");
    CHECK(g, "escaped key, required extra", {"{\"é\\\"\":1,\"extra\":[]}", 1}, {"{\"é\\\"\":1}", 0});
    grammar_free(g);
}

static void test_schema_arrays(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 2, "
                                "\"maxItems\": 3}");
    CHECK(g, "array 2..3", {"[1,2]", 1}, {"[1]", 0}, {"[1,2,3]", 1}, {"[1,2,3,4]", 0}, {"[ 1 , 2 ]", 1},
          {"[]", 0}, {"[1,\"a\"]", 0});
    grammar_free(g);
    g = schema_grammar("{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"items\": false}");
    CHECK(g, "tuple", {"[\"a\",1]", 1}, {"[\"a\"]", 1}, {"[]", 1}, {"[\"a\",1,2]", 0}, {"[1]", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"array\", \"prefixItems\": [{\"const\": 0}], \"items\": {\"type\": \"null\"}, "
                       "\"minItems\": 3}");
    CHECK(g, "prefix then items", {"[0,null,null]", 1}, {"[0,null,null,null]", 1}, {"[0,null]", 0},
          {"[null,null,null]", 0});
    grammar_free(g);
    g = schema_grammar("{\"type\": \"array\"}");
    CHECK(g, "any array", {"[]", 1}, {"[[[]],{},\"x\",1,true,null]", 1}, {"{}", 0});
    grammar_free(g);
}

static void test_schema_combinators(void **state)
{
    (void)state;
    grammar *g = schema_grammar("{\"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\", \"maxLength\": 1}]}");
    CHECK(g, "anyOf", {"5", 1}, {"\"a\"", 1}, {"\"ab\"", 0}, {"null", 0});
    grammar_free(g);
    g = schema_grammar("{\"oneOf\": [{\"type\": \"object\", \"properties\": {\"k\": {\"const\": \"a\"}, \"x\": "
                       "{\"type\": \"integer\"}}, \"required\": [\"k\"]}, {\"type\": \"object\", \"properties\": {\"k\": "
                       "{\"const\": \"b\"}, \"y\": {\"type\": \"boolean\"}}, \"required\": [\"k\", \"y\"]}]}");
    CHECK(g, "oneOf objects", {"{\"k\":\"a\",\"x\":3}", 1}, {"{\"k\":\"b\",\"y\":true}", 1},
          {"{\"k\":\"b\",\"x\":3}", 0}, {"{\"k\":\"a\",\"y\":true}", 0});
    grammar_free(g);
    g = schema_grammar("{\"$defs\": {\"n\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": \"integer\"}, "
                       "\"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/n\"}}}, \"required\": [\"v\"]}}, "
                       "\"allOf\": [{\"$ref\": \"#/$defs/n\"}]}");
    CHECK(g, "recursive $ref", {"{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}", 1},
          {"{\"v\":1,\"kids\":[{\"kids\":[]}]}", 0}, {"{\"v\":1,\"kids\":[]}", 1});
    grammar_free(g);
    /* the recursion bound: two levels down through the $ref, then only its scalar alternatives */
    grammar_options opt = grammar_options_default();
    opt.max_recursion = 2;
    g = schema_grammar_opt("{\"definitions\": {\"l\": {\"anyOf\": [{\"type\": \"null\"}, {\"type\": \"array\", \"items\": "
                           "{\"$ref\": \"#/definitions/l\"}}]}}, \"$ref\": \"#/definitions/l\"}", &opt);
    CHECK(g, "recursion bound", {"[[null]]", 1}, {"[[[null]]]", 1}, {"[[[]]]", 1}, {"[[[[]]]]", 0},
          {"[[[[null]]]]", 0}, {"[[],[]]", 1});
    grammar_free(g);
    g = schema_grammar("{\"anyOf\": [{\"$ref\": \"#\"}, {\"type\": \"string\"}], \"title\": \"loop\"}");
    CHECK(g, "self-reference through anyOf", {"\"x\"", 1}, {"1", 0});
    grammar_free(g);
}

static void test_whitespace_bound(void **state)
{
    (void)state;
    grammar_options opt = grammar_options_default();
    opt.max_ws = 3;
    grammar *g = schema_grammar_opt("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}", &opt);
    CHECK(g, "max_ws 3", {"[   ]", 1}, {"[    ]", 0}, {"[1 ,\n\t 2]", 1}, {"[1\n\n\n\n,2]", 0});
    grammar_free(g);
    opt.max_ws = 0;
    g = schema_grammar_opt("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}", &opt);
    CHECK(g, "max_ws 0", {"{\"a\":1}", 1}, {"{ \"a\":1}", 0}, {"{}", 1});
    grammar_free(g);
}

static void test_json_object(void **state)
{
    (void)state;
    grammar *g;
    assert_ok(grammar_from_json_object(vocab, NULL, &g));
    CHECK(g, "json_object", {"{\"a\":{\"b\":[1,2,{\"c\":\"d\"}]}}", 1}, {"[1]", 0}, {"\"x\"", 0}, {"{}", 1},
          {"{\"a\":1,}", 0}, {"{\"x\":[[[[[[[1]]]]]]]}", 1});
    grammar_free(g);
}

static void expect_schema_error(const char *json, const char *const *needles)
{
    json_t *s = json_loads(json, JSON_DECODE_ANY, NULL);
    assert_non_null(s);
    grammar *g = NULL;
    expect_error(grammar_from_schema(vocab, s, NULL, &g), json, needles);
    assert_null(g);
    json_decref(s);
}

static void test_schema_errors(void **state)
{
    (void)state;
    static const struct {
        const char *schema;
        const char *needles[3];
    } bad[] = {
        {"{\"properties\": {\"a\": {\"type\": \"array\", \"uniqueItems\": true}}}", {"\"uniqueItems\"", "#/properties/a"}},
        {"{\"type\": \"string\", \"format\": \"uri\"}", {"\"format\" uri", "#"}},
        {"{\"$ref\": \"http://example.com/s.json\"}", {"local"}},
        {"{\"$ref\": \"#/$defs/missing\"}", {"does not resolve", "#/$defs/missing"}},
        {"{\"allOf\": [{\"type\": \"string\"}, {\"maxLength\": 2}]}", {"allOf", "single"}},
        {"{\"type\": \"text\"}", {"text"}},
        {"{\"type\": \"object\", \"anyOf\": [{\"required\": [\"a\"]}]}", {"intersection", "\"type\""}},
        {"{\"items\": [{\"type\": \"string\"}]}", {"prefixItems"}},
        {"{\"type\": \"string\", \"minLength\": -1}", {"minLength"}},
        {"{\"patternProperties\": {\"^x\": {}}}", {"\"patternProperties\""}},
        {"{\"items\": {\"not\": {\"type\": \"null\"}}}", {"\"not\"", "#/items"}},
        {"{\"type\": \"string\", \"pattern\": \"(a\"}", {"pattern", "not closed"}},
        {"{\"enum\": [1], \"minimum\": 0}", {"minimum", "enum"}},
        {"{\"$defs\": {\"x\": {\"if\": true}}, \"$ref\": \"#/$defs/x\"}", {"\"if\"", "#/$defs/x"}},
        {"{\"properties\": {\"x\": {\"$ref\": \"#\"}}, \"required\": [\"x\"]}", {"no finite output"}},
        {"{\"type\": \"object\", \"properties\": {}, \"required\": [\"a\"], \"additionalProperties\": false}",
         {"required property \"a\""}},
        {"{\"type\": \"string\", \"minLength\": 100000}", {"minLength"}},
        {"[1]", {"must be an object"}},
        {"false", {"no finite output"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_schema_error(bad[i].schema, bad[i].needles);
}

/* Refusals of huge or explosive schemas stop at a limit, quickly. */
static void test_limits(void **state)
{
    (void)state;
    dsk_buf b = {0};
    assert_ok(dsk_buf_printf(&b, "{\"type\": \"object\", \"properties\": {"));
    for (int i = 0; i < 3000; i++)
        assert_ok(dsk_buf_printf(&b, "%s\"field_%d\": {\"type\": \"string\", \"maxLength\": 400}", i ? ", " : "", i));
    assert_ok(dsk_buf_printf(&b, "}}"));
    assert_ok(dsk_buf_append(&b, "", 1));
    const char *needles[] = {"max_states", NULL};
    double t0 = dsk_now();
    expect_schema_error(b.data, needles);
    double t_big = dsk_now() - t0;
    dsk_buf_free(&b);
    /* mutual recursion with two recursive members per level: the unrolled levels multiply */
    const char *explosive =
        "{\"$defs\": {\"a\": {\"type\": \"object\", \"properties\": {\"l\": {\"$ref\": \"#/$defs/b\"}, \"r\": {\"$ref\": "
        "\"#/$defs/b\"}, \"s\": {\"type\": \"string\", \"maxLength\": 300}}}, \"b\": {\"type\": \"array\", \"items\": "
        "{\"anyOf\": [{\"$ref\": \"#/$defs/a\"}, {\"type\": \"string\", \"format\": \"date-time\", \"maxLength\": 200}]}}}, "
        "\"$ref\": \"#/$defs/a\"}";
    grammar_options opt = grammar_options_default();
    opt.max_recursion = 32;
    opt.max_states = 20000;
    json_t *s = json_loads(explosive, 0, NULL);
    grammar *g = NULL;
    t0 = dsk_now();
    expect_error(grammar_from_schema(vocab, s, &opt, &g), "explosive recursion", needles);
    double t_rec = dsk_now() - t0;
    json_decref(s);
    /* not a benchmark: a generous bound that catches a refusal which would run away instead */
    printf("refused a 3000-property schema in %.2f s, a recursive one in %.2f s\n", t_big, t_rec);
    assert_true(t_big < 10 && t_rec < 10);
    assert_int_equal(grammar_from_json_object(vocab, &(grammar_options){.max_ws = 99, .max_recursion = 4,
                                                                       .max_states = 1000}, &g), -1);
    assert_non_null(strstr(dsk_err_msg(), "max_ws"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regex_language),   cmocka_unit_test(test_regex_errors),
        cmocka_unit_test(test_choices),          cmocka_unit_test(test_schema_numbers),
        cmocka_unit_test(test_schema_strings),   cmocka_unit_test(test_schema_literals),
        cmocka_unit_test(test_schema_objects),   cmocka_unit_test(test_schema_arrays),
        cmocka_unit_test(test_schema_combinators), cmocka_unit_test(test_whitespace_bound),
        cmocka_unit_test(test_json_object),      cmocka_unit_test(test_schema_errors),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
