/* Tensor-parallel ranks behind the engine interface (docs/ranks.md). On rank 0 a wrapper backend sends
 * every call to the followers as a plan message, then runs it on its own backend; a follower runs the
 * same calls in the same order on its backend. Both hold identical activations (the exchanges sum in
 * rank order), so both draw the same tokens; after every step and draft the ranks agree on its outcome
 * (one exchange of the status), so a failure on one rank (an Engram read error) fails the step on all of
 * them and the group goes on, while a rank that dies or aborts stops every rank. */
#include "runtime/common/error.h"
#include "runtime/engine/backend.h"
#include "runtime/ranks/group.h"
#include "runtime/common/util.h"

#include <limits.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

enum { PLAN_SHUTDOWN = 0, PLAN_SEQ_OPEN, PLAN_SEQ_CLOSE, PLAN_STEP, PLAN_COMMIT, PLAN_DRAFT, PLAN_IMAGE };

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
    int vocab;
    int draft_block;
    const model_config *cfg;
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

/* One row as it crosses the channel (pointers replaced by an index into the masks that follow). */
typedef struct {
    int32_t seq, token, sample, top_logprobs;
    int64_t pos;
    sample_params sp;
    int32_t allow; /* -1, or the index of this row's mask among the message's masks */
    int32_t pad;
} wire_row;

typedef struct {
    int32_t n, want_taps, masks, pad;
} step_head;

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

static int tp_seq_open(void *impl, int seq, int64_t reserve, unsigned flags)
{
    tp_backend *t = impl;
    struct {
        int32_t seq;
        uint32_t flags;
        int64_t reserve;
    } m = {seq, flags, reserve};
    if (rank_plan_send(t->g, PLAN_SEQ_OPEN, &m, sizeof m))
        return -1;
    return agree(t, t->ops->seq_open(t->impl, seq, reserve, flags));
}

static void tp_seq_close(void *impl, int seq)
{
    tp_backend *t = impl;
    int32_t s = seq;
    rank_plan_send(t->g, PLAN_SEQ_CLOSE, &s, sizeof s);
    t->ops->seq_close(t->impl, seq);
}

static int tp_step(void *impl, const engine_row *rows, int n, engine_out *out, const engine_fill *fill)
{
    tp_backend *t = impl;
    /* every rank draws under the masks, so they go out with the plan: written before it, not beside the
     * forward (nothing has been sent yet when the fill fails: the other ranks never see this step) */
    if (engine_fill_run(fill))
        return -1;
    size_t words = (size_t)(t->vocab + 31) / 32;
    int masks = 0;
    for (int i = 0; i < n; i++)
        masks += rows[i].allow != NULL;
    size_t bytes = sizeof(step_head) + sizeof(wire_row) * (size_t)n + sizeof(uint32_t) * words * (size_t)masks;
    unsigned char *msg = dsk_malloc(bytes);
    if (!msg)
        return -1;
    step_head h = {n, out->taps != NULL, masks, 0};
    memcpy(msg, &h, sizeof h);
    wire_row *w = (wire_row *)(msg + sizeof h);
    uint32_t *mk = (uint32_t *)(w + n);
    for (int i = 0, m = 0; i < n; i++) {
        w[i] = (wire_row){rows[i].seq, rows[i].token, rows[i].sample, rows[i].top_logprobs, rows[i].pos, rows[i].sp,
                          rows[i].allow ? m : -1, 0};
        if (rows[i].allow)
            memcpy(mk + words * (size_t)m++, rows[i].allow, sizeof(uint32_t) * words);
    }
    int rc = rank_plan_send(t->g, PLAN_STEP, msg, bytes);
    free(msg);
    if (rc)
        return -1;
    return agree(t, local_step(t, rows, n, out));
}

static int tp_commit(void *impl, int seq, int64_t old_len, int64_t len)
{
    tp_backend *t = impl;
    struct {
        int32_t seq, pad;
        int64_t old_len, len;
    } m = {seq, 0, old_len, len};
    if (rank_plan_send(t->g, PLAN_COMMIT, &m, sizeof m))
        return -1;
    return agree(t, t->ops->commit(t->impl, seq, old_len, len));
}

static int tp_draft(void *impl, const engine_draft_req *req, int n, int32_t *drafts, float *conf)
{
    tp_backend *t = impl;
    size_t bytes = sizeof(int32_t) * 2 + sizeof(engine_draft_req) * (size_t)n;
    unsigned char *msg = dsk_malloc(bytes);
    if (!msg)
        return -1;
    int32_t head[2] = {n, conf != NULL};
    memcpy(msg, head, sizeof head);
    memcpy(msg + sizeof head, req, sizeof(engine_draft_req) * (size_t)n);
    int rc = rank_plan_send(t->g, PLAN_DRAFT, msg, bytes);
    free(msg);
    if (rc)
        return -1;
    return agree(t, t->ops->draft(t->impl, req, n, drafts, conf));
}

/* An image: its patches cross the channel and every rank runs the whole tower on them (vision.md §3.8: the
 * tower is replicated; the same code on the same bits gives every rank the same span rows). */
typedef struct {
    int32_t seq, n_vit_h, n_vit_w, patch_values; /* patch_values: 3·patch² */
    int64_t pos;
    uint64_t key;
} image_head;

static int tp_image(void *impl, int seq, int64_t pos, const engine_image *img)
{
    tp_backend *t = impl;
    const model_config *c = t->cfg;
    image_head h = {seq, img->n_vit_h, img->n_vit_w, 3 * c->vision_patch_size * c->vision_patch_size, pos, img->key};
    size_t pb = sizeof(uint16_t) * (size_t)img->n_vit_h * img->n_vit_w * h.patch_values;
    unsigned char *msg = dsk_malloc(sizeof h + pb);
    if (!msg)
        return -1;
    memcpy(msg, &h, sizeof h);
    memcpy(msg + sizeof h, img->patches, pb);
    int rc = rank_plan_send(t->g, PLAN_IMAGE, msg, sizeof h + pb);
    free(msg);
    if (rc)
        return -1;
    return agree(t, t->ops->image(t->impl, seq, pos, img));
}

static int follow_image(tp_backend *t, const unsigned char *msg, size_t bytes)
{
    image_head h;
    if (bytes < sizeof h)
        return agree(t, dsk_err("an image plan of %zu bytes has no header", bytes));
    memcpy(&h, msg, sizeof h);
    if (h.n_vit_h < 1 || h.n_vit_w < 1 || h.patch_values < 1 ||
        bytes != sizeof h + sizeof(uint16_t) * (size_t)h.n_vit_h * h.n_vit_w * h.patch_values)
        return agree(t, dsk_err("an image plan of %zu bytes does not hold a %d x %d patch grid", bytes, h.n_vit_h,
                                h.n_vit_w));
    uint16_t *patches = dsk_malloc(bytes - sizeof h); /* aligned for the tower's reads */
    if (!patches)
        return agree(t, -1);
    memcpy(patches, msg + sizeof h, bytes - sizeof h);
    engine_image img = {patches, h.n_vit_h, h.n_vit_w, h.key};
    int rc = agree(t, t->ops->image(t->impl, h.seq, h.pos, &img));
    free(patches);
    return rc;
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
                       "--kit", o->kit ? o->kit : "", NULL};
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
    t->vocab = a->info->cfg->vocab_size;
    t->cfg = a->info->cfg;
    t->draft_block = a->info->draft_block;
    *impl = t;
    *ops = t->follower ? &follower_ops : &tp_ops;
    return 0;
}

/* ---- a follower ---- */

static int follow_step(tp_backend *t, const unsigned char *msg, size_t bytes)
{
    step_head h;
    memcpy(&h, msg, sizeof h);
    size_t words = (size_t)(t->vocab + 31) / 32;
    if (bytes != sizeof h + sizeof(wire_row) * (size_t)h.n + sizeof(uint32_t) * words * (size_t)h.masks)
        return dsk_err("a step plan of %zu bytes does not hold %d rows and %d masks", bytes, h.n, h.masks);
    const wire_row *w = (const wire_row *)(msg + sizeof h);
    const uint32_t *mk = (const uint32_t *)(w + h.n);
    engine_row *rows = dsk_malloc(sizeof *rows * (size_t)(h.n > 0 ? h.n : 1));
    int32_t *tokens = dsk_malloc(sizeof(int32_t) * (size_t)(h.n > 0 ? h.n : 1));
    uint16_t *taps = NULL;
    if (!rows || !tokens) {
        free(rows);
        free(tokens);
        return -1;
    }
    for (int i = 0; i < h.n; i++)
        rows[i] = (engine_row){.seq = w[i].seq, .token = w[i].token, .pos = w[i].pos, .sample = w[i].sample,
                               .sp = w[i].sp, .allow = w[i].allow >= 0 ? mk + words * (size_t)w[i].allow : NULL,
                               .top_logprobs = w[i].top_logprobs};
    engine_out out = {.tokens = tokens, .taps = taps};
    int rc = agree(t, local_step(t, rows, h.n, &out));
    free(rows);
    free(tokens);
    return rc;
}

int tp_backend_follow(void *impl)
{
    tp_backend *tb = impl, t = *tb;
    rank_group *g = t.g;
    const engine_backend_ops *ops = t.ops;
    void *local = t.impl;
    for (;;) {
        uint32_t type;
        void *p;
        size_t bytes;
        if (rank_plan_recv(g, &type, &p, &bytes))
            return -1;
        const unsigned char *m = p;
        int rc = 0;
        switch (type) {
        case PLAN_SHUTDOWN:
            free(p);
            return 0;
        case PLAN_SEQ_OPEN: {
            struct {
                int32_t seq;
                uint32_t flags;
                int64_t reserve;
            } a;
            memcpy(&a, m, sizeof a);
            rc = agree(&t, ops->seq_open(local, a.seq, a.reserve, a.flags));
            break;
        }
        case PLAN_SEQ_CLOSE: {
            int32_t s;
            memcpy(&s, m, sizeof s);
            ops->seq_close(local, s);
            break;
        }
        case PLAN_STEP:
            rc = follow_step(&t, m, bytes);
            break;
        case PLAN_IMAGE:
            rc = follow_image(&t, m, bytes);
            break;
        case PLAN_COMMIT: {
            struct {
                int32_t seq, pad;
                int64_t old_len, len;
            } a;
            memcpy(&a, m, sizeof a);
            rc = agree(&t, ops->commit(local, a.seq, a.old_len, a.len));
            break;
        }
        case PLAN_DRAFT: {
            int32_t head[2];
            memcpy(head, m, sizeof head);
            int n = head[0];
            int32_t *d = dsk_malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1) * (size_t)(t.draft_block + 1));
            float *conf = dsk_malloc(sizeof(float) * (size_t)(n > 0 ? n : 1) * (size_t)(t.draft_block + 1));
            rc = d && conf ? agree(&t, ops->draft(local, (const engine_draft_req *)(m + sizeof head), n, d,
                                                  head[1] ? conf : NULL))
                           : -1;
            free(d);
            free(conf);
            break;
        }
        default:
            rc = dsk_err("an unknown plan message (type %u)", type);
        }
        free(p);
        (void)rc; /* a failed call failed on every rank (agree); the group goes on */
        if (rank_group_xchg(g)->aborted(rank_group_xchg(g)))
            return -1;
    }
}
