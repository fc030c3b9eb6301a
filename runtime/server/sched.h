/* The scheduler: the one thread that owns the engine. HTTP threads post tasks (a request to run, a
 * cancel) and wait on the request; each round the scheduler drains the tasks, admits queued requests
 * while sequences and pool room allow, and puts every active sequence's rows into ONE engine_step: a
 * decode row (or a DSpark verify window) per decoding sequence and up to prefill_chunk prompt rows of
 * the sequences still reading their prompts. Each sequence keeps exactly the positions, sampling keys
 * and accept rule of the single-sequence loop (runtime/engine/generate.c), so its tokens are those it
 * gets alone. A request that ends normally leaves its sequence open, idle, in the prompt cache: a later
 * request whose prompt starts the same (token ids and image keys) reuses it and prefills only the rest;
 * an idle sequence is evicted before any request waits for its room. */
#ifndef DSK_SERVER_SCHED_H
#define DSK_SERVER_SCHED_H

#include "runtime/engine/engine.h"
#include "runtime/server/constrain.h"
#include "runtime/server/metrics.h"
#include "runtime/server/request.h"
#include "runtime/tokenizer/tokenizer.h"

typedef struct {
    int prefill_chunk;      /* prompt rows per round, over all sequences reading their prompts */
    int draft;              /* DSpark drafting with exact verification (when the model has a drafter) */
    int max_queue;          /* requests that may wait for a sequence or pool room */
    double queue_timeout_s; /* a request that waited this long fails with 503 */
    const srv_genv *genv;   /* structured output (requests whose gen.grammar is set) */
    int prompt_cache;       /* finished requests' sequences kept for prefix reuse (0: off; <= max_seqs) */
} sched_opts;

typedef struct sched sched;

/* A stream whose client reads nothing is held (gets no rows) while this many of its tokens wait for its
 * writer: an unread stream costs no compute and its reply buffer stays bounded, until the client reads
 * again or the idle timeout closes it. */
enum { SCHED_AHEAD = 64 };

int sched_start(engine *e, const dsk_tokenizer *tok, const sched_opts *o, srv_metrics *m, sched **out);
/* Hand r to the scheduler (which takes its own reference). Refused, with r failed as 429, when max_queue
 * requests wait already. */
int sched_submit(sched *s, srv_req *r);
/* Stop r's generation: its sequence is freed within one round. */
void sched_cancel(sched *s, srv_req *r);
/* A stream's writer took tokens: a round may run again for a stream the scheduler held (SCHED_AHEAD). */
void sched_wake(sched *s);
/* Requests queued or running. */
int sched_busy(sched *s);
/* Stop the thread and join it; requests it still holds end as cancelled. */
void sched_stop(sched *s);

#endif
