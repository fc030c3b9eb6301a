/* Engram placements through the engine (cpu backend, tiny preset): rows read from packed files with
 * libaio give bit-identical logits and tokens to rows from the mapped checkpoint, cold and with the
 * hot-row cache warm, greedy and seeded, with drafting; an injected read error fails that step with a
 * message naming Engram, and the engine goes on serving. */
#include "tests/model/model_test_util.h"

#include "runtime/engine/generate.h"
#include "runtime/engram/engram_pack.h"

#include <stdlib.h>
#include <string.h>

static cpu_model *M;
static char ckpt[1100], pack[1100], nvme[1200];

static int setup(void **state)
{
    (void)state;
    M = model_test_make("tiny", 5);
    if (!M)
        return -1;
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", model_test_root);
    snprintf(pack, sizeof pack, "%s/engram", model_test_root);
    snprintf(nvme, sizeof nvme, "nvme:%s", pack);
    engram_pack_opts o = {.tp = 1};
    if (engram_pack(&M->eg_src, pack, &o, NULL, NULL)) {
        fprintf(stderr, "engram_pack: %s\n", dsk_err_msg());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_test_cleanup(M);
    return 0;
}

static engine *open_engine(const char *placement, size_t cache)
{
    engine_opts o = {.backend = "cpu", .model_dir = ckpt, .max_seqs = 2, .engram = placement, .engram_cache = cache,
                     .cache_bytes = (size_t)1 << 30};
    engine *e;
    if (engine_open(&o, &e)) {
        fprintf(stderr, "engine_open (%s): %s\n", placement, dsk_err_msg());
        return NULL;
    }
    return e;
}

/* n tokens after a fixed prompt, with the logits of each. */
static void run(engine *e, float temperature, int draft, int32_t *out, float **logits, size_t *len)
{
    static const int32_t prompt[12] = {0, 7, 1042, 77, 9000, 313, 99, 64000, 12, 2, 40000, 7};
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    assert_non_null(f);
    gen_opts o = {.max_tokens = 24, .sp = {.temperature = temperature, .top_p = 1.0f, .seed = 3}, .draft = draft,
                  .dump_logits = f};
    gen_stats st;
    assert_ok(engine_generate(e, prompt, 12, &o, out, &st));
    fclose(f);
    *logits = (float *)(void *)buf;
}

static void test_placements_identical(void **state)
{
    (void)state;
    engine *host = open_engine("host", 0), *disk = open_engine(nvme, 0), *cached = open_engine(nvme, 1 << 20);
    assert_non_null(host);
    assert_non_null(disk);
    assert_non_null(cached);
    for (int k = 0; k < 3; k++) {
        float t = k == 0 ? 0.0f : 0.8f;
        int draft = k == 2;
        int32_t a[24], b[24], c1[24], c2[24];
        float *la, *lb, *lc1, *lc2;
        size_t na, nb, nc1, nc2;
        run(host, t, draft, a, &la, &na);
        run(disk, t, draft, b, &lb, &nb);
        run(cached, t, draft, c1, &lc1, &nc1); /* fills the cache */
        run(cached, t, draft, c2, &lc2, &nc2); /* from it */
        assert_memory_equal(a, b, sizeof a);
        assert_memory_equal(a, c1, sizeof a);
        assert_memory_equal(a, c2, sizeof a);
        assert_int_equal(na, nb);
        assert_memory_equal(la, lb, na);
        assert_memory_equal(la, lc1, na);
        assert_memory_equal(la, lc2, na);
        free(la);
        free(lb);
        free(lc1);
        free(lc2);
    }
    engine_close(host);
    engine_close(disk);
    engine_close(cached);
}

static void test_read_error_fails_one_step(void **state)
{
    (void)state;
    setenv("DSKIT_ENGRAM_FAULT", "eio@2", 1);
    engine *e = open_engine(nvme, 0);
    unsetenv("DSKIT_ENGRAM_FAULT");
    assert_non_null(e);
    int32_t out[24];
    float *lg;
    size_t len;
    int seq;
    assert_ok(engine_seq_open(e, 64, 0, &seq));
    engine_row r = {.seq = seq, .token = 1042, .pos = 0, .sample = 1, .sp = SAMPLE_GREEDY, .top_logprobs = -1};
    int32_t tok;
    int rc = engine_step(e, &r, 1, &(engine_out){.tokens = &tok});
    assert_int_equal(rc, -1);
    assert_non_null(strstr(dsk_err_msg(), "Engram"));
    /* one row: well within the rollback window, so the sequence goes on */
    assert_ok(engine_step(e, &r, 1, &(engine_out){.tokens = &tok}));
    engine_seq_close(e, seq);
    /* and a whole generation afterwards is the fault-free one */
    run(e, 0.0f, 0, out, &lg, &len);
    engine *clean = open_engine(nvme, 0);
    int32_t want[24];
    float *lw;
    size_t lwn;
    run(clean, 0.0f, 0, want, &lw, &lwn);
    assert_memory_equal(out, want, sizeof out);
    free(lg);
    free(lw);
    engine_close(clean);
    engine_close(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_placements_identical),
        cmocka_unit_test(test_read_error_fails_one_step),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
