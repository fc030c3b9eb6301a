/* The CPU backend behind the engine interface: each step runs every sequence's rows through the exact
 * CPU forward, then draws each sampling row with the sampling reference. A step's fill (structured
 * output's masks) runs on a thread of its own beside the forward and is waited for before the first draw. */
#include "runtime/common/error.h"
#include "runtime/cpu/cpu_model.h"
#include "runtime/cpu/linear.h"
#include "runtime/engine/backend.h"
#include "runtime/ref/sampling.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cpu_seq *s;
    unsigned flags;
    uint16_t *taps;    /* the last step's DSpark taps of this sequence's rows, fed to the drafter on commit */
    int64_t taps_pos0; /* position of taps row 0 */
    int taps_n, taps_cap;
} cpu_slot;

typedef struct {
    cpu_model *m;
    const uint32_t *valid; /* the tokenizer's ids (the engine's) */
    cpu_slot *slots;
    int nslots;
    uint32_t *mask;        /* scratch: valid ∧ a row's allow */
    char device[64];
    /* the step's fill, while it runs on its thread */
    const engine_fill *fill;
    pthread_t filler;
    int filling, fill_rc;
    char fill_err[512];
} cpu_backend;

static void *fill_main(void *arg)
{
    cpu_backend *b = arg;
    b->fill_rc = engine_fill_run(b->fill);
    if (b->fill_rc)
        snprintf(b->fill_err, sizeof b->fill_err, "%s", dsk_err_msg());
    return NULL;
}

/* Start the fill beside the forward (or, when no thread can be had, run it now). */
static int fill_start(cpu_backend *b, const engine_fill *fill)
{
    b->filling = 0;
    if (!fill || !fill->fn)
        return 0;
    b->fill = fill;
    if (pthread_create(&b->filler, NULL, fill_main, b) != 0)
        return engine_fill_run(fill);
    b->filling = 1;
    return 0;
}

/* The masks are written once this returns 0. */
static int fill_wait(cpu_backend *b)
{
    if (!b->filling)
        return 0;
    pthread_join(b->filler, NULL);
    b->filling = 0;
    return b->fill_rc ? dsk_err("%s", b->fill_err) : 0;
}

static void cpu_close(void *impl)
{
    cpu_backend *b = impl;
    for (int i = 0; i < b->nslots; i++) {
        cpu_seq_free(b->slots[i].s);
        free(b->slots[i].taps);
    }
    free(b->slots);
    free(b->mask);
    cpu_model_free(b->m);
    free(b);
}

static int cpu_seq_open_(void *impl, int seq, int64_t reserve, unsigned flags)
{
    cpu_backend *b = impl;
    cpu_slot *sl = &b->slots[seq];
    if (cpu_seq_new(b->m, reserve, &sl->s))
        return -1;
    sl->flags = flags;
    sl->taps_n = 0;
    return 0;
}

static void cpu_seq_close_(void *impl, int seq)
{
    cpu_backend *b = impl;
    cpu_seq_free(b->slots[seq].s);
    free(b->slots[seq].taps);
    memset(&b->slots[seq], 0, sizeof b->slots[seq]);
}

/* The ids a row may draw: the tokenizer's, and the row's allow mask when it has one. */
static const uint32_t *row_mask(cpu_backend *b, const engine_row *r)
{
    if (!r->allow)
        return b->valid;
    int words = (b->m->cfg.vocab_size + 31) / 32;
    for (int w = 0; w < words; w++)
        b->mask[w] = b->valid[w] & r->allow[w];
    return b->mask;
}

/* One sequence's rows [0, n) of a step. */
static int run_seq(cpu_backend *b, const engine_row *rows, int n, engine_out *out, int base)
{
    const model_config *c = &b->m->cfg;
    cpu_slot *sl = &b->slots[rows[0].seq];
    int V = c->vocab_size, tw = c->n_dspark_targets * c->dim, first = n;
    for (int i = n - 1; i >= 0; i--)
        if (rows[i].sample)
            first = i;
    int want_taps = (sl->flags & ENGINE_SEQ_DRAFT) || out->taps;
    int32_t *tokens = dsk_malloc(sizeof(int32_t) * (size_t)n);
    float *logits = first < n ? dsk_malloc(sizeof(float) * (size_t)(n - first) * V) : NULL;
    uint16_t *taps = want_taps ? dsk_malloc(sizeof(uint16_t) * (size_t)n * tw) : NULL;
    int rc = -1;
    if (!tokens || (first < n && !logits) || (want_taps && !taps))
        goto done;
    for (int i = 0; i < n; i++)
        tokens[i] = rows[i].token;
    if (cpu_forward(b->m, sl->s, tokens, n, first, logits, taps) || (first < n && fill_wait(b)))
        goto done;
    for (int i = first; i < n; i++) {
        const engine_row *r = &rows[i];
        int o = base + i;
        if (!r->sample) {
            if (out->tokens)
                out->tokens[o] = -1;
            continue;
        }
        const float *lg = logits + (int64_t)(i - first) * V;
        int32_t t = sample_row(lg, V, &r->sp, r->pos + 1, row_mask(b, r));
        if (t < 0) {
            dsk_err("row %d: no token may be drawn (its allowed ids and the tokenizer's do not meet)", o);
            goto done;
        }
        if (out->tokens)
            out->tokens[o] = t;
        if (out->logits)
            memcpy(out->logits + (int64_t)o * V, lg, sizeof(float) * (size_t)V);
        if (r->top_logprobs >= 0 && out->logprob)
            sample_logprobs(lg, V, b->valid, t, r->top_logprobs, &out->logprob[o],
                            out->top_ids + (int64_t)o * SAMPLE_MAX_TOP_LOGPROBS,
                            out->top_lp + (int64_t)o * SAMPLE_MAX_TOP_LOGPROBS);
    }
    if (out->tokens)
        for (int i = 0; i < first; i++)
            out->tokens[base + i] = -1;
    if (out->taps)
        memcpy(out->taps + (int64_t)base * tw, taps, sizeof(uint16_t) * (size_t)n * tw);
    if (sl->flags & ENGINE_SEQ_DRAFT) {
        free(sl->taps);
        sl->taps = taps;
        taps = NULL;
        sl->taps_pos0 = rows[0].pos;
        sl->taps_n = n;
    }
    rc = 0;
done:
    free(tokens);
    free(logits);
    free(taps);
    return rc;
}

static int cpu_step(void *impl, const engine_row *rows, int n, engine_out *out, const engine_fill *fill)
{
    cpu_backend *b = impl;
    if (fill_start(b, fill))
        return -1;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && rows[j].seq == rows[i].seq)
            j++;
        if (run_seq(impl, rows + i, j - i, out, i)) {
            dsk_err_ctx("sequence %d", rows[i].seq);
            if (b->filling) { /* the fill's own error, if any, is not the first one */
                char keep[512];
                snprintf(keep, sizeof keep, "%s", dsk_err_msg());
                fill_wait(b);
                dsk_err("%s", keep);
            }
            return -1;
        }
        i = j;
    }
    return fill_wait(b); /* a step without draws still runs its fill to the end */
}

static int cpu_commit(void *impl, int seq, int64_t old_len, int64_t len)
{
    cpu_backend *b = impl;
    cpu_slot *sl = &b->slots[seq];
    cpu_seq *s = sl->s;
    if (len < old_len) {
        s->len = len;
        cpu_seq_drop_images(s, len);
        if (s->draft_len > len)
            s->draft_len = len;
        return 0;
    }
    s->len = len;
    if (!(sl->flags & ENGINE_SEQ_DRAFT))
        return 0;
    /* the drafter's rings get the main KV of the newly committed positions, from this step's taps */
    int64_t from = s->draft_len - sl->taps_pos0;
    if (from < 0 || len - sl->taps_pos0 > sl->taps_n)
        return dsk_err("sequence %d: committing %lld..%lld, but the last step ran %lld..%lld", seq,
                       (long long)s->draft_len, (long long)len, (long long)sl->taps_pos0,
                       (long long)(sl->taps_pos0 + sl->taps_n));
    int tw = b->m->cfg.n_dspark_targets * b->m->cfg.dim;
    return cpu_draft_feed(b->m, s, sl->taps + from * tw, (int)(len - s->draft_len));
}

typedef struct {
    const sample_params *sp;
    const uint32_t *valid;
} draft_keys;

/* Drafts are drawn with the keys the target uses at that position. */
static int32_t draft_sample(const float *logits, int vocab, int64_t pos, void *ctx)
{
    const draft_keys *k = ctx;
    return sample_row(logits, vocab, k->sp, pos, k->valid);
}

static int cpu_draft_(void *impl, const engine_draft_req *req, int n, int32_t *drafts, float *conf)
{
    cpu_backend *b = impl;
    int B = b->m->cfg.dspark_block_size;
    for (int i = 0; i < n; i++) {
        draft_keys k = {&req[i].sp, b->valid};
        if (cpu_draft(b->m, b->slots[req[i].seq].s, req[i].t0, draft_sample, &k, drafts + (int64_t)i * B,
                      conf ? conf + (int64_t)i * B : NULL))
            return dsk_err_ctx("drafting for sequence %d", req[i].seq);
    }
    return 0;
}

static int cpu_image(void *impl, int seq, int64_t pos, const engine_image *img)
{
    cpu_backend *b = impl;
    return cpu_seq_image(b->m, b->slots[seq].s, pos, img->patches, img->n_vit_h, img->n_vit_w);
}

static void cpu_engram_counters(void *impl, engine_engram_stats *out)
{
    cpu_backend *b = impl;
    if (!b->m->eg)
        return;
    engram_counters c;
    engram_store_counters(b->m->eg, &c);
    *out = (engine_engram_stats){c.rows,         c.reads,      c.read_bytes, c.cache_hits,
                                    c.cache_misses, c.slow_reads, c.errors,     c.timeouts};
}

static const engine_backend_ops cpu_ops = {cpu_close,  cpu_seq_open_, cpu_seq_close_, cpu_step,
                                           cpu_commit, cpu_draft_,    cpu_image,      cpu_engram_counters};

int cpu_backend_open(const engine_backend_args *a, void **impl, const engine_backend_ops **ops)
{
    const engine_opts *o = a->opts;
    cpu_backend *b = dsk_calloc(1, sizeof *b);
    if (!b)
        return -1;
    linear_set_threads(o->threads > 0 ? o->threads : 2);
    if (cpu_model_load(o->model_dir, o->cache_bytes ? o->cache_bytes : (size_t)4 << 30, &b->m)) {
        free(b);
        return -1;
    }
    if (b->m->cfg.n_engram_layers > 0 && o->engram && strcmp(o->engram, "host")) {
        if (!strcmp(o->engram, "device")) {
            cpu_close(b);
            return dsk_err("--engram device: the cpu backend reads Engram rows from host or nvme:DIR");
        }
        if (cpu_model_engram(b->m, o->model_dir, o->engram, o->engram_cache ? o->engram_cache : (size_t)256 << 20,
                             o->engram_timeout_ms)) {
            cpu_close(b);
            return -1;
        }
    } else if (b->m->cfg.n_engram_layers > 0 && o->engram_timeout_ms > 0)
        b->m->eg_timeout_ms = o->engram_timeout_ms;
    const model_config *c = &b->m->cfg;
    b->m->xchg = a->xchg;
    int tp = a->xchg->tp;
    if (tp > 1 && (c->n_heads % tp || c->o_groups % tp || c->vocab_size % (128 * tp) || c->n_routed_experts % tp ||
                   (c->n_mtp_layers > 0 && c->dspark_n_routed_experts % tp))) {
        cpu_close(b);
        return dsk_err("tp %d: the model's heads (%d), wo_a groups (%d), experts (%d, drafter %d) and vocabulary "
                       "(%d, in blocks of 128) must split evenly",
                       tp, c->n_heads, c->o_groups, c->n_routed_experts, c->dspark_n_routed_experts, c->vocab_size);
    }
    b->valid = a->valid;
    b->nslots = o->max_seqs;
    b->slots = dsk_calloc((size_t)b->nslots, sizeof *b->slots);
    b->mask = dsk_malloc(sizeof(uint32_t) * (size_t)((c->vocab_size + 31) / 32));
    if (!b->slots || !b->mask) {
        cpu_close(b);
        return -1;
    }
    if (tp > 1)
        snprintf(b->device, sizeof b->device, "CPU, %d threads, rank %d of %d", linear_threads(), a->xchg->rank, tp);
    else
        snprintf(b->device, sizeof b->device, "CPU, %d threads", linear_threads());
    engine_info *in = a->info;
    in->cfg = c;
    in->backend = "cpu";
    in->device = b->device;
    in->context = o->context > 0 && o->context < c->max_seq_len ? o->context : c->max_seq_len;
    in->pool = o->pool;
    in->max_rollback = cpu_rollback_spare(c);
    in->draft_block = c->n_mtp_layers > 0 ? c->dspark_block_size : 0;
    *impl = b;
    *ops = &cpu_ops;
    return 0;
}
