/* Tests only: tensor-parallel ranks as threads of one process, exchanging through shared buffers and a
 * barrier. The same rank_xchg calls as the process transports, so a test runs two ranks' forwards side by
 * side and compares them with a one-rank forward layer by layer. */
#ifndef DSK_TESTS_XCHG_THREADS_H
#define DSK_TESTS_XCHG_THREADS_H

#include "runtime/engine/xchg.h"

#include <pthread.h>

typedef struct {
    int tp;
    pthread_barrier_t bar;
    const void *slot[8];
} threads_shared;

typedef struct {
    rank_xchg x;
    threads_shared *sh;
} threads_xchg;

int threads_shared_init(threads_shared *sh, int tp);
void threads_shared_destroy(threads_shared *sh);
/* Rank `rank`'s end of the exchange (x->x is the rank_xchg to hand a backend). */
void threads_xchg_init(threads_xchg *x, threads_shared *sh, int rank);

#endif
