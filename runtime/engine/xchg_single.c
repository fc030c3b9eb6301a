/* tp = 1: one rank, whose partial is already the sum. The same code path as tp = N (docs/ranks.md). */
#include "runtime/engine/xchg.h"

#include <string.h>

static int single_sum(rank_xchg *x, float *buf, size_t n)
{
    (void)x;
    (void)buf;
    (void)n;
    return 0;
}

static int single_gather(rank_xchg *x, const void *mine, size_t bytes, void *all)
{
    (void)x;
    if (all != mine)
        memmove(all, mine, bytes);
    return 0;
}

static void single_abort(rank_xchg *x, const char *cause)
{
    (void)x;
    (void)cause;
}

static int single_aborted(rank_xchg *x)
{
    (void)x;
    return 0;
}

static void single_close(rank_xchg *x)
{
    (void)x;
}

rank_xchg *rank_xchg_single(void)
{
    static rank_xchg one = {1, 0, single_sum, single_gather, single_abort, single_aborted, single_close, NULL};
    return &one;
}
