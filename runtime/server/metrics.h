/* The server's counters, gauges and histograms, rendered as Prometheus text (GET /metrics). Updated by
 * the HTTP threads (requests by route and status) and the scheduler (tokens, latencies, slots); one
 * mutex guards them all: every update is a few additions. */
#ifndef DSK_SERVER_METRICS_H
#define DSK_SERVER_METRICS_H

#include "runtime/common/util.h"
#include "runtime/engine/engine.h"

#include <pthread.h>
#include <stdint.h>

enum {
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_MODELS,
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE,
    ROUTE_OTHER, /* any other path: one label, so random URLs cannot grow the table */
    ROUTE_COUNT
};
extern const char *const srv_route_names[ROUTE_COUNT];

#define METRICS_MAX_BUCKETS 16
#define METRICS_MAX_STATUS 24

typedef struct {
    const char *name, *help;
    int n;                             /* buckets, +Inf excluded */
    double le[METRICS_MAX_BUCKETS];    /* upper bounds, ascending */
    uint64_t count[METRICS_MAX_BUCKETS + 1];
    uint64_t total;
    double sum;
} metrics_hist;

enum { HIST_TTFT, HIST_TPOT, HIST_E2E, HIST_QUEUE, HIST_COUNT };

typedef struct {
    int route, status;
    uint64_t n;
} metrics_count;

typedef struct {
    pthread_mutex_t mu;
    metrics_count requests[ROUTE_COUNT * METRICS_MAX_STATUS];
    int n_requests;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t draft_proposed, draft_accepted;
    uint64_t rounds, round_rows;
    uint64_t grammar_masks, grammar_draft_cut; /* structured output: masks made, drafts the grammar refused */
    uint64_t cache_hits, cache_misses; /* prompt cache: admitted requests that reused a prefix, or found none */
    uint64_t cache_reused, cache_evictions; /* prompt positions not prefilled again; cached sequences closed */
    double grammar_s;                  /* scheduler time computing masks */
    engine_engram_stats engram;     /* the engine's Engram store, as of the last round */
    uint64_t finished[5];              /* by reason: stop, length, tool_calls, error, cancelled */
    double engine_s, overhead_s;       /* scheduler wall time in engine calls and in its own bookkeeping */
    double overhead_cpu_s;             /* the bookkeeping's CPU time on the scheduler thread */
    int running, queued, held, seqs_open, cache_seqs;
    int64_t pool_used, pool_total;     /* positions; pool_total 0: unbounded */
    int64_t cache_positions;           /* reserved by the cached sequences (within pool_used) */
    metrics_hist hist[HIST_COUNT];
} srv_metrics;

int metrics_init(srv_metrics *m);
void metrics_destroy(srv_metrics *m);
void metrics_request(srv_metrics *m, int route, int status);
/* A generation ended: reason is a finish_reason (stop, length, tool_calls), "error" or "cancelled". */
void metrics_finished(srv_metrics *m, const char *reason);
/* n observations of value (a round that delivered n tokens after dt seconds: value dt / n). */
void metrics_observe(srv_metrics *m, int hist, double value, uint64_t n);
int metrics_render(srv_metrics *m, dsk_buf *out);

/* For the parts of a multi-field update the caller takes the lock itself. */
static inline void metrics_lock(srv_metrics *m)
{
    pthread_mutex_lock(&m->mu);
}
static inline void metrics_unlock(srv_metrics *m)
{
    pthread_mutex_unlock(&m->mu);
}

#endif
