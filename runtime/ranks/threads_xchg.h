/* Tensor-parallel ranks as threads of one process (the tests' two ranks side by side against one, and
 * `dskit bench decode --tp 2`, whose ranks share one GPU's context so that their launches run at once):
 * the rank_xchg calls of the process transports over buffers the threads share. Every wait is bounded
 * (timeout_s, then the call fails naming the rank), and an abort by one rank fails every rank's wait. */
#ifndef DSK_RANKS_THREADS_XCHG_H
#define DSK_RANKS_THREADS_XCHG_H

#include "runtime/engine/xchg.h"

#include <pthread.h>

typedef struct {
    int tp;
    double timeout_s;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned gen;
    int aborted;
    char cause[256];
    const void *slot[8];
} threads_shared;

typedef struct {
    rank_xchg x;
    threads_shared *sh;
} threads_xchg;

/* tp ranks (at most 8), each wait at most timeout_s seconds: 0, or -1 with a message. */
int threads_shared_init(threads_shared *sh, int tp, double timeout_s);
void threads_shared_destroy(threads_shared *sh);
/* Rank `rank`'s end of the exchange (x->x is the rank_xchg to hand a backend). */
void threads_xchg_init(threads_xchg *x, threads_shared *sh, int rank);

#endif
