/* One scheduler round (sched_internal.h): draft for every decoding sequence that drafts (one engine_draft
 * call), build one step (decode rows and verify windows first, then prompt chunks), run it, accept and
 * commit per sequence as generate.c does, publish each request's new tokens and text under its own lock,
 * free the slots that ended (their sequences kept in the prompt cache when they ended normally). */
#include "runtime/common/error.h"
#include "runtime/server/sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- publishing ---- */

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

/* Free the slot: its sequence goes to the prompt cache when the request ended normally, else it is closed;
 * the request must have been published as done. */
static void release(sched *s, slot *sl)
{
    if (!sched_cache_keep(s, sl)) {
        engine_seq_close(s->e, sl->seq);
        s->pool_used -= sl->reserve;
    }
    srv_cseq_close(&sl->cs); /* every end (finish, cancel, disconnect, error, stop) passes here */
    s->n_open--;
    srv_detok_free(&sl->dt);
    srv_req_unref(sl->r);
    sl->r = NULL;
    pthread_mutex_lock(&s->mu);
    s->n_running--;
    pthread_mutex_unlock(&s->mu);
}

void sched_end_slot(sched *s, slot *sl, int fin)
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

/* ---- the round ---- */

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
    /* a constrained reply: the token was drawn under its mask, so the grammar takes it; its EOS ends the
     * reply even with ignore_eos (nothing may follow it) */
    if (g->grammar && srv_cseq_advance(s->o.genv, sl->cs.m, &sl->cs.active, tok)) {
        srv_req_fail(sl->r, 500, "server_error", NULL, "request %s: the grammar refused the drawn token %d: %s",
                     sl->r->id, tok, dsk_err_msg());
        return sl->fin = FIN_ERROR, 1;
    }
    if (tok == s->info->cfg->eos_token_id && (!g->ignore_eos || g->grammar)) {
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

/* Structured output: the masks of a sequence's rows in this round, row j's from the matcher advanced
 * through the window's drafts before it and for the budget left after them (so exactly the mask the same
 * draw gets without drafting). A draft outside row j's mask can never equal row j's draw, so the rows
 * after it cannot be accepted: they get row j's mask (their draws are never read), as a mismatch would
 * end the window there. */
static int constrain_window(sched *s, slot *sl)
{
    const srv_genv *env = s->o.genv;
    srv_cseq *c = &sl->cs;
    int active = c->active, k = sl->n_rows;
    if (grammar_matcher_copy(c->walk, c->m))
        return -1;
    for (int j = 0; j < k; j++) {
        uint32_t *mask = c->masks + env->words * (size_t)j;
        if (srv_cseq_mask(env, c, c->walk, active, (int64_t)sl->r->gen.max_tokens - sl->n_out - j, mask))
            return -1;
        s->grammar_masks++;
        if (j + 1 == k)
            break;
        int32_t d = s->rows[sl->row0 + j + 1].token;
        if (!srv_mask_has(mask, d) || d == env->eos) {
            s->grammar_cut += (uint64_t)(k - j - 1);
            for (int t = j + 1; t < k; t++)
                memcpy(c->masks + env->words * (size_t)t, mask, sizeof(uint32_t) * env->words);
            break;
        }
        if (srv_cseq_advance(env, c->walk, &active, d))
            return -1;
    }
    return 0;
}

/* The step's fill (engine_step_fill): every constrained slot's masks, written while the forward runs. A
 * slot whose masks cannot be made draws under all-ones masks and fails after the step; the others go on. */
static int fill_masks(void *ctx)
{
    sched *s = ctx;
    const srv_genv *env = s->o.genv;
    double t0 = dsk_now();
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || !sl->n_rows || sl->fill == FILL_NONE)
            continue;
        int rc = sl->fill == FILL_WINDOW
                     ? constrain_window(s, sl)
                     : srv_cseq_mask(env, &sl->cs, sl->cs.m, sl->cs.active, sl->r->gen.max_tokens, sl->cs.masks);
        if (sl->fill == FILL_FIRST && !rc)
            s->grammar_masks++;
        if (rc) {
            snprintf(s->fill_err, sizeof s->fill_err, "%s", dsk_err_msg());
            sl->fill_failed = 1;
            memset(sl->cs.masks, 0xff, sizeof(uint32_t) * env->words * (size_t)(sl->fill == FILL_WINDOW ? sl->n_rows : 1));
        }
    }
    s->grammar_s += dsk_now() - t0;
    return 0;
}

/* Whether a decoding stream is SCHED_AHEAD tokens ahead of what its writer took. */
static int held(const slot *sl)
{
    srv_req *r = sl->r;
    if (!r->stream)
        return 0;
    pthread_mutex_lock(&r->mu);
    int ahead = r->n_tokens - r->n_taken;
    pthread_mutex_unlock(&r->mu);
    return ahead >= SCHED_AHEAD;
}

/* One verify window (or decode row) per decoding sequence; the drafts come from one engine_draft call. */
static int decode_rows(sched *s, int n)
{
    int nd = 0;
    s->n_held = 0;
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        sl->n_rows = 0;
        sl->drafted = 0;
        sl->fill = FILL_NONE;
        sl->fill_failed = 0;
        sl->held = sl->r && sl->decoding && held(sl);
        s->n_held += sl->held;
        if (sl->r && sl->decoding && !sl->held && sl->draft && sl->r->gen.max_tokens - sl->n_out > 1) {
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
        if (!sl->r || !sl->decoding || sl->held)
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
            sched_end_slot(s, sl, FIN_LENGTH);
            continue;
        }
        if (sl->r->gen.grammar) { /* the masks are made while the step runs (fill_masks) */
            for (int j = 0; j < k; j++)
                s->rows[n + j].allow = sl->cs.masks + s->o.genv->words * (size_t)j;
            sl->fill = FILL_WINDOW;
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
        /* the first token's draw: the grammar's first mask (thinking's, when the reply reasons first), made
         * while the step runs */
        if (r->gen.grammar && sl->n_fed + k == r->n_prompt) {
            s->rows[n + k - 1].allow = sl->cs.masks;
            sl->fill = FILL_FIRST;
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

int sched_round(sched *s)
{
    double t0 = dsk_now(), c0 = thread_cpu();
    s->engine_s = s->engine_cpu = s->grammar_s = 0;
    s->grammar_masks = s->grammar_cut = 0;
    int n = prompt_rows(s, decode_rows(s, 0));
    if (n == 0)
        return 0;
    int rc, fills = 0;
    for (int i = 0; i < s->n_slots; i++)
        fills += s->slots[i].r && s->slots[i].n_rows && s->slots[i].fill != FILL_NONE;
    engine_fill fill = {fill_masks, s};
    ENGINE_CALL(s, rc, engine_step_fill(s->e, s->rows, n, &s->eo, fills ? &fill : NULL));
    for (int i = 0; i < s->n_slots; i++) { /* what ran counts for the rollback window, even on a failure */
        slot *sl = &s->slots[i];
        if (sl->r && sl->n_rows && s->rows[sl->row0].pos + sl->n_rows > sl->hi)
            sl->hi = s->rows[sl->row0].pos + sl->n_rows;
    }
    /* the Engram store's counters, before any reply of this round goes out (a failed read is counted by
     * the time its request's error is seen) */
    engine_engram_stats eg;
    engine_engram_counters(s->e, &eg);
    metrics_lock(s->m);
    s->m->engram = eg;
    metrics_unlock(s->m);
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->r || !sl->n_rows)
            continue;
        if (rc)
            fail_slot(s, sl, "the engine step failed");
        else if (sl->fill_failed) {
            dsk_err("%s", s->fill_err);
            fail_slot(s, sl, "structured output");
        } else
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
    s->m->grammar_masks += s->grammar_masks;
    s->m->grammar_draft_cut += s->grammar_cut;
    s->m->grammar_s += s->grammar_s;
    s->m->round_rows += (uint64_t)n;
    s->m->engine_s += s->engine_s;
    s->m->overhead_s += total > s->engine_s ? total - s->engine_s : 0;
    s->m->overhead_cpu_s += cpu > s->engine_cpu ? cpu - s->engine_cpu : 0;
    metrics_unlock(s->m);
    return n;
}
