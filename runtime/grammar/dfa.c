/* Subset construction for one rule's NFA (calls are symbols of their own, taken lazily by the
 * matcher), intersection of two small DFAs (strings with several constraints), and copying a DFA
 * back into an NFA. */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/grammar/grammar_internal.h"

#include <stdlib.h>
#include <string.h>

void dfa_free(gr_dfa *d)
{
    free(d->next);
    free(d->accept);
    free(d->call_off);
    free(d->calls);
    *d = (gr_dfa){0};
}

/* Grow *p (of *cap elements of size elem) to hold need. */
static int reserve(void *pp, size_t *cap, size_t need, size_t elem)
{
    void **p = pp;
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *q = dsk_realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* ---- sets of NFA states, interned ---- */

typedef struct {
    uint32_t *pool; /* all sets back to back */
    size_t pool_len, pool_cap;
    uint32_t *off, *len; /* [n] */
    size_t n, cap;
    uint32_t *slot; /* open addressing: id + 1, 0 = empty */
    size_t mask;
} set_table;

static uint64_t set_hash(const uint32_t *s, uint32_t n)
{
    return dsk_xxh64(s, (size_t)n * sizeof *s);
}

/* The id of set s[0..n) (sorted), adding it if new (*added = 1). */
static int intern(set_table *t, const uint32_t *s, uint32_t n, uint32_t *id, int *added)
{
    if (2 * (t->n + 1) > t->mask + 1) { /* rehash at half load */
        size_t m = t->mask ? 2 * (t->mask + 1) : 1024;
        uint32_t *slot = dsk_calloc(m, sizeof *slot);
        if (!slot)
            return -1;
        for (size_t i = 0; i < t->n; i++) {
            size_t h = set_hash(t->pool + t->off[i], t->len[i]) & (m - 1);
            while (slot[h])
                h = (h + 1) & (m - 1);
            slot[h] = (uint32_t)i + 1;
        }
        free(t->slot);
        t->slot = slot;
        t->mask = m - 1;
    }
    size_t h = set_hash(s, n) & t->mask;
    for (; t->slot[h]; h = (h + 1) & t->mask) {
        uint32_t k = t->slot[h] - 1;
        if (t->len[k] == n && !memcmp(t->pool + t->off[k], s, n * sizeof *s)) {
            *id = k;
            *added = 0;
            return 0;
        }
    }
    size_t cap = t->cap;
    if (reserve(&t->pool, &t->pool_cap, t->pool_len + n, sizeof *t->pool) ||
        reserve(&t->off, &t->cap, t->n + 1, sizeof *t->off))
        return -1;
    if (t->cap != cap) { /* len grows with off */
        uint32_t *len = dsk_realloc(t->len, t->cap * sizeof *len);
        if (!len)
            return -1;
        t->len = len;
    }
    memcpy(t->pool + t->pool_len, s, n * sizeof *s);
    t->off[t->n] = (uint32_t)t->pool_len;
    t->len[t->n] = n;
    t->pool_len += n;
    t->slot[h] = (uint32_t)t->n + 1;
    *id = (uint32_t)t->n++;
    *added = 1;
    return 0;
}

static void set_table_free(set_table *t)
{
    free(t->pool);
    free(t->off);
    free(t->len);
    free(t->slot);
}

/* ---- subset construction ---- */

typedef struct {
    const gr_nfa *a;
    uint32_t *stamp, gen; /* [a->n] visited marks for closures */
    uint32_t *work;       /* closure stack / result, [a->n] */
} closure_ctx;

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* Epsilon closure of seeds into c->work; returns its size (sorted). */
static uint32_t closure(closure_ctx *c, const uint32_t *seeds, uint32_t n)
{
    const gr_nfa *a = c->a;
    c->gen++;
    uint32_t m = 0, top = 0;
    for (uint32_t i = 0; i < n; i++)
        if (c->stamp[seeds[i]] != c->gen) {
            c->stamp[seeds[i]] = c->gen;
            c->work[m++] = seeds[i];
        }
    while (top < m) { /* the work list doubles as the result: states are appended once */
        uint32_t x = c->work[top++];
        for (uint32_t l = a->link_head[x]; l != GR_NONE; l = a->links[l].next) {
            uint32_t y = a->links[l].to;
            if (a->links[l].rule == GR_NONE && c->stamp[y] != c->gen) {
                c->stamp[y] = c->gen;
                c->work[m++] = y;
            }
        }
    }
    if (m > 1)
        qsort(c->work, m, sizeof *c->work, cmp_u32);
    return m;
}

static void classes(const gr_nfa *a, gr_dfa *d)
{
    uint8_t cut[GR_NSYM + 1] = {0};
    for (uint32_t e = 0; e < a->n_edges; e++) {
        cut[a->edges[e].lo] = 1;
        cut[a->edges[e].hi + 1] = 1;
    }
    int c = -1;
    for (int s = 0; s < GR_NSYM; s++) {
        if (!s || cut[s])
            c++;
        d->cls[s] = (uint16_t)c;
    }
    d->ncls = (uint32_t)c + 1;
}

typedef struct {
    uint32_t rule, to;
} rule_target;

static int cmp_rule_target(const void *x, const void *y)
{
    const rule_target *a = x, *b = y;
    if (a->rule != b->rule)
        return a->rule < b->rule ? -1 : 1;
    return a->to < b->to ? -1 : a->to > b->to;
}

typedef struct {
    const gr_nfa *a;
    gr_dfa *d;
    uint32_t max_states;
    set_table sets;
    closure_ctx cc;
    size_t cap_next, cap_acc, cap_calls, n_calls, cap_call_off;
    uint32_t *cnt, *pos, *targets; /* per-class counting sort */
    size_t cap_targets;
    rule_target *rt;
    size_t cap_rt;
} subset_ctx;

/* The DFA state for closure(seeds); new states get rows. */
static int target_state(subset_ctx *s, const uint32_t *seeds, uint32_t n, uint32_t *id)
{
    uint32_t m = closure(&s->cc, seeds, n);
    int added;
    if (intern(&s->sets, s->cc.work, m, id, &added))
        return -1;
    if (added) {
        if (s->sets.n > s->max_states)
            return dsk_err("the grammar needs more than %u automaton states in one rule (options.max_states)",
                           s->max_states);
        gr_dfa *d = s->d;
        if (reserve(&d->next, &s->cap_next, s->sets.n * d->ncls, sizeof *d->next) ||
            reserve(&d->accept, &s->cap_acc, s->sets.n, 1))
            return -1;
    }
    return 0;
}

static int expand(subset_ctx *s, uint32_t q)
{
    const gr_nfa *a = s->a;
    gr_dfa *d = s->d;
    uint32_t ncls = d->ncls;
    memset(s->cnt, 0, ncls * sizeof *s->cnt);
    size_t total = 0, n_rt = 0;
    uint32_t off = s->sets.off[q], len = s->sets.len[q];
    int accept = 0;
    for (uint32_t i = 0; i < len; i++) {
        uint32_t x = s->sets.pool[off + i];
        accept |= x == a->final;
        for (uint32_t e = a->edge_head[x]; e != GR_NONE; e = a->edges[e].next)
            for (uint32_t c = d->cls[a->edges[e].lo]; c <= d->cls[a->edges[e].hi]; c++, total++)
                s->cnt[c]++;
        for (uint32_t l = a->link_head[x]; l != GR_NONE; l = a->links[l].next)
            n_rt += a->links[l].rule != GR_NONE;
    }
    if (reserve(&s->targets, &s->cap_targets, total + 1, sizeof *s->targets) ||
        reserve(&s->rt, &s->cap_rt, n_rt + 1, sizeof *s->rt))
        return -1;
    uint32_t sum = 0;
    for (uint32_t c = 0; c < ncls; c++) {
        s->pos[c] = sum;
        sum += s->cnt[c];
    }
    n_rt = 0;
    for (uint32_t i = 0; i < len; i++) {
        uint32_t x = s->sets.pool[off + i];
        for (uint32_t e = a->edge_head[x]; e != GR_NONE; e = a->edges[e].next)
            for (uint32_t c = d->cls[a->edges[e].lo]; c <= d->cls[a->edges[e].hi]; c++)
                s->targets[s->pos[c]++] = a->edges[e].to;
        for (uint32_t l = a->link_head[x]; l != GR_NONE; l = a->links[l].next)
            if (a->links[l].rule != GR_NONE)
                s->rt[n_rt++] = (rule_target){a->links[l].rule, a->links[l].to};
    }
    d->accept[q] = (uint8_t)accept;
    /* consecutive classes with the same raw targets (one edge spanning both) share the result */
    uint32_t prev_start = 0, prev_n = 0, prev_id = GR_NONE, start = 0;
    for (uint32_t c = 0; c < ncls; c++) {
        uint32_t n = s->cnt[c], id = GR_NONE;
        if (n) {
            if (prev_id != GR_NONE && prev_n == n &&
                !memcmp(s->targets + prev_start, s->targets + start, n * sizeof *s->targets)) {
                id = prev_id;
            } else {
                if (target_state(s, s->targets + start, n, &id))
                    return -1;
                prev_start = start;
                prev_n = n;
                prev_id = id;
            }
        }
        d->next[(size_t)q * ncls + c] = id;
        start += n;
    }
    /* calls: one DFA call edge per callee rule */
    qsort(s->rt, n_rt, sizeof *s->rt, cmp_rule_target);
    for (size_t i = 0; i < n_rt;) {
        size_t j = i;
        uint32_t seeds[64], k = 0;
        while (j < n_rt && s->rt[j].rule == s->rt[i].rule) {
            if (k == 64)
                return dsk_err("internal: more than 64 return points for one call");
            seeds[k++] = s->rt[j++].to;
        }
        uint32_t id;
        if (target_state(s, seeds, k, &id) ||
            reserve(&d->calls, &s->cap_calls, s->n_calls + 1, sizeof *d->calls))
            return -1;
        d->calls[s->n_calls++] = (gr_dcall){s->rt[i].rule, id};
        i = j;
    }
    if (reserve(&d->call_off, &s->cap_call_off, (size_t)q + 2, sizeof *d->call_off))
        return -1;
    d->call_off[q + 1] = (uint32_t)s->n_calls;
    return 0;
}

int dfa_build(const gr_nfa *a, uint32_t max_states, gr_dfa *d)
{
    *d = (gr_dfa){0};
    classes(a, d);
    subset_ctx s = {.a = a, .d = d, .max_states = max_states};
    s.cc.a = a;
    s.cc.stamp = dsk_calloc(a->n ? a->n : 1, sizeof *s.cc.stamp);
    s.cc.work = dsk_malloc((a->n ? a->n : 1) * sizeof *s.cc.work);
    s.cnt = dsk_malloc(d->ncls * sizeof *s.cnt);
    s.pos = dsk_malloc(d->ncls * sizeof *s.pos);
    int rc = -1;
    if (!s.cc.stamp || !s.cc.work || !s.cnt || !s.pos ||
        reserve(&d->call_off, &s.cap_call_off, 1, sizeof *d->call_off))
        goto done;
    d->call_off[0] = 0;
    uint32_t id;
    if (target_state(&s, &a->start, 1, &id))
        goto done;
    for (uint32_t q = 0; q < s.sets.n; q++)
        if (expand(&s, q))
            goto done;
    d->n = (uint32_t)s.sets.n;
    rc = 0;
done:
    set_table_free(&s.sets);
    free(s.cc.stamp);
    free(s.cc.work);
    free(s.cnt);
    free(s.pos);
    free(s.targets);
    free(s.rt);
    if (rc)
        dfa_free(d);
    return rc;
}

/* ---- intersection ---- */

int dfa_intersect(const gr_dfa *x, const gr_dfa *y, int y_complement, uint32_t max_states, gr_dfa *d)
{
    const uint32_t sink = y->n; /* with y_complement: where y's missing transitions go (not accepting) */
    *d = (gr_dfa){0};
    uint16_t pair_cls[GR_NSYM][2];
    uint32_t nc = 0;
    for (int s = 0; s < GR_NSYM; s++) { /* joint classes: distinct (x class, y class) pairs */
        uint32_t k = 0;
        while (k < nc && !(pair_cls[k][0] == x->cls[s] && pair_cls[k][1] == y->cls[s]))
            k++;
        if (k == nc) {
            pair_cls[nc][0] = x->cls[s];
            pair_cls[nc][1] = y->cls[s];
            nc++;
        }
        d->cls[s] = (uint16_t)k;
    }
    d->ncls = nc;
    uint64_t *key = NULL; /* state -> (x state << 32 | y state) */
    uint32_t *slot = NULL;
    size_t cap_key = 0, cap_next = 0, cap_acc = 0, n = 0, mask = 0;
    int rc = -1;
    /* a plain BFS with an open-addressing map from pair to state */
    mask = 1023;
    slot = dsk_calloc(mask + 1, sizeof *slot);
    if (!slot || reserve(&key, &cap_key, 1, sizeof *key))
        goto done;
    key[0] = 0;
    n = 1;
    slot[dsk_xxh64(&key[0], 8) & mask] = 1;
    for (size_t q = 0; q < n; q++) {
        if (reserve(&d->next, &cap_next, (q + 1) * nc, sizeof *d->next) ||
            reserve(&d->accept, &cap_acc, q + 1, 1))
            goto done;
        uint32_t a = (uint32_t)(key[q] >> 32), b = (uint32_t)key[q];
        int y_acc = b != sink && y->accept[b];
        d->accept[q] = x->accept[a] && (y_complement ? !y_acc : y_acc);
        for (uint32_t c = 0; c < nc; c++) {
            uint32_t ta = x->next[(size_t)a * x->ncls + pair_cls[c][0]];
            uint32_t tb = b == sink ? sink : y->next[(size_t)b * y->ncls + pair_cls[c][1]];
            if (tb == GR_NONE && y_complement)
                tb = sink;
            uint32_t id = GR_NONE;
            if (ta != GR_NONE && tb != GR_NONE) {
                uint64_t kk = (uint64_t)ta << 32 | tb;
                size_t h = dsk_xxh64(&kk, 8) & mask;
                while (slot[h] && key[slot[h] - 1] != kk)
                    h = (h + 1) & mask;
                if (slot[h]) {
                    id = slot[h] - 1;
                } else {
                    if (n >= max_states) {
                        dsk_err("a string's combined constraints need more than %u automaton states "
                                "(options.max_states)", max_states);
                        goto done;
                    }
                    if (reserve(&key, &cap_key, n + 1, sizeof *key))
                        goto done;
                    key[n] = kk;
                    slot[h] = (uint32_t)++n;
                    id = (uint32_t)n - 1;
                    if (2 * n > mask + 1) { /* rehash */
                        size_t m = 2 * (mask + 1);
                        uint32_t *ns = dsk_calloc(m, sizeof *ns);
                        if (!ns)
                            goto done;
                        for (size_t i = 0; i < n; i++) {
                            size_t hh = dsk_xxh64(&key[i], 8) & (m - 1);
                            while (ns[hh])
                                hh = (hh + 1) & (m - 1);
                            ns[hh] = (uint32_t)i + 1;
                        }
                        free(slot);
                        slot = ns;
                        mask = m - 1;
                    }
                }
            }
            d->next[q * nc + c] = id;
        }
    }
    d->n = (uint32_t)n;
    d->call_off = dsk_calloc(n + 1, sizeof *d->call_off);
    rc = d->call_off ? 0 : -1;
done:
    free(key);
    free(slot);
    if (rc)
        dfa_free(d);
    return rc;
}

/* ---- back into an NFA ---- */

void dfa_emit(const gr_dfa *d, gr_nfa *a, uint32_t from, uint32_t to)
{
    uint32_t *st = dsk_malloc((d->n ? d->n : 1) * sizeof *st);
    if (!st) {
        a->failed = 1;
        return;
    }
    for (uint32_t i = 0; i < d->n; i++)
        st[i] = nfa_state(a);
    nfa_eps(a, from, st[0]);
    for (uint32_t i = 0; i < d->n && !a->failed; i++) {
        for (int lo = 0; lo < GR_NSYM;) { /* runs of symbols in one class */
            int hi = lo;
            while (hi + 1 < GR_NSYM && d->cls[hi + 1] == d->cls[lo])
                hi++;
            uint32_t t = d->next[(size_t)i * d->ncls + d->cls[lo]];
            if (t != GR_NONE)
                nfa_edge(a, st[i], st[t], (unsigned)lo, (unsigned)hi);
            lo = hi + 1;
        }
        for (uint32_t k = d->call_off[i]; k < d->call_off[i + 1]; k++)
            nfa_call(a, st[i], st[d->calls[k].to], d->calls[k].rule);
        if (d->accept[i])
            nfa_eps(a, st[i], to);
    }
    free(st);
}
