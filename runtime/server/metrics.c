#include "runtime/server/metrics.h"
#include "runtime/common/error.h"

#include <string.h>

const char *const srv_route_names[ROUTE_COUNT] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize",
    "other"};

static const char *const finish_names[5] = {"stop", "length", "tool_calls", "error", "cancelled"};

static void hist_init(metrics_hist *h, const char *name, const char *help, const double *le, int n)
{
    *h = (metrics_hist){.name = name, .help = help, .n = n};
    memcpy(h->le, le, sizeof(double) * (size_t)n);
}

int metrics_init(srv_metrics *m)
{
    memset(m, 0, sizeof *m);
    if (pthread_mutex_init(&m->mu, NULL))
        return dsk_err("metrics: pthread_mutex_init failed");
    static const double ttft[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
    static const double tpot[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5};
    static const double e2e[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600};
    static const double queue[] = {0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
    hist_init(&m->hist[HIST_TTFT], "dskit_time_to_first_token_seconds",
              "Time from a request's arrival to its first generated token", ttft, 14);
    hist_init(&m->hist[HIST_TPOT], "dskit_time_per_output_token_seconds",
              "Time between generated tokens, one observation per token after the first", tpot, 13);
    hist_init(&m->hist[HIST_E2E], "dskit_request_duration_seconds",
              "Time from a generation request's arrival to its last token", e2e, 13);
    hist_init(&m->hist[HIST_QUEUE], "dskit_request_queue_seconds",
              "Time a generation request waited for a sequence and pool room", queue, 13);
    return 0;
}

void metrics_destroy(srv_metrics *m)
{
    pthread_mutex_destroy(&m->mu);
}

void metrics_request(srv_metrics *m, int route, int status)
{
    if (route < 0 || route >= ROUTE_COUNT)
        route = ROUTE_OTHER;
    metrics_lock(m);
    int i = 0;
    while (i < m->n_requests && !(m->requests[i].route == route && m->requests[i].status == status))
        i++;
    if (i == m->n_requests && i < (int)(sizeof m->requests / sizeof m->requests[0]))
        m->requests[m->n_requests++] = (metrics_count){route, status, 0};
    if (i < m->n_requests)
        m->requests[i].n++;
    metrics_unlock(m);
}

void metrics_finished(srv_metrics *m, const char *reason)
{
    for (int i = 0; i < 5; i++)
        if (!strcmp(reason, finish_names[i])) {
            metrics_lock(m);
            m->finished[i]++;
            metrics_unlock(m);
        }
}

void metrics_observe(srv_metrics *m, int hist, double value, uint64_t n)
{
    metrics_lock(m);
    metrics_hist *h = &m->hist[hist];
    int b = 0;
    while (b < h->n && value > h->le[b])
        b++;
    h->count[b] += n;
    h->total += n;
    h->sum += value * (double)n;
    metrics_unlock(m);
}

static int counter(dsk_buf *o, const char *name, const char *help, const char *type, double v)
{
    return dsk_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

static int render_hist(dsk_buf *o, const metrics_hist *h)
{
    if (dsk_buf_printf(o, "# HELP %s %s\n# TYPE %s histogram\n", h->name, h->help, h->name))
        return -1;
    uint64_t cum = 0;
    for (int b = 0; b < h->n; b++) {
        cum += h->count[b];
        if (dsk_buf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->le[b], (unsigned long long)cum))
            return -1;
    }
    return dsk_buf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", h->name,
                          (unsigned long long)h->total, h->name, h->sum, h->name, (unsigned long long)h->total);
}

int metrics_render(srv_metrics *m, dsk_buf *o)
{
    metrics_lock(m);
    int rc = dsk_buf_printf(o, "# HELP dskit_requests_total HTTP requests answered, by route and status\n"
                               "# TYPE dskit_requests_total counter\n");
    for (int i = 0; !rc && i < m->n_requests; i++)
        rc = dsk_buf_printf(o, "dskit_requests_total{route=\"%s\",status=\"%d\"} %llu\n",
                            srv_route_names[m->requests[i].route], m->requests[i].status,
                            (unsigned long long)m->requests[i].n);
    rc = rc || dsk_buf_printf(o, "# HELP dskit_generations_finished_total Generation requests finished, by "
                                 "reason\n# TYPE dskit_generations_finished_total counter\n");
    for (int i = 0; !rc && i < 5; i++)
        rc = dsk_buf_printf(o, "dskit_generations_finished_total{reason=\"%s\"} %llu\n", finish_names[i],
                            (unsigned long long)m->finished[i]);
    rc = rc ||
         counter(o, "dskit_prompt_tokens_total", "Prompt tokens of admitted requests", "counter",
                 (double)m->prompt_tokens) ||
         counter(o, "dskit_generation_tokens_total", "Tokens generated", "counter", (double)m->generated_tokens) ||
         counter(o, "dskit_prompt_cache_hits_total",
                 "Admitted requests that reused a cached sequence's prefix (prompt cache)", "counter",
                 (double)m->cache_hits) ||
         counter(o, "dskit_prompt_cache_misses_total",
                 "Admitted requests that found no cached prefix to reuse (with the prompt cache on)", "counter",
                 (double)m->cache_misses) ||
         counter(o, "dskit_prompt_tokens_reused_total",
                 "Prompt positions taken from cached sequences instead of being prefilled", "counter",
                 (double)m->cache_reused) ||
         counter(o, "dskit_prompt_cache_evictions_total",
                 "Cached sequences closed to make room (least recently kept first) or to keep the cache's bound",
                 "counter", (double)m->cache_evictions) ||
         counter(o, "dskit_draft_tokens_proposed_total", "DSpark draft tokens put into verify windows", "counter",
                 (double)m->draft_proposed) ||
         counter(o, "dskit_draft_tokens_accepted_total", "DSpark draft tokens accepted by verification", "counter",
                 (double)m->draft_accepted) ||
         counter(o, "dskit_grammar_masks_total", "Structured output: allowed-token masks computed", "counter",
                 (double)m->grammar_masks) ||
         counter(o, "dskit_grammar_mask_seconds_total", "Structured output: time computing masks (beside the forward)",
                 "counter", m->grammar_s) ||
         counter(o, "dskit_grammar_drafts_refused_total",
                 "Structured output: draft tokens outside the grammar (their verify windows cut there)", "counter",
                 (double)m->grammar_draft_cut) ||
         counter(o, "dskit_engram_rows_total", "Engram rows served by the store (host or nvme placement)", "counter",
                 (double)m->engram.rows) ||
         counter(o, "dskit_engram_cache_hits_total", "Engram rows served from the hot-row cache (nvme)", "counter",
                 (double)m->engram.cache_hits) ||
         counter(o, "dskit_engram_reads_total", "Engram block reads from disk (nvme)", "counter",
                 (double)m->engram.reads) ||
         counter(o, "dskit_engram_read_bytes_total", "Engram bytes read from disk (nvme)", "counter",
                 (double)m->engram.read_bytes) ||
         counter(o, "dskit_engram_slow_reads_total", "Engram disk reads slower than the store's bound (50 ms)",
                 "counter", (double)m->engram.slow_reads) ||
         counter(o, "dskit_engram_read_errors_total", "Engram reads that failed (I/O error, short read, bad hash)",
                 "counter", (double)m->engram.errors) ||
         counter(o, "dskit_engram_timeouts_total", "Engram waits that ran past the step's bound", "counter",
                 (double)m->engram.timeouts) ||
         counter(o, "dskit_scheduler_rounds_total", "Engine steps the scheduler ran", "counter", (double)m->rounds) ||
         counter(o, "dskit_scheduler_rows_total", "Rows of all engine steps", "counter", (double)m->round_rows) ||
         counter(o, "dskit_scheduler_engine_seconds_total", "Scheduler time inside engine calls", "counter",
                 m->engine_s) ||
         counter(o, "dskit_scheduler_overhead_seconds_total",
                 "Scheduler wall time outside engine calls while it had work (its own per-round cost)", "counter",
                 m->overhead_s) ||
         counter(o, "dskit_scheduler_overhead_cpu_seconds_total",
                 "The scheduler thread's CPU time outside engine calls (its per-round cost without preemption)",
                 "counter", m->overhead_cpu_s) ||
         counter(o, "dskit_requests_running", "Requests holding a sequence", "gauge", m->running) ||
         counter(o, "dskit_requests_queued", "Requests waiting for a sequence or pool room", "gauge", m->queued) ||
         counter(o, "dskit_streams_held",
                 "Streams whose generation waits for their client to read (SCHED_AHEAD tokens unsent)", "gauge",
                 m->held) ||
         counter(o, "dskit_sequences_open", "Engine sequences open (the prompt cache's included)", "gauge",
                 m->seqs_open) ||
         counter(o, "dskit_prompt_cache_sequences", "Idle sequences kept by the prompt cache", "gauge",
                 m->cache_seqs) ||
         counter(o, "dskit_prompt_cache_positions", "KV positions reserved by the prompt cache's sequences",
                 "gauge", (double)m->cache_positions) ||
         counter(o, "dskit_pool_positions_used", "KV positions reserved by open sequences (cached ones included)",
                 "gauge", (double)m->pool_used) ||
         counter(o, "dskit_pool_positions_total", "KV positions the pool holds (0: unbounded)", "gauge",
                 (double)m->pool_total);
    for (int h = 0; !rc && h < HIST_COUNT; h++)
        rc = render_hist(o, &m->hist[h]);
    metrics_unlock(m);
    return rc;
}
