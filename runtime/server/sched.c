/* The scheduler thread (sched.h): the tasks the HTTP threads post, the queue and admission (a cached
 * sequence reused, or a fresh one: sched_cache.c), the loop (drain tasks, expire, admit, one round:
 * sched_round.c), and its life cycle. */
#include "runtime/server/sched_internal.h"
#include "runtime/common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void sched_wake(sched *s)
{
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int sched_busy(sched *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n_pending + s->n_running;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- tasks and admission ---- */

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
                        sched_end_slot(s, &s->slots[k], FIN_CANCELLED);
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

/* A sequence for r: a cached one whose committed ids (and images) start as r's prompt does, rolled back or
 * extended to the common prefix (*keep), or a fresh one (*keep 0), made room for by evicting idle cached
 * sequences. 1: got one (its reservation counted in pool_used); 0: r must wait; -1: r failed (finished). */
static int sequence_for(sched *s, srv_req *r, int *seq, int64_t *reserve, int64_t *hi, int64_t *keep)
{
    *hi = *keep = 0;
    if (sched_cache_take(s, r, seq, reserve, hi, keep))
        return 1;
    *reserve = sched_fresh_reserve(s, r);
    if (!sched_cache_room(s, *reserve))
        return 0;
    int draft = s->o.draft && s->B > 0, rc;
    /* the gpu's pool can be fragmented even with the positions free: an idle sequence goes first */
    while ((rc = engine_seq_open(s->e, *reserve, draft ? ENGINE_SEQ_DRAFT : 0, seq)) && s->pc.n)
        sched_cache_evict(s, pc_lru(&s->pc));
    if (rc) {
        fprintf(stderr, "dskit serve: request %s: %s\n", r->id, dsk_err_msg());
        srv_req_fail(r, 500, "server_error", NULL, "request %s: opening its sequence: %s", r->id, dsk_err_msg());
        pop_waiting(s);
        finish_unadmitted(s, r, FIN_ERROR);
        return -1;
    }
    s->pool_used += *reserve;
    return 1;
}

/* First come, first served: the head of the queue waits for room rather than being overtaken. */
static void admit(sched *s)
{
    while (s->n_waiting) {
        srv_req *r = s->waiting[0];
        int seq;
        int64_t reserve, hi, keep;
        int got = sequence_for(s, r, &seq, &reserve, &hi, &keep);
        if (got == 0)
            return;
        if (got < 0)
            continue;
        /* its images past the reused prefix (those inside it are the cached sequence's, the same keys at the
         * same places): the tower runs now, each span placed before any of the prompt's rows */
        int k = 0;
        for (; k < r->images.n_images; k++)
            if (r->images.pos[k] >= keep && engine_seq_image(s->e, seq, r->images.pos[k], &r->images.images[k], NULL))
                break;
        if (k < r->images.n_images) {
            fprintf(stderr, "dskit serve: request %s: image %d: %s\n", r->id, k, dsk_err_msg());
            srv_req_fail(r, 500, "server_error", NULL, "request %s: image %d: %s", r->id, k, dsk_err_msg());
            engine_seq_close(s->e, seq);
            s->pool_used -= reserve;
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
        *sl = (slot){.r = r, .seq = seq, .reserve = reserve, .hi = hi, .admit_no = s->admissions++,
                     .n_fed = (int)keep, .draft = s->o.draft && s->B > 0, .toks = toks, .lps = lps, .text = text};
        srv_detok_init(&sl->dt, s->tok, r->gen.stops, r->gen.n_stops);
        if (r->gen.grammar && srv_cseq_open(&sl->cs, s->o.genv, r->gen.grammar, r->gen.think_first, s->window)) {
            fprintf(stderr, "dskit serve: request %s: %s\n", r->id, dsk_err_msg());
            srv_req_fail(r, 500, "server_error", NULL, "request %s: %s", r->id, dsk_err_msg());
            srv_detok_free(&sl->dt);
            engine_seq_close(s->e, seq);
            s->pool_used -= reserve;
            sl->r = NULL;
            finish_unadmitted(s, r, FIN_ERROR);
            continue;
        }
        s->n_open++;
        pthread_mutex_lock(&s->mu);
        s->n_pending--;
        s->n_running++;
        pthread_mutex_unlock(&s->mu);
        pthread_mutex_lock(&r->mu);
        r->admitted = 1;
        r->n_cached = keep;
        r->version++;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->mu);
        metrics_lock(s->m);
        s->m->prompt_tokens += (uint64_t)r->n_prompt;
        if (keep) {
            s->m->cache_hits++;
            s->m->cache_reused += (uint64_t)keep;
        } else if (s->pc.cap)
            s->m->cache_misses++;
        metrics_unlock(s->m);
        metrics_observe(s->m, HIST_QUEUE, dsk_now() - r->t_arrival, 1);
    }
}

static void gauges(sched *s)
{
    metrics_lock(s->m);
    s->m->running = s->n_open;
    s->m->queued = s->n_waiting;
    s->m->held = s->n_open ? s->n_held : 0;
    s->m->seqs_open = s->n_open + s->pc.n;
    s->m->cache_seqs = s->pc.n;
    s->m->cache_positions = 0;
    for (int i = 0; i < s->pc.n; i++)
        s->m->cache_positions += s->pc.e[i].reserve;
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
        int rows = s->n_open ? sched_round(s) : 0;
        gauges(s);
        /* every open sequence is a held stream: wait for a writer to take tokens (sched_wake), a task or
         * a bounded slice, rather than spin */
        if (s->n_open && !rows) {
            pthread_mutex_lock(&s->mu);
            if (!s->stop && !s->head)
                srv_cond_wait_ms(&s->cv, &s->mu, 100);
            pthread_mutex_unlock(&s->mu);
        }
    }
    while (s->n_waiting) {
        srv_req *r = s->waiting[0];
        pop_waiting(s);
        finish_unadmitted(s, r, FIN_CANCELLED);
    }
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].r)
            sched_end_slot(s, &s->slots[i], FIN_CANCELLED);
    sched_cache_clear(s);
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
    pc_free(&s->pc);
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
    if (o->prompt_cache < 0 || o->prompt_cache > s->n_slots) {
        dsk_err("scheduler: a prompt cache of %d sequences asked; the engine opens %d", o->prompt_cache, s->n_slots);
        sched_free(s);
        return -1;
    }
    if (pc_init(&s->pc, o->prompt_cache)) {
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
