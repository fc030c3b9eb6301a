/* The scheduler's prompt cache (sched_internal.h, bookkeeping in prompt_cache.c): at admission the cached
 * sequence a request reuses, committed to the common prefix, or room for a fresh sequence made by
 * evicting idle ones; at a normal end the request's sequence kept with its committed ids and image spans.
 *
 * Reuse is exact because the engine is: a row's result depends only on its sequence's tokens (and spans)
 * up to its position, whether they ran in one step, in chunks or as decode rows, and a roll back within
 * max_rollback restores what the positions below it hold. */
#include "runtime/common/error.h"
#include "runtime/model/vision_span.h"
#include "runtime/server/sched_internal.h"

#include <stdio.h>
#include <stdlib.h>

int64_t sched_fresh_reserve(const sched *s, const srv_req *r)
{
    const engine_info *in = s->info;
    if (s->pc.cap > 0 && (in->pool <= 0 || in->pool / s->n_slots >= in->context))
        return in->context;
    return r->reserve;
}

void sched_cache_evict(sched *s, int i)
{
    engine_seq_close(s->e, s->pc.e[i].seq);
    s->pool_used -= s->pc.e[i].reserve;
    pc_remove(&s->pc, i);
    metrics_lock(s->m);
    s->m->cache_evictions++;
    metrics_unlock(s->m);
}

int sched_cache_room(sched *s, int64_t need)
{
    for (;;) {
        int seq_free = s->n_open + s->pc.n < s->n_slots;
        int pool_free = s->info->pool <= 0 || s->pool_used + need <= s->info->pool;
        if (seq_free && pool_free)
            return 1;
        if (!s->pc.n)
            return 0;
        sched_cache_evict(s, pc_lru(&s->pc));
    }
}

/* r's image spans as the cache compares them; NULL with *n 0 when it has none, NULL with *n -1 when out
 * of memory. */
static pc_span *request_spans(const sched *s, const srv_req *r, int *n)
{
    const engine_prompt *p = &r->images;
    *n = 0;
    if (!p->n_images)
        return NULL;
    pc_span *sp = dsk_malloc(sizeof *sp * (size_t)p->n_images);
    if (!sp) {
        *n = -1;
        return NULL;
    }
    for (int k = 0; k < p->n_images; k++)
        sp[k] = (pc_span){p->pos[k],
                          vision_span_positions(s->info->cfg->vision_downsample_ratio, p->images[k].n_vit_h,
                                                p->images[k].n_vit_w),
                          p->images[k].key};
    *n = p->n_images;
    return sp;
}

int sched_cache_take(sched *s, const srv_req *r, int *seq, int64_t *reserve, int64_t *hi, int64_t *keep)
{
    if (!s->pc.n)
        return 0;
    int n_spans;
    pc_span *spans = request_spans(s, r, &n_spans);
    if (n_spans < 0)
        return 0; /* no memory to compare: a fresh sequence */
    pc_query q = {r->prompt, r->n_prompt, spans, n_spans, r->reserve};
    int i = pc_find(&s->pc, &q, s->info->max_rollback, keep);
    free(spans);
    if (i < 0)
        return 0;
    pc_entry *c = &s->pc.e[i];
    int rc;
    ENGINE_CALL(s, rc, engine_commit(s->e, c->seq, *keep));
    if (rc) { /* not expected (pc_find keeps within the window): the sequence is closed, a fresh one opened */
        fprintf(stderr, "dskit serve: request %s: the prompt cache's sequence %d could not be rolled back to %lld, "
                        "closed: %s\n",
                r->id, c->seq, (long long)*keep, dsk_err_msg());
        sched_cache_evict(s, i);
        return 0;
    }
    *seq = c->seq;
    *reserve = c->reserve;
    *hi = c->hi;
    pc_remove(&s->pc, i); /* the sequence and its reservation go to the request's slot */
    return 1;
}

int sched_cache_keep(sched *s, const slot *sl)
{
    const srv_req *r = sl->r;
    if (!s->pc.cap || (sl->fin != FIN_STOP && sl->fin != FIN_LENGTH))
        return 0;
    /* its committed ids: the prompt, then every drawn token but the last (which never ran) */
    int64_t len = engine_seq_len(s->e, sl->seq), out = len - r->n_prompt;
    if (out < 0 || out > r->n_tokens)
        return 0;
    if (s->pc.n == s->pc.cap)
        sched_cache_evict(s, pc_lru(&s->pc));
    int n_spans;
    pc_span *spans = request_spans(s, r, &n_spans);
    int kept = n_spans >= 0 && !pc_add(&s->pc, sl->seq, sl->reserve, sl->hi, r->prompt, r->n_prompt, r->tokens,
                                       out, spans, n_spans);
    if (!kept)
        fprintf(stderr, "dskit serve: request %s: its sequence is closed, not cached: %s\n", r->id,
                n_spans < 0 ? "out of memory" : dsk_err_msg());
    free(spans);
    return kept;
}

void sched_cache_clear(sched *s)
{
    while (s->pc.n)
        sched_cache_evict(s, s->pc.n - 1);
}
