/* Exchanges between tensor-parallel ranks (docs/ranks.md): every rank contributes its partial and every
 * rank ends with the same bits. An all-gather followed by a sum in rank order (never a reduction whose
 * order depends on arrival), so both ranks hold identical activations and draw identical tokens without
 * a broadcast. One interface over the transports: none (tp = 1: the same code path, the sum of one
 * partial), host shared memory (ranks on one host), TCP (across hosts); the GPU's CUDA IPC and NCCL
 * transports implement the same calls on device buffers.
 *
 * Every wait is bounded and watches the shared abort word: a rank that fails sets it (with its rank and
 * cause) and every rank stops within a second. */
#ifndef DSK_ENGINE_XCHG_H
#define DSK_ENGINE_XCHG_H

#include <stddef.h>
#include <stdint.h>

typedef struct rank_xchg rank_xchg;

struct rank_xchg {
    int tp, rank;
    /* buf [n]: in, this rank's partial; out, Σ over ranks 0, 1, ... of their partials (fp32, in rank order) */
    int (*allgather_sum)(rank_xchg *x, float *buf, size_t n);
    /* all [tp][bytes]: rank r's `mine` at all + r·bytes, on every rank */
    int (*allgather)(rank_xchg *x, const void *mine, size_t bytes, void *all);
    /* Set the abort word: every rank's next (or current) wait fails with this rank and cause. */
    void (*abort)(rank_xchg *x, const char *cause);
    /* 1 when some rank has aborted; the cause (with its rank) goes to the error message. */
    int (*aborted)(rank_xchg *x);
    void (*close)(rank_xchg *x);
    void *impl;
};

/* tp = 1: nothing to exchange (the partial is the sum). Never fails. */
rank_xchg *rank_xchg_single(void);

/* Helpers over the interface. */
static inline int xchg_sum(rank_xchg *x, float *buf, size_t n)
{
    return x->tp > 1 ? x->allgather_sum(x, buf, n) : 0;
}

/* The slice [lo, hi) of n items a rank owns when n is split in tp equal parts (n % tp == 0). */
static inline void xchg_slice(const rank_xchg *x, int64_t n, int64_t *lo, int64_t *hi)
{
    *lo = n / x->tp * x->rank;
    *hi = n / x->tp * (x->rank + 1);
}

#endif
