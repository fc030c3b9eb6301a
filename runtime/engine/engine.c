/* The engine over its backend: the sequence table, and every check that keeps a backend's state valid
 * (positions follow the committed length, context and pool limits, the rollback window). */
#include "runtime/engine/backend.h"
#include "runtime/common/error.h"
#include "runtime/model/vision_span.h"
#include "runtime/tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int open;
    unsigned flags;
    int64_t reserve; /* positions this sequence may hold */
    int64_t len;     /* committed */
    int64_t ran;     /* end of what has run and may still be committed: len .. ran */
    int64_t hi;      /* one past the highest position ever run (what the window rings have seen) */
    int broken;      /* a failed step left more uncommitted rows than can be rolled back */
    int64_t (*spans)[2]; /* image spans placed: [first position, count] */
    int n_spans;
} seq_slot;

struct engine {
    engine_info info;
    const engine_backend_ops *ops;
    void *impl;
    uint32_t *valid; /* the tokenizer's ids */
    seq_slot *seqs;
    int64_t pool_used;
};

/* The ids the tokenizer has: a padded vocabulary (the release's 129,280 rows against fewer tokens) must
 * never draw an id that cannot be decoded. */
static int valid_mask(const engine_opts *o, int vocab, uint32_t **out, int *n_valid)
{
    uint32_t *m = dsk_calloc((size_t)(vocab + 31) / 32, sizeof(uint32_t));
    if (!m)
        return -1;
    dsk_tokenizer *own = NULL;
    const dsk_tokenizer *tok = o->tokenizer;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", o->model_dir);
    if (!tok && access(path, R_OK) == 0) {
        if (tok_load(path, &own)) {
            free(m);
            return dsk_err_ctx("reading the model's tokenizer");
        }
        tok = own;
    }
    int n = 0;
    for (int32_t id = 0; id < vocab; id++) {
        size_t len;
        if (!tok || tok_bytes(tok, id, &len)) {
            m[id >> 5] |= 1u << (id & 31);
            n++;
        }
    }
    tok_free(own);
    if (n == 0) {
        free(m);
        return dsk_err("the tokenizer has none of the model's %d ids", vocab);
    }
    *out = m;
    *n_valid = n;
    return 0;
}

int engine_open(const engine_opts *opts, engine **out)
{
    engine_opts o = *opts;
    if (!o.backend)
        o.backend = "cpu";
    if (!o.model_dir)
        return dsk_err("engine: no model folder given");
    if (o.max_seqs <= 0)
        o.max_seqs = 16;
    if (o.max_rows <= 0)
        o.max_rows = 4096;
    if (o.max_seqs > 1 << 16)
        return dsk_err("engine: %d sequences asked, at most 65536", o.max_seqs);
    engine *e = dsk_calloc(1, sizeof *e);
    model_config cfg;
    if (!e)
        return -1;
    if (model_config_load(o.model_dir, &cfg) || valid_mask(&o, cfg.vocab_size, &e->valid, &e->info.n_valid)) {
        free(e);
        return -1;
    }
    if (o.tp < 0 || o.tp > 8)
        return dsk_err("engine: %d tensor-parallel ranks asked, 1 to 8 are possible", o.tp);
    engine_backend_args a = {&o, e->valid, &e->info, rank_xchg_single()};
    int rc = o.tp > 1 ? tp_backend_open(&a, &e->impl, &e->ops) : engine_local_backend_open(&a, &e->impl, &e->ops);
    if (rc) {
        free(e->valid);
        free(e);
        return -1;
    }
    e->info.max_seqs = o.max_seqs;
    e->info.max_rows = o.max_rows;
    e->info.vocab = e->info.cfg->vocab_size;
    e->info.takes_images = e->info.cfg->vision_n_layers > 0 && e->ops->image != NULL;
    if (!(e->seqs = dsk_calloc((size_t)o.max_seqs, sizeof *e->seqs))) {
        engine_close(e);
        return -1;
    }
    *out = e;
    return 0;
}

int engine_follow(engine *e)
{
    return tp_backend_follow(e->impl);
}

void engine_close(engine *e)
{
    if (!e)
        return;
    if (e->ops) {
        for (int i = 0; e->seqs && i < e->info.max_seqs; i++)
            if (e->seqs[i].open)
                e->ops->seq_close(e->impl, i);
        e->ops->close(e->impl);
    }
    free(e->seqs);
    free(e->valid);
    free(e);
}

const engine_info *engine_get_info(const engine *e)
{
    return &e->info;
}

int engine_seq_open(engine *e, int64_t reserve, unsigned flags, int *seq)
{
    const engine_info *in = &e->info;
    if (reserve <= 0)
        reserve = in->context;
    if (reserve > in->context)
        return dsk_err("a sequence of %lld positions asked; the context is %lld", (long long)reserve,
                       (long long)in->context);
    if ((flags & ENGINE_SEQ_DRAFT) && in->draft_block == 0)
        return dsk_err("drafting asked, but this model has no DSpark stages");
    if (in->pool > 0 && e->pool_used + reserve > in->pool)
        return dsk_err("the pool holds %lld positions, %lld in use: no room for %lld more", (long long)in->pool,
                       (long long)e->pool_used, (long long)reserve);
    int s = 0;
    while (s < in->max_seqs && e->seqs[s].open)
        s++;
    if (s == in->max_seqs)
        return dsk_err("all %d sequences are in use", in->max_seqs);
    if (e->ops->seq_open(e->impl, s, reserve, flags))
        return dsk_err_ctx("opening sequence %d", s);
    e->seqs[s] = (seq_slot){.open = 1, .flags = flags, .reserve = reserve};
    e->pool_used += reserve;
    *seq = s;
    return 0;
}

static seq_slot *slot(engine *e, int seq)
{
    if (seq < 0 || seq >= e->info.max_seqs || !e->seqs[seq].open) {
        dsk_err("sequence %d is not open", seq);
        return NULL;
    }
    if (e->seqs[seq].broken) {
        dsk_err("sequence %d: a failed step left its state unusable; close it", seq);
        return NULL;
    }
    return &e->seqs[seq];
}

void engine_seq_close(engine *e, int seq)
{
    seq_slot *s = seq >= 0 && seq < e->info.max_seqs && e->seqs[seq].open ? &e->seqs[seq] : NULL;
    if (!s)
        return;
    e->ops->seq_close(e->impl, seq);
    e->pool_used -= s->reserve;
    free(s->spans);
    memset(s, 0, sizeof *s);
}

int64_t engine_seq_len(const engine *e, int seq)
{
    return seq >= 0 && seq < e->info.max_seqs && e->seqs[seq].open ? e->seqs[seq].len : -1;
}

int engine_seq_image(engine *e, int seq, int64_t pos, const engine_image *img, int64_t *span_out)
{
    seq_slot *s = slot(e, seq);
    const model_config *c = e->info.cfg;
    if (!s)
        return -1;
    if (c->vision_n_layers <= 0)
        return dsk_err("sequence %d: this model has no vision tower (vision_config.num_hidden_layers is 0); it "
                       "takes no images",
                       seq);
    if (!e->ops->image)
        return dsk_err("sequence %d: the %s backend does not take images yet (docs/vision.md)", seq, e->info.backend);
    if (!img || !img->patches || img->n_vit_h < 1 || img->n_vit_w < 1)
        return dsk_err("sequence %d: an image without patches", seq);
    int64_t n = vision_span_positions(c->vision_downsample_ratio, img->n_vit_h, img->n_vit_w);
    if (n > c->vision_max_n_token)
        return dsk_err("sequence %d: a %d x %d patch grid makes %lld positions, more than the model's %d", seq,
                       img->n_vit_h, img->n_vit_w, (long long)n, c->vision_max_n_token);
    if (pos < s->len)
        return dsk_err("sequence %d: an image at position %lld, before its committed length %lld", seq,
                       (long long)pos, (long long)s->len);
    if (pos + n > s->reserve)
        return dsk_err("context limit: sequence %d: an image of %lld positions at %lld passes its limit %lld", seq,
                       (long long)n, (long long)pos, (long long)s->reserve);
    for (int i = 0; i < s->n_spans; i++)
        if (pos < s->spans[i][0] + s->spans[i][1] && s->spans[i][0] < pos + n)
            return dsk_err("sequence %d: an image at %lld..%lld overlaps the one at %lld..%lld", seq, (long long)pos,
                           (long long)(pos + n), (long long)s->spans[i][0], (long long)(s->spans[i][0] + s->spans[i][1]));
    int64_t(*sp)[2] = dsk_realloc(s->spans, sizeof *sp * (size_t)(s->n_spans + 1));
    if (!sp)
        return -1;
    s->spans = sp;
    if (e->ops->image(e->impl, seq, pos, img))
        return dsk_err_ctx("sequence %d: the image at position %lld", seq, (long long)pos);
    s->spans[s->n_spans][0] = pos;
    s->spans[s->n_spans][1] = n;
    s->n_spans++;
    if (s->ran > pos) /* rows that ran there as text may not be accepted */
        s->ran = pos;
    if (span_out)
        *span_out = n;
    return 0;
}

/* Whether position p of s is in an image span. */
static int in_span(const seq_slot *s, int64_t p)
{
    for (int i = 0; i < s->n_spans; i++)
        if (p >= s->spans[i][0] && p < s->spans[i][0] + s->spans[i][1])
            return 1;
    return 0;
}

int engine_step(engine *e, const engine_row *rows, int n, engine_out *out)
{
    return engine_step_fill(e, rows, n, out, NULL);
}

int engine_step_fill(engine *e, const engine_row *rows, int n, engine_out *out, const engine_fill *fill)
{
    if (n <= 0 || n > e->info.max_rows)
        return dsk_err("a step carries 1..%d rows, %d given", e->info.max_rows, n);
    /* every sequence's rows: consecutive, from its committed length, once per step, within its limits */
    for (int i = 0; i < n;) {
        seq_slot *s = slot(e, rows[i].seq);
        if (!s)
            return dsk_err_ctx("row %d", i);
        for (int j = 0; j < i; j++)
            if (rows[j].seq == rows[i].seq)
                return dsk_err("row %d: sequence %d appears twice in one step (its rows must be consecutive)", i,
                               rows[i].seq);
        if (s->hi - s->len > e->info.max_rollback)
            return dsk_err("sequence %d: %lld uncommitted rows would be rolled back, more than the %d the window "
                           "rings allow; commit them first",
                           rows[i].seq, (long long)(s->hi - s->len), e->info.max_rollback);
        int j = i;
        for (; j < n && rows[j].seq == rows[i].seq; j++) {
            if (rows[j].pos != s->len + (j - i))
                return dsk_err("row %d: position %lld, but sequence %d continues at %lld", j, (long long)rows[j].pos,
                               rows[j].seq, (long long)(s->len + (j - i)));
            if (engine_row_check(&rows[j], e->info.vocab, j))
                return -1;
            if (s->n_spans && in_span(s, rows[j].pos) && rows[j].token != e->info.cfg->image_token_id)
                return dsk_err("row %d: position %lld of sequence %d is in an image span, whose rows carry "
                               "image_token_id %d, not %d",
                               j, (long long)rows[j].pos, rows[j].seq, e->info.cfg->image_token_id, rows[j].token);
        }
        if (s->len + (j - i) > s->reserve)
            return dsk_err("context limit: sequence %d holds %lld positions, %d more asked, its limit is %lld",
                           rows[i].seq, (long long)s->len, j - i, (long long)s->reserve);
        i = j;
    }
    int rc = e->ops->step(e->impl, rows, n, out, fill);
    /* what ran (or may have run, on a failure) counts for the rollback window */
    for (int i = 0; i < n;) {
        seq_slot *s = &e->seqs[rows[i].seq];
        int j = i;
        while (j < n && rows[j].seq == rows[i].seq)
            j++;
        int64_t end = s->len + (j - i);
        s->hi = end > s->hi ? end : s->hi;
        if (rc == 0)
            s->ran = end;
        else if (s->hi - s->len > e->info.max_rollback)
            s->broken = 1;
        i = j;
    }
    return rc;
}

int engine_commit(engine *e, int seq, int64_t len)
{
    seq_slot *s = slot(e, seq);
    if (!s)
        return -1;
    if (len < 0 || len > s->ran)
        return dsk_err("sequence %d: commit to %lld, but only %lld positions have run", seq, (long long)len,
                       (long long)s->ran);
    if (s->hi - len > e->info.max_rollback)
        return dsk_err("sequence %d: rolling back to %lld from %lld run is %lld rows, more than the %d the window "
                       "rings allow",
                       seq, (long long)len, (long long)s->hi, (long long)(s->hi - len), e->info.max_rollback);
    if (len != s->len && e->ops->commit(e->impl, seq, s->len, len))
        return -1;
    if (len < s->len) {
        s->ran = len; /* rolled-back rows cannot be accepted again */
        int k = 0;    /* and the spans that start past the new end are gone (the backend drops them too) */
        for (int i = 0; i < s->n_spans; i++)
            if (s->spans[i][0] < len) {
                s->spans[k][0] = s->spans[i][0];
                s->spans[k++][1] = s->spans[i][1];
            }
        s->n_spans = k;
    }
    s->len = len;
    return 0;
}

int engine_draft(engine *e, const engine_draft_req *req, int n, int32_t *drafts, float *conf)
{
    for (int i = 0; i < n; i++) {
        seq_slot *s = slot(e, req[i].seq);
        if (!s)
            return -1;
        if (!(s->flags & ENGINE_SEQ_DRAFT))
            return dsk_err("sequence %d was not opened for drafting", req[i].seq);
        if (s->len < 1)
            return dsk_err("sequence %d: drafting needs at least one committed position", req[i].seq);
        if (req[i].t0 < 0 || req[i].t0 >= e->info.vocab)
            return dsk_err("draft %d: token id %d is outside the vocabulary", i, req[i].t0);
    }
    return e->ops->draft(e->impl, req, n, drafts, conf);
}

void engine_engram_counters(engine *e, engine_engram_stats *out)
{
    *out = (engine_engram_stats){0};
    if (e->ops->engram_counters)
        e->ops->engram_counters(e->impl, out);
}
