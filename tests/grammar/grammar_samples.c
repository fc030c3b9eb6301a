/* grammar_samples CASES.json SEED: random walks over each case's grammar on the real vocabulary,
 * one JSON line per output on stdout: {"case": i, "text": "..."} (for tools also "calls": the
 * dsml_parse result). check_samples.py runs it and checks every line with a validator that is not
 * this code: Python's jsonschema for schemas, re.fullmatch for regexes, and both for tool calls.
 *
 * A case: {"kind": "schema" | "json_object" | "regex" | "choices" | "tools", "walks": N, plus "schema",
 * "regex", "choices", or "tools" / "force" / "max_calls"; optional "options": {"max_ws": ...}}. */
#include "runtime/tokenizer/dsml.h"
#include "tests/grammar/grammar_test_util.h"
#include "runtime/tokenizer/utf8.h"

static int compile_case(const grammar_vocab *v, const json_t *c, grammar **g)
{
    const char *kind = json_string_value(json_object_get(c, "kind"));
    grammar_options opt = grammar_options_default();
    const json_t *o = json_object_get(c, "options");
    if (json_object_get(o, "max_ws"))
        opt.max_ws = (int)json_integer_value(json_object_get(o, "max_ws"));
    if (json_object_get(o, "max_recursion"))
        opt.max_recursion = (int)json_integer_value(json_object_get(o, "max_recursion"));
    if (!kind)
        return dsk_err("a case needs a \"kind\"");
    if (!strcmp(kind, "schema"))
        return grammar_from_schema(v, json_object_get(c, "schema"), &opt, g);
    if (!strcmp(kind, "json_object"))
        return grammar_from_json_object(v, &opt, g);
    if (!strcmp(kind, "regex")) {
        const json_t *re = json_object_get(c, "regex");
        return grammar_from_regex(v, json_string_value(re), json_string_length(re), &opt, g);
    }
    if (!strcmp(kind, "choices")) {
        const json_t *ch = json_object_get(c, "choices");
        size_t n = json_array_size(ch);
        const char **s = calloc(n + 1, sizeof *s);
        size_t *len = calloc(n + 1, sizeof *len);
        if (!s || !len)
            return dsk_err("out of memory");
        for (size_t i = 0; i < n; i++) {
            s[i] = json_string_value(json_array_get(ch, i));
            len[i] = json_string_length(json_array_get(ch, i));
        }
        int rc = grammar_from_choices(v, s, len, n, g);
        free(s);
        free(len);
        return rc;
    }
    if (!strcmp(kind, "tools"))
        return grammar_from_tools(v, json_object_get(c, "tools"), json_string_value(json_object_get(c, "force")),
                                  (int)json_integer_value(json_object_get(c, "max_calls")), &opt, g);
    return dsk_err("unknown case kind %s", kind);
}

static int emit_sample(size_t i, const dsk_buf *text, const char *kind)
{
    if (!utf8_valid((const uint8_t *)text->data, text->len))
        return dsk_err("case %zu: the output is not valid UTF-8", i);
    json_t *line = json_pack("{s:I, s:s%}", "case", (json_int_t)i, "text", text->len ? text->data : "", text->len);
    if (!line)
        return dsk_err("case %zu: cannot build the output line", i);
    if (!strcmp(kind, "tools")) {
        dsml_parser p;
        json_t *calls = json_array();
        if (dsml_parse(text->data, text->len, 0, &p) || !calls) {
            json_decref(line);
            return -1;
        }
        for (size_t k = 0; k < p.n_calls; k++)
            json_array_append_new(calls, json_pack("{s:s, s:s}", "name", p.calls[k].name, "arguments",
                                                   p.calls[k].arguments));
        json_object_set_new(line, "calls", calls);
        json_object_set_new(line, "content", json_stringn(p.content.data ? p.content.data : "", p.content.len));
        dsml_parser_free(&p);
    }
    char *s = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(line);
    if (!s)
        return dsk_err("case %zu: cannot write the output line", i);
    printf("%s\n", s);
    free(s);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: grammar_samples CASES.json SEED\n");
        return 2;
    }
    const char *src = getenv("DSKIT_SOURCE_DIR"), *bin = getenv("DSKIT_BINARY_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tests/grammar/tok_samples", bin ? bin : "build");
    json_error_t e;
    json_t *cases = json_load_file(argv[1], 0, &e);
    dsk_tokenizer *tok = NULL;
    grammar_vocab *v = NULL;
    if (!cases) {
        fprintf(stderr, "%s: %s (line %d)\n", argv[1], e.text, e.line);
        return 2;
    }
    if (gt_load_tokenizer(src ? src : ".", dir, &tok) || grammar_vocab_new(tok, GT_VOCAB, tok_eos(tok), &v)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        return 2;
    }
    grammar_walk_env env;
    grammar_walk_env_init(&env, tok, v);
    dsk_rng r;
    dsk_rng_seed(&r, strtoull(argv[2], NULL, 10));
    int rc = 0;
    size_t i;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        grammar *g;
        if (compile_case(v, c, &g)) {
            fprintf(stderr, "case %zu: %s\n", i, dsk_err_msg());
            rc = 1;
            continue;
        }
        json_int_t walks = json_integer_value(json_object_get(c, "walks"));
        for (json_int_t k = 0; k < (walks ? walks : 8); k++) {
            grammar_matcher *m;
            grammar_walk w = {0};
            if (grammar_matcher_new(g, &m) || grammar_random_walk(&env, m, &r, 150, 0, &w) ||
                emit_sample(i, &w.text, json_string_value(json_object_get(c, "kind")))) {
                fprintf(stderr, "case %zu walk %lld: %s\n", i, (long long)k, dsk_err_msg());
                rc = 1;
            }
            grammar_matcher_free(m);
            grammar_walk_free(&w);
        }
        grammar_free(g);
    }
    grammar_vocab_free(v);
    tok_free(tok);
    json_decref(cases);
    return rc;
}
