/* Tensor-parallel ranks behind the engine interface (docs/ranks.md). On rank 0 a wrapper backend sends
 * every call to the followers as a plan message, then runs it on its own backend; a follower runs the
 * same calls in the same order on its backend. Both hold identical activations (the exchanges sum in
 * rank order), so both draw the same tokens; after every step and draft the ranks agree on its outcome
 * (one exchange of the status), so a failure on one rank (an Engram read error) fails the step on all of
 * them and the group goes on, while a rank that dies or aborts stops every rank. The calls cross as plan
 * messages (plan.h); a follower runs only what decodes within the limits and names open sequences, and
 * stops every rank on anything else. */
#include "runtime/common/error.h"
#include "runtime/engine/backend.h"
#include "runtime/ranks/group.h"
#include "runtime/ranks/plan.h"
#include "runtime/common/util.h"

#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* DSKIT_RANK_FAULT (tests only, docs/ranks.md): "R:open" fails rank R's open, "R:step:N" fails its N-th step
 * (as a rank-local error such as an Engram read would), "R:exit:N" makes it exit at its N-th step,
 * "R:stall:N" makes it hang in its N-th step. */
typedef struct {
    int rank;      /* -1: none */
    char what[8];  /* open, step, exit */
    long at;
} rank_fault;

typedef struct {
    rank_group *g;
    const engine_backend_ops *ops; /* the local backend */
    void *impl;
    plan_limits lim; /* what a plan message may hold (both ranks: the same model and options) */
    int follower;
    int a_peer; /* across hosts: this backend opened the group (a follower's own command did not) */
    rank_fault fault;
    long steps;
} tp_backend;

static void read_fault(tp_backend *t)
{
    t->fault.rank = -1;
    const char *f = getenv("DSKIT_RANK_FAULT");
    if (!f || !*f)
        return;
    int r;
    char what[8] = "";
    long at = 0;
    if (sscanf(f, "%d:%7[a-z]:%ld", &r, what, &at) >= 2) {
        t->fault.rank = r;
        snprintf(t->fault.what, sizeof t->fault.what, "%s", what);
        t->fault.at = at;
        fprintf(stderr, "dskit: DSKIT_RANK_FAULT=%s: test-only fault injection is on\n", f);
    }
}

/* The local step, or the injected fault at this rank's N-th step. */
static int local_step(tp_backend *t, const engine_row *rows, int n, engine_out *out)
{
    int me = rank_group_rank(t->g);
    t->steps++;
    int faulty = t->fault.rank == me && t->fault.at == t->steps;
    if (faulty && !strcmp(t->fault.what, "exit"))
        _exit(3);
    while (faulty && !strcmp(t->fault.what, "stall")) /* stuck: the other ranks' exchange bound must end it */
        sleep(1000);
    double t0 = dsk_now();
    /* a rank-local failure runs the whole step (its exchanges stay in step with the other ranks'), then
     * fails it: what a failed Engram read does */
    int rc = t->ops->step(t->impl, rows, n, out, NULL);
    rank_group_round_time(t->g, dsk_now() - t0);
    if (faulty && !strcmp(t->fault.what, "step"))
        return dsk_err("injected fault (DSKIT_RANK_FAULT) at step %ld", t->steps);
    return rc;
}

typedef struct {
    int32_t rc;
    char msg[500];
} status;

/* Every rank's outcome; the first failing rank's message becomes everyone's error. */
static int agree(tp_backend *t, int rc)
{
    rank_xchg *x = rank_group_xchg(t->g);
    status mine = {rc, ""}, all[RANKS_MAX];
    if (rc)
        snprintf(mine.msg, sizeof mine.msg, "%s", dsk_err_msg());
    if (x->allgather(x, &mine, sizeof mine, all))
        return -1;
    for (int r = 0; r < x->tp; r++)
        if (all[r].rc)
            return r == x->rank ? dsk_err("%s", all[r].msg) : dsk_err("rank %d: %s", r, all[r].msg);
    return 0;
}

/* ---- rank 0 ---- */

static void tp_close(void *impl)
{
    tp_backend *t = impl;
    if (t->ops)
        t->ops->close(t->impl);
    if (!t->follower || t->a_peer)
        rank_group_close(t->g);
    free(t);
}

/* Send m to the followers (rank_plan_send), encoded. */
static int send_plan(tp_backend *t, const plan_msg *m)
{
    unsigned char *msg;
    size_t bytes;
    if (plan_encode(m, &t->lim, &msg, &bytes))
        return -1;
    int rc = rank_plan_send(t->g, m->type, msg, bytes);
    free(msg);
    return rc;
}

static int tp_seq_open(void *impl, int seq, int64_t reserve, unsigned flags)
{
    tp_backend *t = impl;
    if (send_plan(t, &(plan_msg){.type = PLAN_SEQ_OPEN, .seq = seq, .flags = flags, .reserve = reserve}))
        return -1;
    return agree(t, t->ops->seq_open(t->impl, seq, reserve, flags));
}

static void tp_seq_close(void *impl, int seq)
{
    tp_backend *t = impl;
    send_plan(t, &(plan_msg){.type = PLAN_SEQ_CLOSE, .seq = seq});
    t->ops->seq_close(t->impl, seq);
}

static int tp_step(void *impl, const engine_row *rows, int n, engine_out *out, const engine_fill *fill)
{
    tp_backend *t = impl;
    /* every rank draws under the masks, so they go out with the plan: written before it, not beside the
     * forward (nothing has been sent yet when the fill fails: the other ranks never see this step) */
    if (engine_fill_run(fill))
        return -1;
    if (send_plan(t, &(plan_msg){.type = PLAN_STEP, .n = n, .want = out->taps != NULL, .rows = rows}))
        return -1;
    return agree(t, local_step(t, rows, n, out));
}

static int tp_commit(void *impl, int seq, int64_t old_len, int64_t len)
{
    tp_backend *t = impl;
    if (send_plan(t, &(plan_msg){.type = PLAN_COMMIT, .seq = seq, .old_len = old_len, .len = len}))
        return -1;
    return agree(t, t->ops->commit(t->impl, seq, old_len, len));
}

static int tp_draft(void *impl, const engine_draft_req *req, int n, int32_t *drafts, float *conf)
{
    tp_backend *t = impl;
    if (send_plan(t, &(plan_msg){.type = PLAN_DRAFT, .n = n, .want = conf != NULL, .drafts = req}))
        return -1;
    return agree(t, t->ops->draft(t->impl, req, n, drafts, conf));
}

/* An image: its patches cross the channel and every rank runs the whole tower on them (vision.md §3.8: the
 * tower is replicated; the same code on the same bits gives every rank the same span rows). */
static int tp_image(void *impl, int seq, int64_t pos, const engine_image *img)
{
    tp_backend *t = impl;
    if (send_plan(t, &(plan_msg){.type = PLAN_IMAGE, .seq = seq, .pos = pos, .image = *img}))
        return -1;
    return agree(t, t->ops->image(t->impl, seq, pos, img));
}

/* rank 0's own store (each rank reads its rows itself) */
static void tp_engram_counters(void *impl, engine_engram_stats *out)
{
    tp_backend *t = impl;
    if (t->ops->engram_counters)
        t->ops->engram_counters(t->impl, out);
}

static const engine_backend_ops tp_ops = {tp_close,  tp_seq_open, tp_seq_close, tp_step,
                                          tp_commit, tp_draft,    tp_image,     tp_engram_counters};

int tp_settings(const engine_opts *o, char *buf, size_t cap)
{
    char model[4096];
    if (!realpath(o->model_dir, model))
        return dsk_err_errno("model folder %s", o->model_dir);
    char cfg_path[4200], *cfg = NULL;
    size_t len = 0;
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", model);
    /* bounded as the config's own load is (MODEL_CONFIG_MAX_BYTES, which this folder may not include):
     * this hash is read before that load */
    if (dsk_read_file_max(cfg_path, (size_t)1 << 20, "model config", &cfg, &len))
        return -1;
    unsigned long long h = (unsigned long long)dsk_xxh64(cfg, len);
    free(cfg);
    /* across hosts the folders may differ in path: the config's hash and the options decide */
    snprintf(buf, cap, "model %s (config.json xxh64 %016llx), backend %s, kit %s, tp %d, sequences %d, rows %d, "
             "context %lld, pool %lld, engram %s",
             o->peer ? "-" : model, h, o->backend ? o->backend : "cpu", o->kit ? o->kit : "-", o->tp, o->max_seqs,
             o->max_rows, (long long)o->context, (long long)o->pool, o->engram ? o->engram : "host");
    return 0;
}

/* The command line rank 0 starts a follower with: the same options ("{RANK}" and "{FD}" filled in by
 * rank_group_open). */
static char **follower_argv(const engine_opts *o)
{
    char num[9][32];
    snprintf(num[0], 32, "%d", o->tp);
    snprintf(num[1], 32, "%d", o->max_seqs);
    snprintf(num[2], 32, "%d", o->max_rows);
    snprintf(num[3], 32, "%lld", (long long)o->context);
    snprintf(num[4], 32, "%lld", (long long)o->pool);
    snprintf(num[5], 32, "%d", o->threads);
    snprintf(num[6], 32, "%zu", o->cache_bytes);
    snprintf(num[7], 32, "%zu", o->engram_cache);
    snprintf(num[8], 32, "%d", o->engram_timeout_ms);
    const char *a[] = {"dskit", "rank-follower", "--fd", "{FD}", "--rank", "{RANK}", "--tp", num[0], "--backend",
                       o->backend ? o->backend : "cpu", "--model", o->model_dir, "--max-seqs", num[1], "--max-rows",
                       num[2], "--context", num[3], "--pool", num[4], "--threads", num[5], "--cache-bytes", num[6],
                       "--engram", o->engram ? o->engram : "host", "--engram-cache", num[7], "--engram-timeout", num[8],
                       "--kit", o->kit ? o->kit : "", "--devices", o->devices ? o->devices : "", NULL};
    size_t n = sizeof a / sizeof a[0];
    char **v = dsk_calloc(n, sizeof *v);
    for (size_t i = 0; v && i + 1 < n; i++)
        if (!(v[i] = dsk_strdup(a[i]))) {
            for (size_t j = 0; j < i; j++)
                free(v[j]);
            free(v);
            return NULL;
        }
    return v;
}

static const engine_backend_ops follower_ops = {tp_close, NULL, NULL, NULL, NULL, NULL, NULL, NULL};

int tp_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops)
{
    const engine_opts *o = a->opts;
    tp_backend *t = dsk_calloc(1, sizeof *t);
    if (!t)
        return -1;
    if (o->rank_group) {
        t->g = o->rank_group;
        t->follower = 1;
    } else if (o->peer) { /* across hosts: this process is the rank it was told */
        char settings[1024];
        if (tp_settings(o, settings, sizeof settings)) {
            free(t);
            return -1;
        }
        rank_group_opts go = {.tp = o->tp, .settings = settings, .peer = o->peer, .rank = o->rank,
                              .timeout_ms = o->rank_timeout_ms};
        if (rank_group_open(&go, &t->g)) {
            free(t);
            return -1;
        }
        t->follower = o->rank > 0;
        t->a_peer = 1;
    } else {
        char settings[1024];
        char **argv = follower_argv(o);
        if (!argv || tp_settings(o, settings, sizeof settings)) {
            free(t);
            return -1;
        }
        rank_group_opts go = {.tp = o->tp, .settings = settings, .follower_argv = argv, .timeout_ms = o->rank_timeout_ms};
        int rc = rank_group_open(&go, &t->g);
        for (int i = 0; argv[i]; i++)
            free(argv[i]);
        free(argv);
        if (rc) {
            free(t);
            return -1;
        }
    }
    engine_backend_args la = *a;
    la.xchg = rank_group_xchg(t->g);
    read_fault(t);
    /* every rank opens its slice; all of them must succeed (one status exchange) */
    int rc = t->fault.rank == la.xchg->rank && !strcmp(t->fault.what, "open")
                 ? dsk_err("injected fault (DSKIT_RANK_FAULT) at open")
                 : engine_local_backend_open(&la, &t->impl, &t->ops);
    if (rc)
        t->ops = NULL;
    if (agree(t, rc)) {
        if (t->ops) /* another rank failed: close this one's backend too */
            t->ops->close(t->impl);
        t->ops = NULL;
        dsk_err_ctx("opening rank %d of %d", la.xchg->rank, o->tp);
        tp_close(t);
        return -1;
    }
    plan_limits_init(&t->lim, a->info->cfg, o->max_rows, o->max_seqs, a->info->context, a->info->draft_block);
    *impl = t;
    *ops = t->follower ? &follower_ops : &tp_ops;
    return 0;
}

/* ---- a follower ---- */

/* A decoded call against the sequences open on this rank (what engine.c checks on rank 0 with its table):
 * a backend indexes its sequences by id and trusts that the engine checked them. */
static int seq_state_error(const unsigned char *open, const plan_msg *m)
{
    char name[16];
    const char *what = plan_type_name(m->type, name);
    switch (m->type) {
    case PLAN_SEQ_OPEN:
        return open[m->seq] ? dsk_err("plan: a %s message for sequence %d, which is open", what, m->seq) : 0;
    case PLAN_SEQ_CLOSE:
    case PLAN_COMMIT:
    case PLAN_IMAGE:
        return open[m->seq] ? 0 : dsk_err("plan: a %s message for sequence %d, which is not open", what, m->seq);
    case PLAN_STEP:
        for (int i = 0; i < m->n; i++)
            if (!open[m->rows[i].seq])
                return dsk_err("plan: a step message: row %d: sequence %d is not open", i, m->rows[i].seq);
        return 0;
    case PLAN_DRAFT:
        for (int i = 0; i < m->n; i++)
            if (!open[m->drafts[i].seq])
                return dsk_err("plan: a draft message: request %d: sequence %d is not open", i, m->drafts[i].seq);
        return 0;
    default: return 0;
    }
}

/* Run one decoded call on this rank's backend; the ranks agree on its outcome as rank 0's call does. */
static int follow_call(tp_backend *t, const plan_msg *m, unsigned char *open)
{
    const engine_backend_ops *ops = t->ops;
    switch (m->type) {
    case PLAN_SEQ_OPEN: {
        int rc = agree(t, ops->seq_open(t->impl, m->seq, m->reserve, m->flags));
        open[m->seq] = rc == 0; /* as rank 0's engine counts it */
        return rc;
    }
    case PLAN_SEQ_CLOSE:
        ops->seq_close(t->impl, m->seq);
        open[m->seq] = 0;
        return 0;
    case PLAN_STEP: {
        int32_t *tokens = dsk_malloc(sizeof(int32_t) * (size_t)m->n);
        if (!tokens)
            return -1;
        engine_out out = {.tokens = tokens};
        int rc = agree(t, local_step(t, m->rows, m->n, &out));
        free(tokens);
        return rc;
    }
    case PLAN_COMMIT: return agree(t, ops->commit(t->impl, m->seq, m->old_len, m->len));
    case PLAN_DRAFT: {
        size_t k = (size_t)(m->n > 0 ? m->n : 1) * (size_t)(t->lim.draft_block + 1);
        int32_t *d = dsk_malloc(sizeof(int32_t) * k);
        float *conf = dsk_malloc(sizeof(float) * k);
        int rc = d && conf ? agree(t, ops->draft(t->impl, m->drafts, m->n, d, m->want ? conf : NULL)) : -1;
        free(d);
        free(conf);
        return rc;
    }
    case PLAN_IMAGE: return agree(t, ops->image(t->impl, m->seq, m->pos, &m->image));
    default: return 0;
    }
}

int tp_backend_follow(void *impl)
{
    tp_backend *tb = impl, t = *tb;
    rank_group *g = t.g;
    rank_xchg *x = rank_group_xchg(g);
    unsigned char *open = dsk_calloc((size_t)t.lim.max_seqs, 1);
    if (!open)
        return -1;
    for (;;) {
        uint32_t type;
        void *p;
        size_t bytes;
        plan_msg m;
        if (rank_plan_recv(g, t.lim.max_bytes, &type, &p, &bytes)) {
            free(open);
            return -1;
        }
        if (plan_decode(type, p, bytes, &t.lim, &m) || seq_state_error(open, &m)) {
            /* rank 0 sends only calls its engine checked: this peer is broken or hostile, and what it
             * expects next is unknown. Every rank stops, told why. */
            x->abort(x, dsk_err_msg());
            plan_msg_free(&m);
            free(p);
            free(open);
            return -1;
        }
        int stop = type == PLAN_SHUTDOWN;
        if (!stop)
            (void)follow_call(&t, &m, open); /* a failed call failed on every rank (agree); the group goes on */
        plan_msg_free(&m);
        free(p);
        if (stop) {
            free(open);
            return 0;
        }
        if (x->aborted(x)) {
            free(open);
            return -1;
        }
    }
}
