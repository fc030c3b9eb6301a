/* `dskit bench grammar`: constrained decoding on the real vocabulary (docs/grammar.md). For schemas
 * of growing size, and the other grammar kinds: compile time (median of several fresh compiles) and
 * the time of each grammar_allowed call along random valid walks (runtime/grammar/walk.h). "cold"
 * walks run on a freshly compiled grammar, as one request would (every state's token set is built on
 * its first visit); "warm" walks run again on the same grammar, whose cache is then filled. --cpu
 * measures the thread's CPU time instead of the wall clock, for shared machines. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/grammar/grammar.h"
#include "runtime/grammar/walk.h"
#include "runtime/mkmodel/mkmodel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VOCAB 129280

/* A flat object of n properties cycling through common property kinds; every other one required. */
static json_t *flat_schema(int n)
{
    static const char *const kinds[] = {
        "{\"type\": \"string\", \"maxLength\": 40}",
        "{\"type\": \"integer\", \"minimum\": 0, \"maximum\": 100000}",
        "{\"type\": \"number\"}",
        "{\"type\": \"boolean\"}",
        "{\"enum\": [\"draft\", \"review\", \"published\", \"archived\"]}",
        "{\"type\": \"string\", \"format\": \"date\"}",
        "{\"type\": \"string\"}",
        "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"maxItems\": 5}",
        /* one element of two literals: clang's -Wstring-concatenation asks for the parentheses */
        ("{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\"}, \"y\": {\"type\": \"number\"}}, "
         "\"required\": [\"x\", \"y\"]}"),
        "{\"type\": \"string\", \"pattern\": \"^[A-Z]{2}[0-9]{4}$\"}",
        "{\"type\": [\"string\", \"null\"], \"maxLength\": 16}",
    };
    json_t *props = json_object(), *req = json_array();
    for (int i = 0; i < n && props && req; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s_%d", i % 3 ? "field" : "attr", i);
        json_object_set_new(props, name, json_loads(kinds[i % 11], 0, NULL));
        if (i % 2 == 0)
            json_array_append_new(req, json_string(name));
    }
    return json_pack("{s:s, s:o, s:o, s:b}", "type", "object", "properties", props, "required", req,
                     "additionalProperties", 0);
}

static const char tree_schema[] =
    "{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": "
    "24}, \"size\": {\"type\": \"integer\", \"minimum\": 0}, \"children\": {\"type\": \"array\", \"items\": {\"$ref\": "
    "\"#/$defs/node\"}, \"maxItems\": 4}}, \"required\": [\"name\", \"children\"], \"additionalProperties\": false}}, "
    "\"$ref\": \"#/$defs/node\"}";

static json_t *tools_array(int n)
{
    json_t *tools = json_array();
    for (int i = 0; i < n && tools; i++) {
        json_t *props = json_object(), *req = json_array();
        for (int k = 0; k < 3 + i % 4; k++) {
            char p[16];
            snprintf(p, sizeof p, "arg%d", k);
            static const char *const kinds[] = {"{\"type\": \"string\"}", "{\"type\": \"integer\", \"minimum\": 1}",
                                                "{\"enum\": [\"fast\", \"safe\"]}",
                                                "{\"type\": \"array\", \"items\": {\"type\": \"string\"}}"};
            json_object_set_new(props, p, json_loads(kinds[k % 4], 0, NULL));
            if (k < 2)
                json_array_append_new(req, json_string(p));
        }
        char name[32];
        snprintf(name, sizeof name, "tool_%d", i);
        json_array_append_new(tools, json_pack("{s:s, s:{s:s, s:{s:s, s:o, s:o}}}", "type", "function", "function",
                                               "name", name, "parameters", "type", "object", "properties", props,
                                               "required", req));
    }
    return tools;
}

typedef struct {
    const char *name;
    int kind; /* 0 schema, 1 json_object, 2 tools, 3 regex */
    json_t *json;
    const char *regex;
} bench_case;

static int compile(const grammar_vocab *v, const bench_case *c, grammar **g)
{
    switch (c->kind) {
    case 0:
        return grammar_from_schema(v, c->json, NULL, g);
    case 1:
        return grammar_from_json_object(v, NULL, g);
    case 2:
        return grammar_from_tools(v, c->json, NULL, 2, NULL, g);
    default:
        return grammar_from_regex(v, c->regex, strlen(c->regex), NULL, g);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

typedef struct {
    double *t;
    size_t n, cap;
} samples;

static int add_times(samples *s, const grammar_walk *w)
{
    if (s->n + w->n_times > s->cap) {
        size_t cap = (s->n + w->n_times) * 2;
        double *t = dsk_realloc(s->t, cap * sizeof *t);
        if (!t)
            return -1;
        s->t = t;
        s->cap = cap;
    }
    memcpy(s->t + s->n, w->mask_us, w->n_times * sizeof *w->mask_us);
    s->n += w->n_times;
    return 0;
}

/* Seconds on the wall clock, or of this thread's CPU time (--cpu: what a loaded machine does not
 * inflate much). */
static double clock_s(int clock)
{
    if (clock != GRAMMAR_WALK_CPU)
        return dsk_now();
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int run_case(const grammar_walk_env *env, const bench_case *c, int walks, int clock, dsk_rng *r)
{
    double comp[9];
    size_t states = 0;
    for (int i = 0; i < 9; i++) {
        grammar *g;
        double t0 = clock_s(clock);
        if (compile(env->v, c, &g))
            return dsk_err_ctx("%s", c->name);
        comp[i] = (clock_s(clock) - t0) * 1e3;
        states = grammar_state_count(g);
        grammar_free(g);
    }
    samples cold = {0}, warm = {0};
    size_t tokens = 0, memory = 0;
    int rc = -1;
    for (int k = 0; k < walks; k++) {
        grammar *g;
        if (compile(env->v, c, &g))
            goto out;
        for (int pass = 0; pass < 2; pass++) { /* a fresh grammar, then the same one again */
            grammar_matcher *m;
            grammar_walk w = {0};
            int bad = grammar_matcher_new(g, &m) || grammar_random_walk(env, m, r, 200, clock, &w) ||
                      add_times(pass ? &warm : &cold, &w);
            tokens += pass ? 0 : w.tokens;
            memory += pass ? 0 : grammar_memory(g);
            grammar_matcher_free(m);
            grammar_walk_free(&w);
            if (bad) {
                grammar_free(g);
                dsk_err_ctx("%s, walk %d", c->name, k);
                goto out;
            }
        }
        grammar_free(g);
    }
    double c50 = pct(cold.t, cold.n, 0.5), c99 = pct(cold.t, cold.n, 0.99), cmax = pct(cold.t, cold.n, 1);
    double w50 = pct(warm.t, warm.n, 0.5), w99 = pct(warm.t, warm.n, 0.99);
    printf("| %-24s | %7zu | %8.2f | %6.1f | %6.0f | %6.1f | %7.1f | %7.0f | %6.1f | %7.1f |\n", c->name, states,
           pct(comp, 9, 0.5), (double)memory / walks / (1 << 20), (double)tokens / walks, c50, c99, cmax, w50, w99);
    fflush(stdout);
    rc = 0;
out:
    free(cold.t);
    free(warm.t);
    return rc;
}

static int load_tokenizer(const char *path, dsk_tokenizer **tok)
{
    if (path)
        return tok_load(path, tok);
    /* the committed V3 tokenizer with the V4.1 control tokens, as mkmodel writes it */
    char dir[] = "/tmp/dskit-bench-grammar-XXXXXX", file[64];
    if (!mkdtemp(dir))
        return dsk_err_errno("mkdtemp");
    int n_added;
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    int rc = mkmodel_tokenizer("data/tokenizer/deepseek-v3-tokenizer.json", dir, VOCAB, 4096, &n_added) ||
             tok_load(file, tok);
    char cfg[80];
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    unlink(file);
    unlink(cfg);
    rmdir(dir);
    return rc ? dsk_err_ctx("building the tokenizer (run from the repository root, or pass --tokenizer)") : 0;
}

int bench_grammar(int argc, char **argv)
{
    const char *tok_path = NULL;
    long walks = 10, seed = 1;
    int clock = GRAMMAR_WALK_WALL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) {
            tok_path = argv[++i];
        } else if (!strcmp(argv[i], "--walks") && i + 1 < argc) {
            if (cli_parse_int("--walks", argv[++i], 1, 100000, &walks))
                return 2;
        } else if (!strcmp(argv[i], "--cpu")) {
            clock = GRAMMAR_WALK_CPU;
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            if (cli_parse_int("--seed", argv[++i], 0, 1L << 62, &seed))
                return 2;
        } else {
            fprintf(stderr, "usage: dskit bench grammar [--tokenizer FILE] [--walks N] [--seed S] [--cpu]\n");
            return 2;
        }
    }
    dsk_tokenizer *tok = NULL;
    grammar_vocab *v = NULL;
    double t0 = dsk_now();
    if (load_tokenizer(tok_path, &tok)) {
        fprintf(stderr, "dskit bench grammar: %s\n", dsk_err_msg());
        return 2;
    }
    double t1 = dsk_now();
    if (grammar_vocab_new(tok, VOCAB, tok_eos(tok), &v)) {
        fprintf(stderr, "dskit bench grammar: %s\n", dsk_err_msg());
        tok_free(tok);
        return 1;
    }
    printf("tokenizer %d ids, loaded in %.2f s; grammar vocabulary (model vocabulary %d) built in %.0f ms\n",
           tok_vocab_size(tok), t1 - t0, VOCAB, (dsk_now() - t1) * 1e3);
    printf("%ld walks per case (each: a cold walk on a fresh grammar, then a warm one); times as %s\n\n", walks,
           clock == GRAMMAR_WALK_CPU ? "thread CPU time" : "wall clock");
    grammar_walk_env env;
    grammar_walk_env_init(&env, tok, v);
    bench_case cases[] = {
        {"schema, 3 properties", 0, json_loads("{\"type\": \"object\", \"properties\": {\"name\": {\"type\": "
                                               "\"string\", \"maxLength\": 32}, \"age\": {\"type\": \"integer\", "
                                               "\"minimum\": 0, \"maximum\": 150}, \"email\": {\"type\": \"string\", "
                                               "\"format\": \"email\"}}, \"required\": [\"name\", \"age\"]}", 0, NULL),
         NULL},
        {"schema, 10 properties", 0, flat_schema(10), NULL},
        {"schema, 30 properties", 0, flat_schema(30), NULL},
        {"schema, 100 properties", 0, flat_schema(100), NULL},
        {"schema, 300 properties", 0, flat_schema(300), NULL},
        {"schema, recursive tree", 0, json_loads(tree_schema, 0, NULL), NULL},
        {"json_object", 1, NULL, NULL},
        {"DSML, 5 tools", 2, tools_array(5), NULL},
        {"DSML, 20 tools", 2, tools_array(20), NULL},
        {"regex", 3, NULL, "(?:[A-Z][a-z]+ ){1,3}\\(\\d{3}\\) \\d{3}-\\d{4}, [^\\n]{0,60}\\."},
    };
    printf("| case                     | states  | compile  | MiB    | tokens | cold   | cold    | cold    | warm   | warm    |\n");
    printf("|                          |         | ms (p50) | /walk  | /walk  | p50    | p99     | max     | p50    | p99     |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    dsk_rng r;
    dsk_rng_seed(&r, (uint64_t)seed);
    int rc = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if ((cases[i].kind == 0 || cases[i].kind == 2) && !cases[i].json) {
            fprintf(stderr, "dskit bench grammar: cannot build case %s\n", cases[i].name);
            rc = 1;
            break;
        }
        if (run_case(&env, &cases[i], (int)walks, clock, &r)) {
            fprintf(stderr, "dskit bench grammar: %s\n", dsk_err_msg());
            rc = 1;
            break;
        }
    }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        json_decref(cases[i].json);
    grammar_vocab_free(v);
    tok_free(tok);
    return rc;
}
