/* A generation request as the HTTP threads and the scheduler share it. The HTTP thread fills the fixed
 * part, submits it, and then only waits (on cv, with timeouts) and reads what the scheduler published;
 * the scheduler publishes each round's tokens and text under mu. Reference counted: the HTTP side and
 * the scheduler each hold one reference while they use it. */
#ifndef DSK_SERVER_REQUEST_H
#define DSK_SERVER_REQUEST_H

#include "runtime/common/util.h"
#include "runtime/engine/image_input.h"
#include "runtime/grammar/grammar.h"
#include "runtime/model/sampling.h"

#include <pthread.h>
#include <stdint.h>

enum { FIN_NONE, FIN_STOP, FIN_LENGTH, FIN_ERROR, FIN_CANCELLED };

typedef struct {
    int32_t id;
    float lp;
    int32_t top_ids[SAMPLE_MAX_TOP_LOGPROBS];
    float top_lp[SAMPLE_MAX_TOP_LOGPROBS];
} srv_logprob;

typedef struct {
    int max_tokens;       /* new tokens at most (context room already taken into account) */
    sample_params sp;
    int top_logprobs;     /* -1: none; else the drawn token's log-probability and that many alternatives */
    int ignore_eos;
    char **stops;         /* stop strings (non-empty, NUL-terminated) */
    int n_stops;
    /* structured output: the compiled grammar (owned by the request, read-only, freed with it) or NULL;
     * think_first: the reply starts with reasoning, free text up to </think>, the grammar after it */
    grammar *grammar;
    int think_first;
} srv_gen;

typedef struct srv_req {
    /* fixed before sched_submit */
    char id[64];
    int32_t *prompt;
    int n_prompt;
    srv_gen gen;
    int64_t reserve;      /* positions the sequence reserves in the pool */
    engine_prompt images; /* the prompt's image spans (images.n_images, their positions and patches; ids
                             moved to prompt), placed when the request is admitted */
    double t_arrival;
    int stream;           /* the reply is streamed: its generation is held while the client does not read */

    /* shared: mu guards everything below */
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* CLOCK_MONOTONIC */
    unsigned version;     /* bumped on every change */
    int admitted;         /* holds a sequence */
    int64_t n_cached;     /* prompt positions reused from the prompt cache (set at admission) */
    int done;             /* nothing more will be published */
    int finish;           /* FIN_* once done */
    int status;           /* FIN_ERROR: the HTTP status */
    char err[512];        /* FIN_ERROR: the message */
    const char *err_type, *err_code;
    dsk_buf text;         /* released text (valid UTF-8, stop strings cut) */
    int32_t *tokens;      /* every drawn token, EOS included */
    srv_logprob *lps;     /* per token when top_logprobs >= 0 */
    int n_tokens, cap_tokens;
    int n_taken;          /* a stream: tokens its writer has formatted for the client (it takes more only
                             once MHD has sent what it had) */
    double t_first, t_done;
    int refs;
} srv_req;

srv_req *srv_req_new(void);
void srv_req_ref(srv_req *r);
void srv_req_unref(srv_req *r);
/* Wait until r->version differs from seen, r is done, or ms pass; returns r->version. Locks r->mu. */
unsigned srv_req_wait(srv_req *r, unsigned seen, int ms);
/* Finish r with an error (status, OpenAI error type and code) unless it is done already. */
void srv_req_fail(srv_req *r, int status, const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* A timed wait on a CLOCK_MONOTONIC condition: every wait in the server has a bound. */
void srv_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);
int srv_cond_init(pthread_cond_t *cv);

#endif
