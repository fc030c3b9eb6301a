/* Structured output's compilers on any bytes: the first byte picks JSON Schema (the rest is the schema's
 * JSON), regex (the rest is the pattern) or DSML tools (the rest is an OpenAI tools array). A compile
 * either refuses, naming what, or gives a grammar within its state bound whose matcher never dead-ends:
 * walking it, every step's mask is non-empty until EOS is accepted (every byte has a token, so any
 * prefix of a sentence can be continued), and every allowed token is accepted. The walk takes the
 * allowed id that grammar_remaining says leads soonest to the end, for at most 24 tokens. The
 * tokenizer is the model's, as mkmodel writes it (with the V4.1 control tokens DSML needs). */
#include "tests/fuzz/fuzz_common.h"
#include "tests/grammar/grammar_test_util.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static const grammar_vocab *vocab(void)
{
    static grammar_vocab *v;
    static dsk_tokenizer *tok;
    if (!v) {
        char dir[64];
        snprintf(dir, sizeof dir, "/tmp/dskit-fuzz-grammar-XXXXXX");
        if (!mkdtemp(dir) || gt_load_tokenizer(DSKIT_SOURCE_DIR, dir, &tok) ||
            grammar_vocab_new(tok, GT_VOCAB, tok_eos(tok), &v)) {
            fprintf(stderr, "%s\n", dsk_err_msg());
            abort();
        }
    }
    return v;
}

static grammar *compile(const grammar_vocab *v, const uint8_t *data, size_t size)
{
    grammar_options opt = grammar_options_default();
    opt.max_states = 20000; /* a smaller bound than serving's: more inputs per second reach the walk */
    grammar *g = NULL;
    int kind = data[0] % 3;
    if (kind == 1) {
        if (grammar_from_regex(v, (const char *)data + 1, size - 1, &opt, &g))
            return NULL;
    } else {
        json_error_t jerr;
        json_t *j = json_loadb((const char *)data + 1, size - 1, 0, &jerr);
        if (!j)
            return NULL;
        int rc = kind == 0 ? grammar_from_schema(v, j, &opt, &g) : grammar_from_tools(v, j, NULL, 2, &opt, &g);
        json_decref(j);
        if (rc)
            return NULL;
    }
    return g;
}

/* libFuzzer calls this once before any input: the vocabulary's seconds of building are not counted
 * against the first input's timeout (replay.c builds it on first use instead) */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    vocab();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const grammar_vocab *v = vocab();
    grammar *g = compile(v, data, size);
    if (!g)
        return 0;
    FUZZ_CHECK(grammar_state_count(g) <= 20000);
    grammar_matcher *m;
    FUZZ_CHECK(grammar_matcher_new(g, &m) == 0);
    size_t words = grammar_mask_words(v);
    uint32_t *mask = calloc(words, sizeof *mask);
    int32_t *ids = calloc(words * 32, sizeof *ids);
    FUZZ_CHECK(mask && ids);
    for (int step = 0; step < 24 && !grammar_is_finished(m); step++) {
        FUZZ_CHECK(grammar_allowed(m, mask) == 0);
        size_t n = gt_mask_ids(mask, words, ids);
        FUZZ_CHECK(n > 0);
        /* the allowed id whose continuation is shortest: a clone tells, at most 64 tried */
        int32_t best = ids[0];
        uint32_t best_left = UINT32_MAX;
        for (size_t i = 0; i < n && i < 64; i++) {
            grammar_matcher *c;
            FUZZ_CHECK(grammar_matcher_clone(m, &c) == 0);
            FUZZ_CHECK(grammar_accept_token(c, ids[i]) == 0);
            uint32_t left = grammar_is_finished(c) ? 0 : grammar_remaining(c);
            if (left < best_left)
                best_left = left, best = ids[i];
            grammar_matcher_free(c);
        }
        FUZZ_CHECK(grammar_accept_token(m, best) == 0);
    }
    free(mask);
    free(ids);
    grammar_matcher_free(m);
    grammar_free(g);
    return 0;
}
