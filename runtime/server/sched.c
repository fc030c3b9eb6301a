/* The scheduler thread (sched.h). Per round: drain tasks, expire and admit queued requests, draft for
 * every decoding sequence that drafts (one engine_draft call), build one step (decode rows and verify
 * windows first, then prompt chunks), run it, accept and commit per sequence as generate.c does, publish
 * each request's new tokens and text under its own lock, free the sequences that ended. */
#include "runtime/server/sched.h"
#include "runtime/common/error.h"
#include "runtime/server/detok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TASK_SUBMIT, TASK_CANCEL };

typedef struct task {
    int kind;
    srv_req *r; /* the task holds a reference */
    struct task *next;
} task;

typedef struct {
    srv_req *r;        /* NULL: free */
    int seq;
    uint64_t admit_no; /* prompt chunks go to the earliest admitted first */
    int n_fed;         /* prompt rows committed */
    int n_out;         /* tokens drawn */
    int32_t tok;       /* the last drawn token: the next row's input */
    int decoding, draft, drafted;
    int row0, n_rows;  /* its rows in this round's step (n_rows 0: none) */
    int fin;           /* FIN_* once it ended */
    srv_detok dt;
    /* this round's output, published at the end of the round */
    dsk_buf text;
    int32_t *toks;
    srv_logprob *lps;
    int n_new;
    double t_last;     /* when its previous tokens were published */
} slot;

struct sched {
    engine *e;
    const engine_info *info;
    const dsk_tokenizer *tok;
    sched_opts o;
    srv_metrics *m;
    int B, window;     /* draft length; rows of one sequence's decode round */
    pthread_t thread;
    int started;
    /* shared with the HTTP threads: mu guards these */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    task *head, *tail;
    int stop;
    int n_pending, n_running;
    /* the scheduler thread's own */
    srv_req **waiting;
    int n_waiting;
    slot *slots;
    int n_slots, n_open;
    int64_t pool_used;
    uint64_t admissions;
    engine_row *rows;
    int cap_rows;
    engine_out eo;
    int32_t *drafts;
    engine_draft_req *dreq;
    int *dslot, *order;
    double engine_s, engine_cpu; /* this round's wall and thread-CPU time inside engine calls */
};

/* The scheduler thread's CPU time: its own cost per round without the time it was descheduled (the
 * machine may be shared). */
static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Time an engine call into the round's engine totals. */
#define ENGINE_CALL(s, rc, call)                                                                                     \
    do {                                                                                                           \
        double w_ = dsk_now(), c_ = thread_cpu();                                                                  \
        rc = (call);                                                                                               \
        (s)->engine_cpu += thread_cpu() - c_;                                                                      \
        (s)->engine_s += dsk_now() - w_;                                                                           \
    } while (0)

static int post(sched *s, int kind, srv_req *r)
{
    task *t = dsk_malloc(sizeof *t);
    if (!t)
        return -1;
    srv_req_ref(r);
    *t = (task){kind, r, NULL};
    pthread_mutex_lock(&s->mu);
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

int sched_submit(sched *s, srv_req *r)
{
    pthread_mutex_lock(&s->mu);
    int full = s->n_pending >= s->o.max_queue;
    if (!full)
        s->n_pending++;
    pthread_mutex_unlock(&s->mu);
    if (full) {
        srv_req_fail(r, 429, "server_busy", "queue_full",
                     "the server is busy: %d requests are waiting already; retry later", s->o.max_queue);
        return -1;
    }
    if (post(s, TASK_SUBMIT, r)) {
        pthread_mutex_lock(&s->mu);
        s->n_pending--;
        pthread_mutex_unlock(&s->mu);
        srv_req_fail(r, 500, "server_error", NULL, "request %s: %s", r->id, dsk_err_msg());
        return -1;
    }
    return 0;
}

void sched_cancel(sched *s, srv_req *r)
{
    if (post(s, TASK_CANCEL, r)) /* out of memory: the request runs to its end instead */
        fprintf(stderr, "dskit serve: request %s: the cancel could not be posted: %s\n", r->id, dsk_err_msg());
}

int sched_busy(sched *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n_pending + s->n_running;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- finishing and publishing ---- */

static void finish_unadmitted(sched *s, srv_req *r, int fin)
{
    pthread_mutex_lock(&r->mu);
    if (!r->done) {
        r->done = 1;
        r->finish = fin;
        r->version++;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&s->mu);
    s->n_pending--;
    pthread_mutex_unlock(&s->mu);
    srv_req_unref(r);
}

/* Hand this round's tokens and text to the request; with sl->fin set, it is the last of them. The metrics
 * are counted first, so a client that has its reply sees them in /metrics. */
static void publish(sched *s, slot *sl)
{
    srv_req *r = sl->r;
    double now = dsk_now();
    int first = sl->n_new && r->t_first == 0; /* t_first is written only here, on this thread */
    if (sl->n_new) {
        metrics_lock(s->m);
        s->m->generated_tokens += (uint64_t)sl->n_new;
        metrics_unlock(s->m);
        if (first) {
            metrics_observe(s->m, HIST_TTFT, now - r->t_arrival, 1);
            if (sl->n_new > 1)
                metrics_observe(s->m, HIST_TPOT, 0, (uint64_t)sl->n_new - 1);
        } else
            metrics_observe(s->m, HIST_TPOT, (now - sl->t_last) / sl->n_new, (uint64_t)sl->n_new);
        sl->t_last = now;
    }
    if (sl->fin)
        metrics_observe(s->m, HIST_E2E, now - r->t_arrival, 1);
    int failed = 0;
    pthread_mutex_lock(&r->mu);
    if (r->n_tokens + sl->n_new > r->cap_tokens) {
        int cap = r->cap_tokens ? r->cap_tokens * 2 : 64;
        while (cap < r->n_tokens + sl->n_new)
            cap *= 2;
        int32_t *t = dsk_realloc(r->tokens, sizeof(int32_t) * (size_t)cap);
        if (t)
            r->tokens = t;
        srv_logprob *l = r->gen.top_logprobs >= 0 ? dsk_realloc(r->lps, sizeof(srv_logprob) * (size_t)cap) : NULL;
        if (l)
            r->lps = l;
        if (t && (l || r->gen.top_logprobs < 0))
            r->cap_tokens = cap;
        else
            failed = 1;
    }
    if (!failed && dsk_buf_append(&r->text, sl->text.data, sl->text.len))
        failed = 1;
    if (!failed && sl->n_new) {
        memcpy(r->tokens + r->n_tokens, sl->toks, sizeof(int32_t) * (size_t)sl->n_new);
        if (r->gen.top_logprobs >= 0)
            memcpy(r->lps + r->n_tokens, sl->lps, sizeof(srv_logprob) * (size_t)sl->n_new);
        r->n_tokens += sl->n_new;
    }
    if (first)
        r->t_first = now;
    if (failed && !r->done) {
        snprintf(r->err, sizeof r->err, "request %s: out of memory holding the reply", r->id);
        r->finish = FIN_ERROR;
        r->status = 500;
        r->err_type = "server_error";
        r->done = 1;
        r->t_done = now;
    } else if (sl->fin && !r->done) {
        r->done = 1;
        r->finish = sl->fin;
        r->t_done = now;
    }
    r->version++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    sl->text.len = 0;
    sl->n_new = 0;
    if (failed)
        sl->fin = FIN_ERROR;
}

/* Free the slot's sequence; the request must have been published as done. */
static void release(sched *s, slot *sl)
{
    engine_seq_close(s->e, sl->seq);
    s->pool_used -= sl->r->reserve;
    s->n_open--;
    srv_detok_free(&sl->dt);
    srv_req_unref(sl->r);
    sl->r = NULL;
    pthread_mutex_lock(&s->mu);
    s->n_running--;
    pthread_mutex_unlock(&s->mu);
}

static void end_slot(sched *s, slot *sl, int fin)
{
    if (!sl->fin)
        sl->fin = fin;
    publish(s, sl);
    release(s, sl);
}

static void fail_slot(sched *s, slot *sl, const char *what)
{
    fprintf(stderr, "dskit serve: request %s: %s: %s\n", sl->r->id, what, dsk_err_msg());
    srv_req_fail(sl->r, 500, "server_error", NULL, "request %s: %s: %s", sl->r->id, what, dsk_err_msg());
    sl->fin = FIN_ERROR;
    publish(s, sl);
    release(s, sl);
}

/* ---- tasks and admission ---- */

static void drain(sched *s, task *t)
{
    while (t) {
        task *next = t->next;
        srv_req *r = t->r;
        if (t->kind == TASK_SUBMIT) {
            s->waiting[s->n_waiting++] = r; /* the task's reference becomes the queue's */
            r = NULL;
        } else {
            int i = 0;
            while (i < s->n_waiting && s->waiting[i] != r)
                i++;
            if (i < s->n_waiting) {
                memmove(s->waiting + i, s->waiting + i + 1, sizeof *s->waiting * (size_t)(s->n_waiting - i - 1));
                s->n_waiting--;
                finish_unadmitted(s, r, FIN_CANCELLED);
            } else
                for (int k = 0; k < s->n_slots; k++)
                    if (s->slots[k].r == r)
                        end_slot(s, &s->slots[k], FIN_CANCELLED);
        }
        srv_req_unref(r);
        free(t);
        t = next;
    }
}

static void pop_waiting(sched *s)
{
    memmove(s->waiting, s->waiting + 1, sizeof *s->waiting * (size_t)(s->n_waiting - 1));
    s->n_waiting--;
}

static void expire(sched *s)
{
    double now = dsk_now();
    for (int i = 0; i < s->n_waiting;) {
        srv_req *r = s->waiting[i];
        if (now - r->t_arrival < s->o.queue_timeout_s) {
            i++;
            continue;
        }
        memmove(s->waiting + i, s->waiting + i + 1, sizeof *s->waiting * (size_t)(s->n_waiting - i - 1));
        s->n_waiting--;
        srv_req_fail(r, 503, "server_busy", "queue_timeout",
                     "request %s waited %.0f s for a sequence and pool room; retry later", r->id, now - r->t_arrival);
        finish_unadmitted(s, r, FIN_ERROR);
    }
}

/* First come, first served: the head of the queue waits for room rather than being overtaken. */
static void admit(sched *s)
{
    while (s->n_waiting) {
        srv_req *r = s->waiting[0];
        if (s->n_open == s->n_slots || (s->info->pool > 0 && s->pool_used + r->reserve > s->info->pool))
            return;
        int draft = s->o.draft && s->B > 0, seq;
        if (engine_seq_open(s->e, r->reserve, draft ? ENGINE_SEQ_DRAFT : 0, &seq)) {
            fprintf(stderr, "dskit serve: request %s: %s\n", r->id, dsk_err_msg());
            srv_req_fail(r, 500, "server_error", NULL, "request %s: opening its sequence: %s", r->id, dsk_err_msg());
            pop_waiting(s);
            finish_unadmitted(s, r, FIN_ERROR);
            continue;
        }
        pop_waiting(s);
        slot *sl = s->slots;
        while (sl->r)
            sl++;
        int32_t *toks = sl->toks;
        srv_logprob *lps = sl->lps;
        dsk_buf text = sl->text;
        *sl = (slot){.r = r, .seq = seq, .admit_no = s->admissions++, .draft = draft, .toks = toks, .lps = lps,
                     .text = text};
        srv_detok_init(&sl->dt, s->tok, r->gen.stops, r->gen.n_stops);
        s->n_open++;
        s->pool_used += r->reserve;
        pthread_mutex_lock(&s->mu);
        s->n_pending--;
        s->n_running++;
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&r->mu);
        r->admitted = 1;
        r->version++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        metrics_lock(s->m);
        s->m->prompt_tokens += (uint64_t)r->n_prompt;
        metrics_unlock(s->m);
        metrics_observe(s->m, HIST_QUEUE, dsk_now() - r->t_arrival, 1);
    }
}

/* ---- one round ---- */

/* Record one drawn token; returns 1 when the sequence must stop after it (generate.c's emit). */
static int emit(sched *s, slot *sl, int32_t tok, int row)
{
    const srv_gen *g = &sl->r->gen;
    sl->n_out++;
    sl->toks[sl->n_new] = tok;
    if (g->top_logprobs >= 0) {
        srv_logprob *l = &sl->lps[sl->n_new];
        l->id = tok;
        l->lp = s->eo.logprob[row];
        memcpy(l->top_ids, s->eo.top_ids + (int64_t)row * SAMPLE_MAX_TOP_LOGPROBS, sizeof l->top_ids);
        memcpy(l->top_lp, s->eo.top_lp + (int64_t)row * SAMPLE_MAX_TOP_LOGPROBS, sizeof l->top_lp);
    }
    sl->n_new++;
    if (tok == s->info->cfg->eos_token_id && !g->ignore_eos) {
        sl->fin = FIN_STOP;
    } else {
        int stopped = 0;
        if (srv_detok_push(&sl->dt, tok, &sl->text, &stopped))
            sl->fin = FIN_ERROR;
        else if (stopped)
            return sl->fin = FIN_STOP, 1;
        else if (sl->n_out >= g->max_tokens)
            sl->fin = FIN_LENGTH;
    }
    if (sl->fin && sl->fin != FIN_ERROR && srv_detok_finish(&sl->dt, &sl->text))
        sl->fin = FIN_ERROR;
    if (sl->fin == FIN_ERROR)
        srv_req_fail(sl->r, 500, "server_error", NULL, "request %s: decoding token %d: %s", sl->r->id, tok,
                     dsk_err_msg());
    return sl->fin != FIN_NONE;
}

static engine_row row_of(const slot *sl, int32_t token, int64_t pos, int sample)
{
    const srv_gen *g = &sl->r->gen;
    return (engine_row){.seq = sl->seq, .token = token, .pos = pos, .sample = sample, .sp = g->sp,
                        .top_logprobs = sample ? g->top_logprobs : -1};
}

/* One verify window (or decode row) per decoding sequence; the drafts come from one engine_draft call. */
static int decode_rows(sched *s, int n)
{
    int nd = 0;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        sl->n_rows = 0;
        sl->drafted = 0;
        if (sl->r && sl->decoding && sl->draft && sl->r->gen.max_tokens - sl->n_out > 1) {
            s->dreq[nd] = (engine_draft_req){sl->seq, sl->tok, sl->r->gen.sp};
            s->dslot[nd++] = i;
        }
    }
    if (nd) {
        int rc;
        ENGINE_CALL(s, rc, engine_draft(s->e, s->dreq, nd, s->drafts, NULL));
        if (rc)
            for (int d = 0; d < nd; d++)
                fail_slot(s, &s->slots[s->dslot[d]], "drafting");
        else
            for (int d = 0; d < nd; d++)
                s->slots[s->dslot[d]].drafted = d + 1; /* 1 + its index in drafts */
    }
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || !sl->decoding)
            continue;
        int64_t len = engine_seq_len(s->e, sl->seq);
        int k = 1;
        s->rows[n] = row_of(sl, sl->tok, len, 1);
        if (sl->drafted) {
            const int32_t *d = s->drafts + (int64_t)(sl->drafted - 1) * s->B;
            k = 1 + s->B;
            if (k > sl->r->gen.max_tokens - sl->n_out)
                k = sl->r->gen.max_tokens - sl->n_out; /* row j chooses one token: no use running more */
            for (int j = 1; j < k; j++)
                s->rows[n + j] = row_of(sl, d[j - 1], len + j, 1);
        }
        if (len + k > sl->r->reserve)
            k = (int)(sl->r->reserve - len);
        if (k <= 0) { /* the context is full */
            end_slot(s, sl, FIN_LENGTH);
            continue;
        }
        sl->row0 = n;
        sl->n_rows = k;
        n += k;
    }
    return n;
}

/* Up to prefill_chunk prompt rows, to the sequences admitted first. */
static int prompt_rows(sched *s, int n)
{
    int m = 0;
    for (int i = 0; i < s->n_slots; i++) {
        if (!s->slots[i].r || s->slots[i].decoding)
            continue;
        int j = m++;
        while (j > 0 && s->slots[s->order[j - 1]].admit_no > s->slots[i].admit_no) {
            s->order[j] = s->order[j - 1];
            j--;
        }
        s->order[j] = i;
    }
    int budget = s->o.prefill_chunk;
    for (int o = 0; o < m && budget > 0; o++) {
        slot *sl = &s->slots[s->order[o]];
        const srv_req *r = sl->r;
        int k = r->n_prompt - sl->n_fed < budget ? r->n_prompt - sl->n_fed : budget;
        for (int j = 0; j < k; j++) {
            int p = sl->n_fed + j;
            s->rows[n + j] = row_of(sl, r->prompt[p], p, p == r->n_prompt - 1);
        }
        sl->row0 = n;
        sl->n_rows = k;
        n += k;
        budget -= k;
    }
    return n;
}

/* After the step: accept (generate.c's rule) and commit, per sequence. */
static void accept(sched *s, slot *sl)
{
    const int32_t *drawn = s->eo.tokens + sl->row0;
    int rc;
    if (!sl->decoding) {
        ENGINE_CALL(s, rc, engine_commit(s->e, sl->seq, sl->n_fed + sl->n_rows));
        if (rc)
            return fail_slot(s, sl, "committing its prompt");
        sl->n_fed += sl->n_rows;
        if (sl->n_fed == sl->r->n_prompt) {
            sl->decoding = 1;
            sl->tok = drawn[sl->n_rows - 1];
            emit(s, sl, sl->tok, sl->row0 + sl->n_rows - 1);
        }
        return;
    }
    int64_t len = s->rows[sl->row0].pos;
    /* row j's own draw is the token at position len + j + 1; a draft survives only if it equals it */
    int j = 0;
    for (;; j++) {
        sl->tok = drawn[j];
        if (emit(s, sl, sl->tok, sl->row0 + j) || j + 1 >= sl->n_rows || s->rows[sl->row0 + j + 1].token != sl->tok)
            break;
    }
    if (sl->drafted) {
        metrics_lock(s->m);
        s->m->draft_proposed += (uint64_t)(sl->n_rows - 1);
        s->m->draft_accepted += (uint64_t)j;
        metrics_unlock(s->m);
    }
    ENGINE_CALL(s, rc, engine_commit(s->e, sl->seq, len + j + 1));
    if (rc)
        fail_slot(s, sl, "committing its tokens");
}

static void round_once(sched *s)
{
    double t0 = dsk_now(), c0 = thread_cpu();
    s->engine_s = s->engine_cpu = 0;
    int n = prompt_rows(s, decode_rows(s, 0));
    if (n == 0)
        return;
    int rc;
    ENGINE_CALL(s, rc, engine_step(s->e, s->rows, n, &s->eo));
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || !sl->n_rows)
            continue;
        if (rc)
            fail_slot(s, sl, "the engine step failed");
        else
            accept(s, sl);
    }
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || (!sl->n_new && !sl->fin))
            continue;
        publish(s, sl);
        if (sl->fin)
            release(s, sl);
    }
    double total = dsk_now() - t0, cpu = thread_cpu() - c0;
    metrics_lock(s->m);
    s->m->rounds++;
    s->m->round_rows += (uint64_t)n;
    s->m->engine_s += s->engine_s;
    s->m->overhead_s += total > s->engine_s ? total - s->engine_s : 0;
    s->m->overhead_cpu_s += cpu > s->engine_cpu ? cpu - s->engine_cpu : 0;
    metrics_unlock(s->m);
}

static void gauges(sched *s)
{
    metrics_lock(s->m);
    s->m->running = s->n_open;
    s->m->queued = s->n_waiting;
    s->m->seqs_open = s->n_open;
    s->m->pool_used = s->pool_used;
    s->m->pool_total = s->info->pool;
    metrics_unlock(s->m);
}

static void *sched_main(void *arg)
{
    sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop && !s->head && !s->n_open && !s->n_waiting)
            srv_cond_wait_ms(&s->cv, &s->mu, 250);
        task *t = s->head;
        s->head = s->tail = NULL;
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        drain(s, t);
        if (stop)
            break;
        expire(s);
        admit(s);
        if (s->n_open)
            round_once(s);
        gauges(s);
    }
    while (s->n_waiting) {
        srv_req *r = s->waiting[0];
        pop_waiting(s);
        finish_unadmitted(s, r, FIN_CANCELLED);
    }
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].r)
            end_slot(s, &s->slots[i], FIN_CANCELLED);
    gauges(s);
    return NULL;
}

/* ---- life cycle ---- */

static void sched_free(sched *s)
{
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        dsk_buf_free(&s->slots[i].text);
        free(s->slots[i].toks);
        free(s->slots[i].lps);
    }
    free(s->slots);
    free(s->waiting);
    free(s->rows);
    free(s->eo.tokens);
    free(s->eo.logprob);
    free(s->eo.top_ids);
    free(s->eo.top_lp);
    free(s->drafts);
    free(s->dreq);
    free(s->dslot);
    free(s->order);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int sched_start(engine *e, const dsk_tokenizer *tok, const sched_opts *o, srv_metrics *m, sched **out)
{
    sched *s = dsk_calloc(1, sizeof *s);
    if (!s)
        return -1;
    if (pthread_mutex_init(&s->mu, NULL)) {
        free(s);
        return dsk_err("scheduler: pthread_mutex_init failed");
    }
    if (srv_cond_init(&s->cv)) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return -1;
    }
    s->e = e;
    s->info = engine_get_info(e);
    s->tok = tok;
    s->o = *o;
    s->m = m;
    s->B = s->info->draft_block;
    s->window = 1 + (o->draft ? s->B : 0);
    s->n_slots = s->info->max_seqs;
    s->cap_rows = o->prefill_chunk + s->n_slots * s->window;
    if (s->cap_rows > s->info->max_rows) {
        dsk_err("scheduler: a round may carry %d rows (prefill chunk %d + %d sequences x %d), the engine takes %d",
                s->cap_rows, o->prefill_chunk, s->n_slots, s->window, s->info->max_rows);
        sched_free(s);
        return -1;
    }
    int B = s->B > 0 ? s->B : 1, R = s->cap_rows;
    s->slots = dsk_calloc((size_t)s->n_slots, sizeof *s->slots);
    s->waiting = dsk_calloc((size_t)o->max_queue + 1, sizeof *s->waiting);
    s->rows = dsk_calloc((size_t)R, sizeof *s->rows);
    s->eo.tokens = dsk_calloc((size_t)R, sizeof(int32_t));
    s->eo.logprob = dsk_calloc((size_t)R, sizeof(float));
    s->eo.top_ids = dsk_calloc((size_t)R * SAMPLE_MAX_TOP_LOGPROBS, sizeof(int32_t));
    s->eo.top_lp = dsk_calloc((size_t)R * SAMPLE_MAX_TOP_LOGPROBS, sizeof(float));
    s->drafts = dsk_calloc((size_t)s->n_slots * B, sizeof(int32_t));
    s->dreq = dsk_calloc((size_t)s->n_slots, sizeof *s->dreq);
    s->dslot = dsk_calloc((size_t)s->n_slots, sizeof(int));
    s->order = dsk_calloc((size_t)s->n_slots, sizeof(int));
    int ok = s->slots && s->waiting && s->rows && s->eo.tokens && s->eo.logprob && s->eo.top_ids && s->eo.top_lp &&
             s->drafts && s->dreq && s->dslot && s->order;
    for (int i = 0; ok && i < s->n_slots; i++) {
        s->slots[i].toks = dsk_calloc((size_t)s->window + 1, sizeof(int32_t));
        s->slots[i].lps = dsk_calloc((size_t)s->window + 1, sizeof(srv_logprob));
        ok = s->slots[i].toks && s->slots[i].lps;
    }
    if (!ok) {
        sched_free(s);
        return dsk_err_ctx("scheduler");
    }
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        sched_free(s);
        return dsk_err("scheduler: pthread_create failed");
    }
    s->started = 1;
    *out = s;
    return 0;
}

void sched_stop(sched *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->started)
        pthread_join(s->thread, NULL);
    sched_free(s);
}
