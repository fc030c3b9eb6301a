/* A golden run that guards against silent changes: the tiny synthetic checkpoint of a fixed seed, fixed
 * prompt ids, seeded sampling, through the engine (cpu backend); the generated ids and the xxh3-64 of
 * every logits row that chose a token are committed below. A deliberate numerics change regenerates them
 * (say so in the commit message): the test prints the new values when they differ. The same run checks
 * that all logits are finite. */
#include "tests/model/model_test_util.h"

#include "runtime/common/util.h"
#include "runtime/engine/generate.h"

#include <math.h>
#include <sys/wait.h>
#include <string.h>

#define GOLDEN_N 16
static const int32_t golden_ids[GOLDEN_N] = {81259, 119548, 100451, 103323, 14646, 118946, 30767, 70426,
                                              12048, 12922, 82655, 40208, 86707, 82887, 61898, 25285};
static const uint64_t golden_logits_xxh64 = 0xb041b1a55dc67076ull;

static cpu_model *M;
static engine *E;

static int setup(void **state)
{
    (void)state;
    M = model_test_make("tiny", 20261129);
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

static void run(int draft, int32_t *out, float **dump, size_t *dump_len)
{
    static const int32_t prompt[20] = {0,     1042, 77,   128799, 5000, 313, 99, 64000, 12, 2,
                                       40000, 7,    1042, 77,     8191, 3,   65, 129279, 0,  500};
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    gen_opts o = {.max_tokens = GOLDEN_N, .sp = {.temperature = 0.7f, .top_p = 1.0f, .seed = 11}, .draft = draft,
                  .dump_logits = f};
    gen_stats st;
    assert_ok(engine_generate(E, prompt, 20, &o, out, &st));
    assert_int_equal(st.n_out, GOLDEN_N);
    fclose(f);
    *dump = (float *)(void *)buf;
    *dump_len = len;
}

static void test_golden(void **state)
{
    (void)state;
    const model_config *c = &M->cfg;
    int32_t ids[GOLDEN_N], ids_draft[GOLDEN_N];
    float *dump, *dump_draft;
    size_t len, len_draft;
    run(0, ids, &dump, &len);
    assert_int_equal(len, sizeof(float) * (size_t)GOLDEN_N * c->vocab_size);
    for (size_t i = 0; i < len / sizeof(float); i++)
        if (!isfinite(dump[i]))
            fail_msg("logit %zu is not finite", i);
    uint64_t h = dsk_xxh64(dump, len);
    /* drafting changes nothing, logits included */
    run(1, ids_draft, &dump_draft, &len_draft);
    assert_memory_equal(ids, ids_draft, sizeof ids);
    assert_int_equal(len, len_draft);
    assert_memory_equal(dump, dump_draft, len);
    if (memcmp(ids, golden_ids, sizeof ids) || h != golden_logits_xxh64) {
        printf("golden run differs; new values:\nstatic const int32_t golden_ids[GOLDEN_N] = {");
        for (int i = 0; i < GOLDEN_N; i++)
            printf("%s%d", i ? ", " : "", ids[i]);
        printf("};\nstatic const uint64_t golden_logits_xxh64 = 0x%016llxull;\n", (unsigned long long)h);
        fail_msg("the golden output changed");
    }
    free(dump);
    free(dump_draft);
}

/* Run the dskit program; stdout into out (NUL-terminated), returns the exit status. */
static int run_dskit(const char *args, char *out, size_t cap)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s/dskit %s 2>/dev/null", test_binary_dir(), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* dskit run reproduces the golden run through the CLI: ids on stdout, the same logits dump, with and
 * without --draft; text prompts tokenize; a wrong backend is a usage error. */
static void test_cli(void **state)
{
    (void)state;
    char args[4096], out[4096], dump[1200];
    snprintf(dump, sizeof dump, "%s/logits.f32", model_test_root);
    for (int draft = 0; draft < 2; draft++) {
        snprintf(args, sizeof args,
                 "run --backend cpu --model %s/ckpt --prompt-ids \"0 1042 77 128799 5000 313 99 64000 12 2 40000 7 "
                 "1042 77 8191 3 65 129279 0 500\" --max-tokens 16 --temperature 0.7 --seed 11 --print-ids "
                 "--dump-logits %s%s",
                 model_test_root, dump, draft ? " --draft" : "");
        assert_int_equal(run_dskit(args, out, sizeof out), 0);
        char want[512] = "";
        for (int i = 0; i < GOLDEN_N; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", i ? " " : "", golden_ids[i]);
        strcat(want, "\n");
        assert_string_equal(out, want);
        char *data;
        size_t len;
        assert_ok(dsk_read_file(dump, &data, &len));
        assert_int_equal(len, sizeof(float) * (size_t)GOLDEN_N * M->cfg.vocab_size);
        assert_true(dsk_xxh64(data, len) == golden_logits_xxh64);
        free(data);
    }
    snprintf(args, sizeof args, "run --backend cpu --model %s/ckpt --prompt \"The capital of France\" --max-tokens 4",
             model_test_root);
    assert_int_equal(run_dskit(args, out, sizeof out), 0);
    assert_true(strlen(out) > 1);
    snprintf(args, sizeof args, "run --backend gpu --model %s/ckpt --prompt x", model_test_root);
    assert_int_equal(run_dskit(args, out, sizeof out), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_golden), cmocka_unit_test(test_cli)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
