#include "runtime/ranks/threads_xchg.h"
#include "runtime/common/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Every rank arrives, or -1: the bound passed or a rank aborted. */
static int barrier(rank_xchg *x)
{
    threads_shared *sh = ((threads_xchg *)x->impl)->sh;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)sh->timeout_s;
    until.tv_nsec += (long)((sh->timeout_s - (double)(time_t)sh->timeout_s) * 1e9);
    if (until.tv_nsec >= 1000000000L)
        until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&sh->mu);
    unsigned gen = sh->gen;
    int rc = 0;
    if (++sh->arrived == sh->tp) {
        sh->arrived = 0;
        sh->gen++;
        pthread_cond_broadcast(&sh->cv);
    } else
        while (gen == sh->gen && !sh->aborted && !rc)
            rc = pthread_cond_timedwait(&sh->cv, &sh->mu, &until) == ETIMEDOUT;
    int aborted = sh->aborted && gen == sh->gen;
    char cause[256];
    snprintf(cause, sizeof cause, "%s", sh->cause);
    pthread_mutex_unlock(&sh->mu);
    if (aborted)
        return dsk_err("rank %d: %s", x->rank, cause);
    if (rc)
        return dsk_err("rank %d waited %.3g s for an exchange (the bound)", x->rank, sh->timeout_s);
    return 0;
}

static int t_sum(rank_xchg *x, float *buf, size_t n)
{
    threads_shared *sh = ((threads_xchg *)x->impl)->sh;
    float *sum = malloc(sizeof(float) * (n ? n : 1));
    if (!sum)
        return dsk_err("rank %d: no memory for an exchange of %zu floats", x->rank, n);
    sh->slot[x->rank] = buf;
    if (barrier(x)) {
        free(sum);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        float s = ((const float *)sh->slot[0])[i];
        for (int r = 1; r < sh->tp; r++)
            s += ((const float *)sh->slot[r])[i];
        sum[i] = s;
    }
    int rc = barrier(x); /* every rank has read every partial: buf may change now */
    if (!rc)
        memcpy(buf, sum, sizeof(float) * n);
    free(sum);
    return rc;
}

static int t_gather(rank_xchg *x, const void *mine, size_t bytes, void *all)
{
    threads_shared *sh = ((threads_xchg *)x->impl)->sh;
    sh->slot[x->rank] = mine;
    if (barrier(x))
        return -1;
    for (int r = 0; r < sh->tp; r++)
        if ((char *)all + (size_t)r * bytes != (const char *)sh->slot[r])
            memcpy((char *)all + (size_t)r * bytes, sh->slot[r], bytes);
    return barrier(x);
}

static void t_abort(rank_xchg *x, const char *cause)
{
    threads_shared *sh = ((threads_xchg *)x->impl)->sh;
    pthread_mutex_lock(&sh->mu);
    if (!sh->aborted)
        snprintf(sh->cause, sizeof sh->cause, "rank %d: %s", x->rank, cause);
    sh->aborted = 1;
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
}

static int t_aborted(rank_xchg *x)
{
    threads_shared *sh = ((threads_xchg *)x->impl)->sh;
    pthread_mutex_lock(&sh->mu);
    int a = sh->aborted;
    pthread_mutex_unlock(&sh->mu);
    if (a)
        dsk_err("%s", sh->cause);
    return a;
}

static void t_close(rank_xchg *x)
{
    (void)x;
}

int threads_shared_init(threads_shared *sh, int tp, double timeout_s)
{
    memset(sh, 0, sizeof *sh);
    if (tp < 1 || tp > 8)
        return dsk_err("threads transport: %d ranks (1 to 8)", tp);
    sh->tp = tp;
    sh->timeout_s = timeout_s;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) || pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
        pthread_cond_init(&sh->cv, &ca) || pthread_mutex_init(&sh->mu, NULL))
        return dsk_err("threads transport: initialising its lock failed");
    pthread_condattr_destroy(&ca);
    return 0;
}

void threads_shared_destroy(threads_shared *sh)
{
    pthread_cond_destroy(&sh->cv);
    pthread_mutex_destroy(&sh->mu);
}

void threads_xchg_init(threads_xchg *x, threads_shared *sh, int rank)
{
    x->x = (rank_xchg){sh->tp, rank, t_sum, t_gather, t_abort, t_aborted, t_close, x};
    x->sh = sh;
}
