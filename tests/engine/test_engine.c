/* The engine interface on the cpu backend (tiny preset): every call checked (positions, sequences,
 * context, pool, rollback window), rollbacks within the window exact and beyond it refused, rows of
 * several sequences in one step equal to each sequence alone, and draws that never leave the tokenizer's
 * ids or a row's allowed set. */
#include "tests/model/model_test_util.h"
#include "tests/engine/test_fill.h"

#include "runtime/common/rng.h"
#include "runtime/engine/generate.h"
#include "runtime/ref/sampling.h"
#include "runtime/tokenizer/tokenizer.h"

#include <string.h>
#include <time.h>

static cpu_model *M;
static engine *E;
static dsk_rng R;
static int V;

static int setup(void **state)
{
    (void)state;
    uint64_t seed = test_seed("engine test");
    dsk_rng_seed(&R, seed);
    M = model_test_make("tiny", 1);
    E = M ? model_test_engine(4) : NULL;
    if (!E)
        return -1;
    V = engine_get_info(E)->vocab;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    engine_close(E);
    model_test_cleanup(M);
    return 0;
}

static void random_tokens(int32_t *t, int n)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)dsk_rng_below(&R, (uint64_t)V);
}

/* Run tokens[0..n) of seq from its committed length in one step; every row samples greedily; logits of
 * every row to lg (n × V) when lg is set; commit all when commit is set. */
static int step_rows(int seq, const int32_t *tokens, int n, float *lg, int commit)
{
    engine_row *rows = calloc((size_t)n, sizeof *rows);
    int32_t *out = calloc((size_t)n, sizeof *out);
    int64_t len = engine_seq_len(E, seq);
    for (int i = 0; i < n; i++)
        rows[i] = (engine_row){.seq = seq, .token = tokens[i], .pos = len + i, .sample = 1, .sp = SAMPLE_GREEDY,
                               .top_logprobs = -1};
    engine_out eo = {.tokens = out, .logits = lg};
    int rc = engine_step(E, rows, n, &eo);
    if (!rc && commit)
        rc = engine_commit(E, seq, len + n);
    free(rows);
    free(out);
    return rc;
}

/* A rollback of up to max_rollback uncommitted rows leaves the sequence exactly as if they never ran;
 * one row more is refused, naming the window, and changes nothing. */
static void test_rollback_window(void **state)
{
    (void)state;
    const engine_info *in = engine_get_info(E);
    int W = in->cfg->window_size, spare = in->max_rollback, n0 = 3 * W + 5, tail = 12;
    assert_true(spare >= in->draft_block + 1);
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)(n0 + tail)), junk[64];
    random_tokens(prompt, n0 + tail);
    float *want = malloc(sizeof(float) * (size_t)tail * V), *got = malloc(sizeof(float) * (size_t)tail * V);
    int a, b;
    assert_ok(engine_seq_open(E, 0, 0, &a));
    assert_ok(step_rows(a, prompt, n0, NULL, 1));
    assert_ok(step_rows(a, prompt + n0, tail, want, 1));
    engine_seq_close(E, a);

    assert_ok(engine_seq_open(E, 0, 0, &b));
    assert_ok(step_rows(b, prompt, n0, NULL, 1));
    /* junk rows, all rolled back: exactly the window's spare */
    random_tokens(junk, spare);
    assert_ok(step_rows(b, junk, spare, NULL, 0));
    assert_ok(engine_commit(E, b, n0));
    assert_ok(step_rows(b, prompt + n0, tail, got, 1));
    assert_memory_equal(want, got, sizeof(float) * (size_t)tail * V);
    /* one row more than the spare: the rollback is refused and the sequence keeps the rows */
    random_tokens(junk, spare + 1);
    int64_t len = engine_seq_len(E, b);
    assert_ok(step_rows(b, junk, spare + 1, NULL, 0));
    assert_int_equal(engine_commit(E, b, len), -1);
    assert_non_null(strstr(dsk_err_msg(), "window"));
    assert_int_equal(engine_seq_len(E, b), len);
    /* so is a step over them: they must be committed first */
    assert_int_equal(step_rows(b, junk, 1, NULL, 0), -1);
    assert_non_null(strstr(dsk_err_msg(), "commit them first"));
    assert_ok(engine_commit(E, b, len + spare + 1));
    /* rolling back committed rows obeys the same window */
    assert_int_equal(engine_commit(E, b, len), -1);
    assert_ok(engine_commit(E, b, len + 1));
    engine_seq_close(E, b);
    free(prompt);
    free(want);
    free(got);
}

/* Rows of three sequences in one step give each the bits it gets alone (logits and draws). */
static void test_batched_equals_alone(void **state)
{
    (void)state;
    enum { S = 3, N0 = 20 };
    int32_t tok[S][N0 + 6];
    float *alone[S], *batched = malloc(sizeof(float) * (size_t)S * 6 * V);
    int lens[S] = {N0, N0 - 7, N0 - 13}, nrow[S] = {1, 6, 3};
    for (int s = 0; s < S; s++) {
        random_tokens(tok[s], N0 + 6);
        alone[s] = malloc(sizeof(float) * 6 * (size_t)V);
        int q;
        assert_ok(engine_seq_open(E, 0, 0, &q));
        assert_ok(step_rows(q, tok[s], lens[s], NULL, 1));
        assert_ok(step_rows(q, tok[s] + lens[s], nrow[s], alone[s], 0));
        engine_seq_close(E, q);
    }
    int seqs[S];
    engine_row rows[S * 6];
    int n = 0;
    for (int s = 0; s < S; s++) {
        assert_ok(engine_seq_open(E, 0, 0, &seqs[s]));
        assert_ok(step_rows(seqs[s], tok[s], lens[s], NULL, 1));
    }
    for (int s = 0; s < S; s++)
        for (int i = 0; i < nrow[s]; i++)
            rows[n++] = (engine_row){.seq = seqs[s], .token = tok[s][lens[s] + i], .pos = lens[s] + i, .sample = 1,
                                     .sp = SAMPLE_GREEDY, .top_logprobs = -1};
    int32_t out[S * 6];
    engine_out eo = {.tokens = out, .logits = batched};
    assert_ok(engine_step(E, rows, n, &eo));
    n = 0;
    for (int s = 0; s < S; s++) {
        assert_memory_equal(alone[s], batched + (int64_t)n * V, sizeof(float) * (size_t)nrow[s] * V);
        n += nrow[s];
        engine_seq_close(E, seqs[s]);
        free(alone[s]);
    }
    free(batched);
}

/* Every malformed call is refused with a message naming what is wrong, and changes nothing. */
static void test_refusals(void **state)
{
    (void)state;
    int32_t t[8];
    random_tokens(t, 8);
    int a;
    assert_ok(engine_seq_open(E, 8, 0, &a));
    engine_row r = {.seq = a, .token = t[0], .pos = 1, .sample = 1, .sp = SAMPLE_GREEDY, .top_logprobs = -1};
    assert_int_equal(engine_step(E, &r, 1, &(engine_out){0}), -1);
    assert_non_null(strstr(dsk_err_msg(), "continues at 0"));
    r.pos = 0;
    r.seq = a + 1;
    assert_int_equal(engine_step(E, &r, 1, &(engine_out){0}), -1);
    assert_non_null(strstr(dsk_err_msg(), "not open"));
    engine_row two[2] = {{.seq = a, .token = t[0], .pos = 0, .top_logprobs = -1},
                         {.seq = a, .token = t[1], .pos = 0, .top_logprobs = -1}};
    assert_int_equal(engine_step(E, two, 2, &(engine_out){0}), -1);
    r.seq = a;
    r.token = V;
    assert_int_equal(engine_step(E, &r, 1, &(engine_out){0}), -1);
    assert_non_null(strstr(dsk_err_msg(), "outside the vocabulary"));
    r.token = t[0];
    r.sp.top_p = 0.0f;
    r.sp.temperature = 1.0f;
    assert_int_equal(engine_step(E, &r, 1, &(engine_out){0}), -1);
    /* the context: 8 positions reserved */
    int32_t nine[9];
    random_tokens(nine, 9);
    assert_int_equal(step_rows(a, nine, 9, NULL, 1), -1);
    assert_non_null(strstr(dsk_err_msg(), "context limit"));
    assert_ok(step_rows(a, nine, 8, NULL, 1));
    assert_int_equal(step_rows(a, nine, 1, NULL, 1), -1);
    /* committing past what ran */
    assert_int_equal(engine_commit(E, a, 9), -1);
    /* drafting on a sequence not opened for it */
    engine_draft_req dr = {a, t[0], SAMPLE_GREEDY};
    int32_t d[64];
    assert_int_equal(engine_draft(E, &dr, 1, d, NULL), -1);
    assert_non_null(strstr(dsk_err_msg(), "not opened for drafting"));
    engine_seq_close(E, a);
    /* the sequence table: 4 at most */
    int s[5];
    for (int i = 0; i < 4; i++)
        assert_ok(engine_seq_open(E, 16, 0, &s[i]));
    assert_int_equal(engine_seq_open(E, 16, 0, &s[4]), -1);
    assert_non_null(strstr(dsk_err_msg(), "in use"));
    for (int i = 0; i < 4; i++)
        engine_seq_close(E, s[i]);
    assert_int_equal(engine_seq_open(E, engine_get_info(E)->context + 1, 0, &s[0]), -1);
}

/* What this build lacks is refused at open with a message naming it (the server prints it and exits). */
static void test_open_refusals(void **state)
{
    (void)state;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/ckpt", model_test_root);
    engine *e = NULL;
    /* (tp > 1 is not refused: it starts follower ranks, which a test program cannot be; tests/ranks) */
    engine_opts o = {.backend = "tpu", .model_dir = dir};
    assert_int_equal(engine_open(&o, &e), -1);
    assert_null(e);
    assert_non_null(strstr(dsk_err_msg(), "'tpu' is not available"));
    o = (engine_opts){.backend = "gpu", .model_dir = dir};
    assert_int_equal(engine_open(&o, &e), -1);
    assert_null(e);
    assert_non_null(strstr(dsk_err_msg(), "needs a kit"));
}

/* Draws stay within the tokenizer's ids and a row's allowed set; top_k = 1 and a vanishing top_p are the
 * argmax over the tokenizer's ids (the tiny vocabulary has rows the tokenizer lacks: an argmax over every
 * row lands on one of them now and then); log-probabilities are those of the logits. */
static void test_draws(void **state)
{
    (void)state;
    int n = 24, words = (V + 31) / 32;
    char path[1200];
    snprintf(path, sizeof path, "%s/ckpt/tokenizer.json", model_test_root);
    dsk_tokenizer *tok;
    assert_ok(tok_load(path, &tok));
    uint32_t *valid = calloc((size_t)words, sizeof(uint32_t));
    for (int id = 0; id < V; id++) {
        size_t len;
        if (tok_bytes(tok, id, &len))
            valid[id >> 5] |= 1u << (id & 31);
    }
    tok_free(tok);
    int32_t t[24];
    random_tokens(t, n);
    uint32_t *allow = calloc((size_t)words, sizeof(uint32_t));
    int picks[3] = {17, 4242, 100000};
    for (int i = 0; i < 3; i++)
        allow[picks[i] >> 5] |= 1u << (picks[i] & 31);
    float *lg = malloc(sizeof(float) * (size_t)n * V);
    int a;
    assert_ok(engine_seq_open(E, 0, 0, &a));
    engine_row rows[24];
    int32_t out[24], top_ids[24 * SAMPLE_MAX_TOP_LOGPROBS];
    float lp[24], top_lp[24 * SAMPLE_MAX_TOP_LOGPROBS];
    for (int i = 0; i < n; i++) {
        rows[i] = (engine_row){.seq = a, .token = t[i], .pos = i, .sample = 1, .top_logprobs = 5};
        switch (i % 4) {
        case 0: rows[i].sp = SAMPLE_GREEDY; break;
        case 1: rows[i].sp = (sample_params){1.0f, 1.0f, 1, 7}; break;
        case 2: rows[i].sp = (sample_params){0.9f, 1e-7f, 0, 7}; break;
        default: rows[i].sp = (sample_params){1.0f, 1.0f, 0, 7}; rows[i].allow = allow; break;
        }
    }
    engine_out eo = {.tokens = out, .logits = lg, .logprob = lp, .top_ids = top_ids, .top_lp = top_lp};
    assert_ok(engine_step(E, rows, n, &eo));
    for (int i = 0; i < n; i++) {
        const float *l = lg + (int64_t)i * V;
        int32_t am = sample_row(l, V, &SAMPLE_GREEDY, i + 1, valid);
        if (i % 4 < 3)
            assert_int_equal(out[i], am);
        else
            assert_true(out[i] == picks[0] || out[i] == picks[1] || out[i] == picks[2]);
        assert_int_equal(top_ids[i * SAMPLE_MAX_TOP_LOGPROBS], am);
        assert_true(lp[i] <= 0.0f && top_lp[i * SAMPLE_MAX_TOP_LOGPROBS] >= top_lp[i * SAMPLE_MAX_TOP_LOGPROBS + 4]);
    }
    /* an allowed set with no valid id is an error, not a draw */
    memset(allow, 0, sizeof(uint32_t) * (size_t)words);
    assert_ok(engine_commit(E, a, n));
    rows[0] = (engine_row){.seq = a, .token = t[0], .pos = n, .sample = 1, .sp = SAMPLE_GREEDY, .allow = allow,
                           .top_logprobs = -1};
    assert_int_equal(engine_step(E, rows, 1, &(engine_out){.tokens = out}), -1);
    assert_non_null(strstr(dsk_err_msg(), "no token may be drawn"));
    engine_seq_close(E, a);
    free(allow);
    free(valid);
    free(lg);
}

/* Masks written by the step's fill, beside the forward, give the draws the same masks given before the
 * step give; a fill that fails fails the step with its message, and the next step runs. */
static void test_fill_beside_forward(void **state)
{
    (void)state;
    enum { N = 12 };
    size_t words = (size_t)(V + 31) / 32;
    uint32_t *given = malloc(sizeof(uint32_t) * words * N), *filled = calloc(words * N, sizeof(uint32_t));
    for (size_t w = 0; w < words * N; w++)
        given[w] = (uint32_t)dsk_rng_u64(&R) & (uint32_t)dsk_rng_u64(&R); /* about a quarter of the ids */
    int32_t t[N], out_a[N], out_b[N];
    random_tokens(t, N);
    int a, b;
    assert_ok(engine_seq_open(E, 0, 0, &a));
    assert_ok(engine_seq_open(E, 0, 0, &b));
    engine_row ra[N], rb[N];
    for (int i = 0; i < N; i++) {
        ra[i] = (engine_row){.seq = a, .token = t[i], .pos = i, .sample = 1, .sp = {1.0f, 1.0f, 0, 99},
                             .allow = given + words * i, .top_logprobs = -1};
        rb[i] = ra[i];
        rb[i].seq = b;
        rb[i].allow = filled + words * i;
    }
    assert_ok(engine_step(E, ra, N, &(engine_out){.tokens = out_a}));
    /* a failing fill: one row of b, left uncommitted (within the rollback window) */
    fill_ctx f = {filled, given, words, 0, 1};
    engine_fill fill = {fill_copy, &f};
    assert_int_equal(engine_step_fill(E, rb, 1, &(engine_out){.tokens = out_b}, &fill), -1);
    assert_non_null(strstr(dsk_err_msg(), "the test's fill failed"));
    assert_int_equal(f.calls, 1);
    /* the rows again, the fill now writing every mask */
    f = (fill_ctx){filled, given, words * N, 0, 0};
    assert_ok(engine_step_fill(E, rb, N, &(engine_out){.tokens = out_b}, &fill));
    assert_int_equal(f.calls, 1);
    for (int i = 0; i < N; i++) {
        assert_int_equal(out_a[i], out_b[i]);
        assert_true(given[words * i + (size_t)(out_a[i] >> 5)] >> (out_a[i] & 31) & 1u);
    }
    engine_seq_close(E, a);
    engine_seq_close(E, b);
    free(given);
    free(filled);
}

/* The tiny preset's vocabulary has rows the tokenizer lacks (as the release does): a long greedy run
 * never draws one (an id with no bytes would stop `dskit run` mid-output). */
static void test_padded_vocab_never_drawn(void **state)
{
    (void)state;
    char path[1200];
    snprintf(path, sizeof path, "%s/ckpt/tokenizer.json", model_test_root);
    dsk_tokenizer *tok;
    assert_ok(tok_load(path, &tok));
    assert_true(engine_get_info(E)->n_valid < V);
    int32_t prompt[8], out[160];
    random_tokens(prompt, 8);
    gen_opts o = {.max_tokens = 160, .sp = SAMPLE_GREEDY};
    gen_stats st;
    assert_ok(engine_generate(E, prompt, 8, &o, out, &st));
    for (int i = 0; i < st.n_out; i++) {
        size_t len;
        if (!tok_bytes(tok, out[i], &len))
            fail_msg("token %d (id %d) is not in the tokenizer", i, out[i]);
    }
    tok_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollback_window),   cmocka_unit_test(test_batched_equals_alone),
        cmocka_unit_test(test_refusals),          cmocka_unit_test(test_draws),
        cmocka_unit_test(test_padded_vocab_never_drawn), cmocka_unit_test(test_open_refusals),
        cmocka_unit_test(test_fill_beside_forward),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
