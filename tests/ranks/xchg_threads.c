#include "tests/ranks/xchg_threads.h"

#include <stdlib.h>
#include <string.h>

static int t_sum(rank_xchg *x, float *buf, size_t n)
{
    threads_shared *sh = ((threads_xchg *)x->impl)->sh;
    float *sum = malloc(sizeof(float) * (n ? n : 1));
    if (!sum)
        return -1;
    sh->slot[x->rank] = buf;
    pthread_barrier_wait(&sh->bar);
    for (size_t i = 0; i < n; i++) {
        float s = ((const float *)sh->slot[0])[i];
        for (int r = 1; r < sh->tp; r++)
            s += ((const float *)sh->slot[r])[i];
        sum[i] = s;
    }
    pthread_barrier_wait(&sh->bar); /* every rank has read every partial: buf may change now */
    memcpy(buf, sum, sizeof(float) * n);
    free(sum);
    return 0;
}

static int t_gather(rank_xchg *x, const void *mine, size_t bytes, void *all)
{
    threads_shared *sh = ((threads_xchg *)x->impl)->sh;
    sh->slot[x->rank] = mine;
    pthread_barrier_wait(&sh->bar);
    for (int r = 0; r < sh->tp; r++)
        if ((char *)all + (size_t)r * bytes != (const char *)sh->slot[r])
            memcpy((char *)all + (size_t)r * bytes, sh->slot[r], bytes);
    pthread_barrier_wait(&sh->bar);
    return 0;
}

static void t_abort(rank_xchg *x, const char *cause)
{
    (void)x;
    (void)cause;
}

static int t_aborted(rank_xchg *x)
{
    (void)x;
    return 0;
}

static void t_close(rank_xchg *x)
{
    (void)x;
}

int threads_shared_init(threads_shared *sh, int tp)
{
    memset(sh, 0, sizeof *sh);
    sh->tp = tp;
    return pthread_barrier_init(&sh->bar, NULL, (unsigned)tp);
}

void threads_shared_destroy(threads_shared *sh)
{
    pthread_barrier_destroy(&sh->bar);
}

void threads_xchg_init(threads_xchg *x, threads_shared *sh, int rank)
{
    x->x = (rank_xchg){sh->tp, rank, t_sum, t_gather, t_abort, t_aborted, t_close, x};
    x->sh = sh;
}
