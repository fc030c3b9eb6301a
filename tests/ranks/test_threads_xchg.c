/* The threads transport (runtime/ranks/threads_xchg.h): two ranks as threads sum in rank order and gather;
 * a rank whose peer never comes fails at its bound naming itself; a rank's abort fails the other's wait
 * with the aborting rank and its cause. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/ranks/threads_xchg.h"

#include <pthread.h>
#include <string.h>

static threads_shared SH;
static threads_xchg X[2];

typedef struct {
    int rank, rc;
    float buf[3];
    int32_t all[2];
    char err[256];
} job;

static void *sum_and_gather(void *arg)
{
    job *j = arg;
    rank_xchg *x = &X[j->rank].x;
    int32_t me = 10 + j->rank;
    j->rc = x->allgather_sum(x, j->buf, 3) || x->allgather(x, &me, sizeof me, j->all);
    return NULL;
}

static void test_two_ranks(void **state)
{
    (void)state;
    assert_int_equal(threads_shared_init(&SH, 2, 10.0), 0);
    job j[2] = {{0, 0, {1.0f, 1e8f, 0.5f}, {0}, ""}, {1, 0, {2.0f, -1e8f, 0.25f}, {0}, ""}};
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        threads_xchg_init(&X[r], &SH, r);
        assert_int_equal(pthread_create(&th[r], NULL, sum_and_gather, &j[r]), 0);
    }
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(j[r].rc, 0);
        assert_true(j[r].buf[0] == 3.0f && j[r].buf[1] == 0.0f && j[r].buf[2] == 0.75f);
        assert_int_equal(j[r].all[0], 10);
        assert_int_equal(j[r].all[1], 11);
    }
    threads_shared_destroy(&SH);
}

static void test_lone_rank(void **state)
{
    (void)state;
    assert_int_equal(threads_shared_init(&SH, 2, 0.2), 0);
    threads_xchg_init(&X[0], &SH, 0);
    float buf[1] = {1.0f};
    double t0 = dsk_now();
    assert_int_not_equal(X[0].x.allgather_sum(&X[0].x, buf, 1), 0);
    double dt = dsk_now() - t0;
    assert_true(dt >= 0.15 && dt < 5.0);
    assert_non_null(strstr(dsk_err_msg(), "rank 0 waited 0.2 s for an exchange (the bound)"));
    threads_shared_destroy(&SH);
}

static void *abort_later(void *arg)
{
    (void)arg;
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    X[1].x.abort(&X[1].x, "a test fault");
    return NULL;
}

static void test_abort(void **state)
{
    (void)state;
    assert_int_equal(threads_shared_init(&SH, 2, 30.0), 0);
    for (int r = 0; r < 2; r++)
        threads_xchg_init(&X[r], &SH, r);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, abort_later, NULL), 0);
    float buf[1] = {1.0f};
    double t0 = dsk_now();
    assert_int_not_equal(X[0].x.allgather_sum(&X[0].x, buf, 1), 0);
    pthread_join(th, NULL);
    assert_true(dsk_now() - t0 < 5.0);
    assert_non_null(strstr(dsk_err_msg(), "rank 1: a test fault"));
    assert_int_equal(X[0].x.aborted(&X[0].x), 1);
    threads_shared_destroy(&SH);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks),
        cmocka_unit_test(test_lone_rank),
        cmocka_unit_test(test_abort),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
