/* From rules to a grammar: determinize each rule, number all states in one space, and compute for
 * every state the fewest symbols that finish its rule. That distance doubles as the trim: a state
 * with no finite way to its rule's end (or a call into a rule that has none) is dead, so every state
 * a matcher can reach has a completion and "the config is non-empty" means "still a valid prefix". */
#include "runtime/common/error.h"
#include "runtime/grammar/grammar_internal.h"

#include <stdlib.h>
#include <string.h>

#define CELL_LIMIT (16u << 20) /* transition table entries (64 MiB) */
#define INF UINT32_MAX

grammar_options grammar_options_default(void)
{
    return (grammar_options){.max_ws = 16, .max_recursion = 8, .max_states = 200000};
}

int build_init(gr_build *b, const grammar_vocab *v, const grammar_options *opt)
{
    *b = (gr_build){.v = v, .opt = opt ? *opt : grammar_options_default()};
    if (b->opt.max_ws < 0 || b->opt.max_ws > 64)
        return dsk_err("options.max_ws %d is outside 0..64", b->opt.max_ws);
    if (b->opt.max_recursion < 0 || b->opt.max_recursion > GR_MAX_LEVELS)
        return dsk_err("options.max_recursion %d is outside 0..%d", b->opt.max_recursion, GR_MAX_LEVELS);
    if (b->opt.max_states < 16 || b->opt.max_states > 4000000)
        return dsk_err("options.max_states %d is outside 16..4000000", b->opt.max_states);
    /* NFAs run a few times larger than their DFAs (epsilon chains, duplicated paths) */
    b->budget = 8 * (int64_t)b->opt.max_states;
    uint32_t root;
    return build_rule(b, &root);
}

int build_rule(gr_build *b, uint32_t *rule)
{
    if (b->n_rules == b->cap_rules) {
        uint32_t cap = b->cap_rules ? 2 * b->cap_rules : 16;
        gr_nfa **r = dsk_realloc(b->rules, cap * sizeof *r);
        if (!r)
            return -1;
        b->rules = r;
        b->cap_rules = cap;
    }
    if (b->n_rules >= 65535)
        return dsk_err("the grammar needs more than 65535 rules");
    gr_nfa *a = dsk_malloc(sizeof *a);
    if (!a)
        return -1;
    if (nfa_init(a, &b->budget)) {
        free(a);
        return -1;
    }
    *rule = b->n_rules;
    b->rules[b->n_rules++] = a;
    return 0;
}

void build_free(gr_build *b)
{
    for (uint32_t i = 0; i < b->n_rules; i++) {
        nfa_free(b->rules[i]);
        free(b->rules[i]);
    }
    free(b->rules);
    *b = (gr_build){0};
}

size_t grammar_state_count(const grammar *g)
{
    return g->n - 1;
}

size_t grammar_memory(const grammar *g)
{
    return sizeof *g + g->table_bytes + atomic_load_explicit(&((grammar *)g)->cache_bytes, memory_order_relaxed);
}

void grammar_free(grammar *g)
{
    if (!g)
        return;
    mask_cache_free(g);
    free(g->rule);
    free(g->row);
    free(g->next);
    free(g->cls);
    free(g->ncls);
    free(g->flags);
    free(g->call_off);
    free(g->calls);
    free(g->dist);
    free(g);
}

/* ---- distances ---- */

typedef struct {
    uint64_t *h; /* dist << 32 | gid */
    size_t n, cap;
} heap;

static int heap_push(heap *q, uint32_t d, uint32_t g)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 1024;
        uint64_t *h = dsk_realloc(q->h, cap * sizeof *h);
        if (!h)
            return -1;
        q->h = h;
        q->cap = cap;
    }
    size_t i = q->n++;
    uint64_t k = (uint64_t)d << 32 | g;
    while (i && q->h[(i - 1) / 2] > k) {
        q->h[i] = q->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->h[i] = k;
    return 0;
}

static uint64_t heap_pop(heap *q)
{
    uint64_t top = q->h[0], k = q->h[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && q->h[c + 1] < q->h[c])
            c++;
        if (q->h[c] >= k)
            break;
        q->h[i] = q->h[c];
        i = c;
    }
    if (q->n)
        q->h[i] = k;
    return top;
}

typedef struct {
    uint32_t caller; /* the state with the call edge */
    uint32_t start, ret;
} call_entry;

/* Fewest symbols from each state to its rule's end: Dijkstra where a call edge costs the callee's
 * shortest sentence, usable once both the callee's start and the return state are settled. */
static int distances(grammar *g)
{
    uint32_t n = g->n;
    uint32_t *rev_off = dsk_calloc((size_t)n + 2, sizeof *rev_off), *rev = NULL, *last = NULL;
    uint32_t n_calls = g->call_off[n];
    call_entry *ce = dsk_malloc((n_calls + 1) * sizeof *ce);
    uint32_t *by_start = dsk_calloc((size_t)n + 2, sizeof *by_start), *by_ret = dsk_calloc((size_t)n + 2, sizeof *by_ret);
    uint32_t *start_list = dsk_malloc((n_calls + 1) * sizeof *start_list);
    uint32_t *ret_list = dsk_malloc((n_calls + 1) * sizeof *ret_list);
    uint8_t *done = dsk_calloc(n, 1);
    heap q = {0};
    int rc = -1;
    if (!rev_off || !ce || !by_start || !by_ret || !start_list || !ret_list || !done ||
        !(last = dsk_malloc((size_t)n * sizeof *last)))
        goto out;
    /* reverse symbol edges, one per (predecessor, successor) pair */
    for (int pass = 0; pass < 2; pass++) {
        memset(last, 0xFF, (size_t)n * sizeof *last);
        for (uint32_t p = 1; p < n; p++) {
            for (uint32_t c = 0; c < g->ncls[g->rule[p]]; c++) {
                uint32_t t = g->next[g->row[p] + c];
                if (!t || last[t] == p)
                    continue;
                last[t] = p;
                if (pass == 0)
                    rev_off[t + 1]++;
                else
                    rev[rev_off[t]++] = p;
            }
        }
        if (pass == 0) {
            for (uint32_t i = 0; i < n; i++)
                rev_off[i + 1] += rev_off[i];
            if (!(rev = dsk_malloc(((size_t)rev_off[n] + 1) * sizeof *rev)))
                goto out;
        }
    }
    for (uint32_t i = n; i > 0; i--) /* the fill pass advanced each start to the next's */
        rev_off[i] = rev_off[i - 1];
    rev_off[0] = 0;
    for (uint32_t p = 0, k = 0; p < n; p++)
        for (uint32_t i = g->call_off[p]; i < g->call_off[p + 1]; i++, k++) {
            ce[k] = (call_entry){p, g->calls[i].start, g->calls[i].ret};
            by_start[g->calls[i].start + 1]++;
            by_ret[g->calls[i].ret + 1]++;
        }
    for (uint32_t i = 0; i <= n; i++) {
        by_start[i + 1] += by_start[i];
        by_ret[i + 1] += by_ret[i];
    }
    for (uint32_t k = 0; k < n_calls; k++) {
        start_list[by_start[ce[k].start]++] = k;
        ret_list[by_ret[ce[k].ret]++] = k;
    }
    for (uint32_t i = n + 1; i > 0; i--) {
        by_start[i] = by_start[i - 1];
        by_ret[i] = by_ret[i - 1];
    }
    by_start[0] = by_ret[0] = 0;
    for (uint32_t x = 0; x < n; x++) {
        g->dist[x] = INF;
        if (x && (g->flags[x] & GR_ACCEPT)) {
            g->dist[x] = 0;
            if (heap_push(&q, 0, x))
                goto out;
        }
    }
#define RELAX(p, d)                                                                                \
    do {                                                                                           \
        uint32_t p_ = (p), d_ = (d);                                                               \
        if (!done[p_] && d_ < g->dist[p_]) {                                                       \
            g->dist[p_] = d_;                                                                      \
            if (heap_push(&q, d_, p_))                                                             \
                goto out;                                                                          \
        }                                                                                          \
    } while (0)
    while (q.n) {
        uint64_t k = heap_pop(&q);
        uint32_t x = (uint32_t)k, d = (uint32_t)(k >> 32);
        if (done[x] || d != g->dist[x])
            continue;
        done[x] = 1;
        for (uint32_t i = rev_off[x]; i < rev_off[x + 1]; i++)
            RELAX(rev[i], d + 1);
        for (uint32_t i = by_ret[x]; i < by_ret[x + 1]; i++) {
            const call_entry *c = &ce[ret_list[i]];
            if (done[c->start])
                RELAX(c->caller, g->dist[c->start] + d);
        }
        for (uint32_t i = by_start[x]; i < by_start[x + 1]; i++) {
            const call_entry *c = &ce[start_list[i]];
            if (done[c->ret])
                RELAX(c->caller, d + g->dist[c->ret]);
        }
    }
#undef RELAX
    rc = 0;
out:
    free(rev_off);
    free(rev);
    free(last);
    free(ce);
    free(by_start);
    free(by_ret);
    free(start_list);
    free(ret_list);
    free(done);
    free(q.h);
    if (rc)
        dsk_err_ctx("computing completion distances");
    return rc;
}

/* Cut every edge into a state that cannot finish, and every call that cannot complete; then set
 * the flags that depend on what is left. */
static void trim(grammar *g)
{
    uint8_t *edges = g->flags; /* GR_FINAL is recomputed below: use it meanwhile as "has an edge" */
    for (uint32_t p = 1; p < g->n; p++) {
        uint32_t *row = &g->next[g->row[p]];
        int any = 0;
        for (uint32_t c = 0; c < g->ncls[g->rule[p]]; c++) {
            if (row[c] && g->dist[row[c]] == INF)
                row[c] = 0;
            any |= row[c] != 0;
        }
        edges[p] = (uint8_t)((edges[p] & ~GR_FINAL) | (any ? 0 : GR_FINAL));
    }
    uint32_t k = 0;
    for (uint32_t p = 0; p < g->n; p++) {
        uint32_t from = g->call_off[p], to = g->call_off[p + 1];
        g->call_off[p] = k;
        for (uint32_t i = from; i < to; i++)
            if (g->dist[g->calls[i].start] != INF && g->dist[g->calls[i].ret] != INF)
                g->calls[k++] = g->calls[i];
        uint8_t f = (uint8_t)((g->flags[p] & ~(GR_CALLS | GR_SLOW)) | (k > g->call_off[p] ? GR_CALLS : 0));
        if ((f & GR_CALLS) || ((f & GR_ACCEPT) && !(f & GR_ROOT)))
            f |= GR_SLOW;
        if (f & GR_CALLS) /* GR_FINAL so far meant "no edge": final also needs no call */
            f &= (uint8_t)~GR_FINAL;
        g->flags[p] = f;
    }
    g->call_off[g->n] = k;
}

/* ---- linking ---- */

static int link_rules(grammar *g, const gr_dfa *d, uint32_t n_rules)
{
    uint32_t *base = dsk_malloc(n_rules * sizeof *base);
    if (!base)
        return -1;
    uint64_t n = 1, cells = GR_NSYM, n_calls = 0;
    for (uint32_t r = 0; r < n_rules; r++) {
        base[r] = (uint32_t)n;
        n += d[r].n;
        cells += (uint64_t)d[r].n * d[r].ncls;
        n_calls += d[r].call_off[d[r].n];
    }
    int rc = -1;
    if (cells > CELL_LIMIT) {
        dsk_err("the grammar's transition tables need %llu entries, more than the %u limit",
                (unsigned long long)cells, CELL_LIMIT);
        goto out;
    }
    g->n = (uint32_t)n;
    g->n_rules = n_rules;
    g->rule = dsk_calloc(n, sizeof *g->rule);
    g->row = dsk_calloc(n, sizeof *g->row);
    g->next = dsk_calloc(cells, sizeof *g->next);
    g->cls = dsk_malloc((size_t)n_rules * GR_NSYM * sizeof *g->cls);
    g->ncls = dsk_malloc(n_rules * sizeof *g->ncls);
    g->flags = dsk_calloc(n, 1);
    g->call_off = dsk_calloc(n + 1, sizeof *g->call_off);
    g->calls = dsk_malloc((n_calls + 1) * sizeof *g->calls);
    g->dist = dsk_malloc(n * sizeof *g->dist);
    if (!g->rule || !g->row || !g->next || !g->cls || !g->ncls || !g->flags || !g->call_off || !g->calls ||
        !g->dist)
        goto out;
    uint64_t at = GR_NSYM;
    uint32_t k = 0;
    for (uint32_t r = 0; r < n_rules; r++) {
        memcpy(g->cls + (size_t)r * GR_NSYM, d[r].cls, sizeof d[r].cls);
        g->ncls[r] = d[r].ncls;
        if (r && d[r].accept[0]) {
            dsk_err("internal: rule %u accepts the empty string", r);
            goto out;
        }
        for (uint32_t s = 0; s < d[r].n; s++) {
            uint32_t gid = base[r] + s;
            g->rule[gid] = (uint16_t)r;
            g->row[gid] = (uint32_t)at;
            for (uint32_t c = 0; c < d[r].ncls; c++) {
                uint32_t t = d[r].next[(size_t)s * d[r].ncls + c];
                g->next[at + c] = t == GR_NONE ? 0 : base[r] + t;
            }
            at += d[r].ncls;
            g->flags[gid] = (uint8_t)((d[r].accept[s] ? GR_ACCEPT : 0) | (r == 0 ? GR_ROOT : 0));
            g->call_off[gid] = k;
            for (uint32_t i = d[r].call_off[s]; i < d[r].call_off[s + 1]; i++)
                g->calls[k++] = (gr_call){base[d[r].calls[i].rule], base[r] + d[r].calls[i].to};
            if (k > g->call_off[gid])
                g->flags[gid] |= GR_CALLS;
        }
    }
    g->call_off[n] = k;
    g->start = base[0];
    /* per state: rule, row, flags, call_off, dist, and the mask memos (cache, run, uni, exc) */
    size_t per_state = sizeof *g->rule + sizeof *g->row + 1 + sizeof *g->call_off + sizeof *g->dist +
                       sizeof *g->cache + sizeof *g->run + sizeof *g->uni + GR_EXC_WORDS * sizeof *g->exc;
    g->table_bytes = cells * sizeof *g->next + (size_t)n * per_state + (size_t)n_rules * GR_NSYM * sizeof *g->cls +
                     n_calls * sizeof *g->calls;
    rc = 0;
out:
    free(base);
    return rc;
}

int build_finish(gr_build *b, grammar **out)
{
    *out = NULL;
    gr_dfa *d = dsk_calloc(b->n_rules, sizeof *d);
    grammar *g = dsk_calloc(1, sizeof *g);
    int rc = -1;
    if (!d || !g)
        goto out;
    g->v = b->v;
    g->uses_dsml = b->uses_dsml;
    uint64_t states = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        if (b->rules[r]->failed)
            goto out;
        uint64_t left = (uint64_t)b->opt.max_states > states ? b->opt.max_states - states : 0;
        if (dfa_build(b->rules[r], (uint32_t)left, &d[r]))
            goto out;
        states += d[r].n;
        nfa_free(b->rules[r]);
    }
    if (link_rules(g, d, b->n_rules) || distances(g))
        goto out;
    if (g->dist[g->start] == INF) {
        dsk_err("no finite output satisfies the grammar");
        goto out;
    }
    trim(g);
    g->cache = dsk_calloc(g->n, sizeof *g->cache);
    g->run = dsk_calloc(g->n, sizeof *g->run);
    g->uni = dsk_calloc(g->n, sizeof *g->uni);
    g->exc = dsk_calloc(GR_EXC_WORDS * (size_t)g->n, sizeof *g->exc);
    if (!g->cache || !g->run || !g->uni || !g->exc) {
        free(g->cache);
        free(g->run);
        free(g->uni);
        free(g->exc);
        g->cache = NULL;
        g->run = NULL;
        g->uni = NULL;
        g->exc = NULL;
        goto out;
    }
    for (int i = 0; i < 32; i++)
        atomic_init(&g->later_masks[i], NULL);
    atomic_init(&g->cache_bytes, 0);
    for (uint32_t i = 0; i < g->n; i++) {
        atomic_init(&g->cache[i], NULL);
        atomic_init(&g->run[i], INT32_MIN);
        atomic_init(&g->uni[i], GR_NONE - 1);
        for (int k = 0; k < GR_EXC_WORDS; k++)
            atomic_init(&g->exc[GR_EXC_WORDS * (size_t)i + k], 0);
    }
    *out = g;
    g = NULL;
    rc = 0;
out:
    for (uint32_t r = 0; d && r < b->n_rules; r++)
        dfa_free(&d[r]);
    free(d);
    grammar_free(g);
    return rc;
}
