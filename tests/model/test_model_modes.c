/* The CPU model's exactness across modes (docs/model.md "Modes"): the same tokens give the same logits
 * bits one-shot, chunked, token by token and inside verify windows with rollback; drafted generation
 * equals serial generation, greedy and seeded. Lengths are random each run (the seed is printed). */
#include "tests/model/model_test_util.h"

#include "runtime/common/rng.h"
#include "runtime/engine/generate.h"
#include "runtime/ref/sampling.h"

#include <math.h>
#include <string.h>
#include <time.h>

static cpu_model *M;
static engine *E; /* the same checkpoint behind the engine interface */
static dsk_rng R;
static uint64_t run_seed;

static int setup(void **state)
{
    (void)state;
    run_seed = ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16)) % 1000003u;
    printf("model modes test: seed %" PRIu64 "\n", run_seed);
    dsk_rng_seed(&R, run_seed);
    M = model_test_make("tiny", 1 + run_seed % 97);
    E = M ? model_test_engine(1) : NULL;
    return E ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    engine_close(E);
    model_test_cleanup(M);
    return 0;
}

static int32_t *random_tokens(int n)
{
    int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)dsk_rng_below(&R, (uint64_t)M->cfg.vocab_size);
    return t;
}

/* Logits of every row of tokens, fed in chunks of the given sizes (sizes[k] rows, then the next). */
static float *run_chunks(const int32_t *tok, int n, const int *sizes)
{
    int V = M->cfg.vocab_size;
    float *lg = malloc(sizeof(float) * (size_t)n * V);
    cpu_seq *s;
    assert_ok(cpu_seq_new(M, 4096, &s));
    for (int done = 0, k = 0; done < n; k++) {
        int c = sizes[k] < n - done ? sizes[k] : n - done;
        assert_ok(cpu_forward(M, s, tok + done, c, 0, lg + (int64_t)done * V, NULL));
        s->len += c;
        done += c;
    }
    cpu_seq_free(s);
    return lg;
}

static void assert_rows_equal(const float *a, const float *b, int n, const char *what)
{
    int V = M->cfg.vocab_size;
    for (int i = 0; i < n; i++)
        if (memcmp(a + (int64_t)i * V, b + (int64_t)i * V, sizeof(float) * V))
            fail_msg("%s: row %d differs (seed %" PRIu64 ")", what, i, run_seed);
}

/* One-shot == token by token == random chunks, at a random odd length that wraps the 8-slot window
 * several times and leaves the indexer and candidates a strict subset. */
static void test_oneshot_chunked_serial(void **state)
{
    (void)state;
    int n = 33 + 2 * (int)dsk_rng_below(&R, 8);
    int32_t *tok = random_tokens(n);
    int all[1] = {n}, ones[64], rnd[64];
    for (int i = 0; i < 64; i++) {
        ones[i] = 1;
        rnd[i] = 1 + (int)dsk_rng_below(&R, 9);
    }
    float *a = run_chunks(tok, n, all);
    int V = M->cfg.vocab_size;
    for (int64_t i = 0; i < (int64_t)n * V; i++)
        if (!isfinite(a[i]))
            fail_msg("logit %lld is not finite", (long long)i);
    linear_set_threads(2); /* results never depend on the thread count */
    float *b = run_chunks(tok, n, ones);
    linear_set_threads(1);
    assert_rows_equal(a, b, n, "token by token (2 threads)");
    float *c = run_chunks(tok, n, rnd);
    assert_rows_equal(a, c, n, "random chunks");
    free(a);
    free(b);
    free(c);
    free(tok);
}

/* Many short random lengths (odd ones leave a ratio-2 remainder), each one-shot == random chunks. */
static void test_many_lengths(void **state)
{
    (void)state;
    for (int t = 0; t < 8; t++) {
        int n = 1 + (int)dsk_rng_below(&R, 24);
        int32_t *tok = random_tokens(n);
        int all[1] = {n}, rnd[32];
        for (int i = 0; i < 32; i++)
            rnd[i] = 1 + (int)dsk_rng_below(&R, 7);
        float *a = run_chunks(tok, n, all), *b = run_chunks(tok, n, rnd);
        assert_rows_equal(a, b, n, "random chunks, short length");
        free(a);
        free(b);
        free(tok);
    }
}

/* A longer context (20+ window wraps, ~100 ratio-2 and ~200 ratio-1 rows against top-4 and 3 candidate
 * blocks): prefill then decode gives the one-shot run's last rows. */
static void test_long_context(void **state)
{
    (void)state;
    int n = 180 + (int)dsk_rng_below(&R, 40), tail = 12, V = M->cfg.vocab_size;
    int32_t *tok = random_tokens(n);
    float *a = malloc(sizeof(float) * (size_t)tail * V), *b = malloc(sizeof(float) * (size_t)tail * V);
    cpu_seq *s;
    assert_ok(cpu_seq_new(M, 4096, &s));
    assert_ok(cpu_forward(M, s, tok, n, n - tail, a, NULL));
    cpu_seq_free(s);
    assert_ok(cpu_seq_new(M, 4096, &s));
    assert_ok(cpu_forward(M, s, tok, n - tail, n, NULL, NULL));
    s->len = n - tail;
    for (int i = 0; i < tail; i++) {
        assert_ok(cpu_forward(M, s, tok + n - tail + i, 1, 0, b + (int64_t)i * V, NULL));
        s->len++;
    }
    cpu_seq_free(s);
    assert_rows_equal(a, b, tail, "long context, prefill then decode");
    free(a);
    free(b);
    free(tok);
}

/* Verify windows of up to 6 rows with rollback to a random accepted length: every committed row's
 * logits equal the one-shot run's. Rejected rows are fed garbage tokens, as wrong drafts would be. */
static void test_verify_rollback(void **state)
{
    (void)state;
    int n = 30 + (int)dsk_rng_below(&R, 12), V = M->cfg.vocab_size;
    int32_t *tok = random_tokens(n);
    int all[1] = {n};
    float *want = run_chunks(tok, n, all);
    float *lg = malloc(sizeof(float) * 6 * (size_t)V);
    cpu_seq *s;
    assert_ok(cpu_seq_new(M, 4096, &s));
    int rounds = 0;
    while (s->len < n) {
        int w = 1 + (int)dsk_rng_below(&R, 6), left = n - (int)s->len;
        int acc = 1 + (int)dsk_rng_below(&R, (uint64_t)(w < left ? w : left));
        int32_t rows[6];
        for (int j = 0; j < w; j++)
            rows[j] = j < acc ? tok[s->len + j] : (int32_t)dsk_rng_below(&R, (uint64_t)V);
        assert_ok(cpu_forward(M, s, rows, w, 0, lg, NULL));
        assert_rows_equal(want + s->len * V, lg, acc, "verify window");
        s->len += acc;
        rounds++;
    }
    assert_true(rounds >= 5);
    cpu_seq_free(s);
    free(lg);
    free(want);
    free(tok);
}

static void generate(const int32_t *prompt, int n, float temp, int draft, int32_t *out, gen_stats *st)
{
    gen_opts o = {.max_tokens = 24, .sp = {.temperature = temp, .top_p = 1.0f, .seed = 1234 + run_seed},
                  .draft = draft};
    assert_ok(engine_generate(E, prompt, n, &o, out, st));
    assert_int_equal(st->n_out, 24);
}

/* Drafting never changes the output: greedy and seeded sampling. */
static void test_drafted_equals_serial(void **state)
{
    (void)state;
    int n = 9 + (int)dsk_rng_below(&R, 20);
    int32_t *prompt = random_tokens(n);
    for (int k = 0; k < 2; k++) {
        float temp = k ? 0.8f : 0.0f;
        int32_t a[24], b[24];
        gen_stats sa, sb;
        generate(prompt, n, temp, 0, a, &sa);
        generate(prompt, n, temp, 1, b, &sb);
        assert_memory_equal(a, b, sizeof a);
        assert_true(sb.rounds > 0);
        printf("temperature %.1f: %d rounds, %d drafts accepted\n", temp, sb.rounds, sb.accepted);
    }
    free(prompt);
}

static int32_t argmax_sampler(const float *logits, int vocab, int64_t pos, void *ctx)
{
    (void)pos;
    (void)ctx;
    return sample_row(logits, vocab, &SAMPLE_GREEDY, 0, NULL);
}

/* The drafter's rings fed one-shot or position by position give the same drafts and confidences. */
static void test_draft_modes(void **state)
{
    (void)state;
    const model_config *c = &M->cfg;
    int n = 12 + (int)dsk_rng_below(&R, 12), tw = c->n_dspark_targets * c->dim, B = c->dspark_block_size;
    int32_t *tok = random_tokens(n + 1), d[2][8];
    float conf[2][8];
    uint16_t *taps = malloc(sizeof(uint16_t) * (size_t)n * tw);
    for (int k = 0; k < 2; k++) {
        cpu_seq *s;
        assert_ok(cpu_seq_new(M, 4096, &s));
        for (int i = 0; i < n;) {
            int step = k ? 1 : n;
            assert_ok(cpu_forward(M, s, tok + i, step, step, NULL, taps));
            s->len += step;
            assert_ok(cpu_draft_feed(M, s, taps, step));
            i += step;
        }
        assert_ok(cpu_draft(M, s, tok[n], argmax_sampler, NULL, d[k], conf[k]));
        for (int i = 0; i < B; i++)
            assert_true(isfinite(conf[k][i]) && d[k][i] >= 0 && d[k][i] < c->vocab_size);
        cpu_seq_free(s);
    }
    assert_memory_equal(d[0], d[1], sizeof(int32_t) * B);
    assert_memory_equal(conf[0], conf[1], sizeof(float) * B);
    free(taps);
    free(tok);
}

/* Routing spreads over the experts (random weights route everywhere; a stuck router would not). */
static void test_routing_spread(void **state)
{
    (void)state;
    const model_config *c = &M->cfg;
    M->expert_hits = calloc((size_t)c->n_all_layers * 4096, sizeof(uint32_t));
    int n = 48;
    int32_t *tok = random_tokens(n);
    cpu_seq *s;
    assert_ok(cpu_seq_new(M, 4096, &s));
    assert_ok(cpu_forward(M, s, tok, n, n, NULL, NULL));
    for (int l = 0; l < c->n_layers; l++) {
        int used = 0;
        for (int e = 0; e < c->n_routed_experts; e++)
            used += M->expert_hits[l * 4096 + e] > 0;
        if (used < c->n_routed_experts - 2)
            fail_msg("layer %d routes to only %d of %d experts", l, used, c->n_routed_experts);
    }
    free(M->expert_hits);
    M->expert_hits = NULL;
    cpu_seq_free(s);
    free(tok);
}

/* The context limit is a clear refusal that leaves the state untouched. */
static void test_context_limit(void **state)
{
    (void)state;
    cpu_seq *s;
    assert_ok(cpu_seq_new(M, 16, &s));
    int32_t *tok = random_tokens(17);
    assert_int_equal(cpu_forward(M, s, tok, 17, 16, NULL, NULL), -1);
    assert_non_null(strstr(dsk_err_msg(), "context limit"));
    assert_ok(cpu_forward(M, s, tok, 16, 16, NULL, NULL));
    s->len = 16;
    assert_int_equal(cpu_forward(M, s, tok, 1, 0, NULL, NULL), -1);
    cpu_seq_free(s);
    free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oneshot_chunked_serial),
        cmocka_unit_test(test_many_lengths),
        cmocka_unit_test(test_long_context),
        cmocka_unit_test(test_verify_rollback),
        cmocka_unit_test(test_drafted_equals_serial),
        cmocka_unit_test(test_draft_modes),
        cmocka_unit_test(test_routing_spread),
        cmocka_unit_test(test_context_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
