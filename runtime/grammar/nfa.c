/* The NFA builder the compilers write into: states with symbol-range edges, epsilon edges and call
 * edges (enter another rule, continue at `to` once it returns). Sticky on failure (grammar_internal.h). */
#include "runtime/common/error.h"
#include "runtime/grammar/grammar_internal.h"

#include <stdlib.h>
#include <string.h>

int nfa_init(gr_nfa *a, int64_t *budget)
{
    *a = (gr_nfa){0};
    a->budget = budget;
    a->start = nfa_state(a);
    a->final = nfa_state(a);
    return a->failed ? -1 : 0;
}

void nfa_free(gr_nfa *a)
{
    free(a->edge_head);
    free(a->link_head);
    free(a->edges);
    free(a->links);
    *a = (gr_nfa){0};
}

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = dsk_realloc(*p, (size_t)c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

uint32_t nfa_state(gr_nfa *a)
{
    if (a->failed)
        return 0;
    if (a->budget && --*a->budget < 0) {
        a->failed = 1;
        dsk_err("the grammar needs more automaton states than the limit (options.max_states)");
        return 0;
    }
    if (a->n == a->cap) {
        uint32_t cap = a->cap ? 2 * a->cap : 256;
        uint32_t *e = dsk_realloc(a->edge_head, cap * sizeof *e);
        if (e)
            a->edge_head = e;
        uint32_t *l = e ? dsk_realloc(a->link_head, cap * sizeof *l) : NULL;
        if (!e || !l) {
            a->failed = 1;
            return 0;
        }
        a->link_head = l;
        a->cap = cap;
    }
    a->edge_head[a->n] = GR_NONE;
    a->link_head[a->n] = GR_NONE;
    return a->n++;
}

void nfa_edge(gr_nfa *a, uint32_t from, uint32_t to, unsigned lo, unsigned hi)
{
    if (a->failed || lo > hi)
        return;
    if (grow((void **)&a->edges, &a->cap_edges, a->n_edges + 1, sizeof *a->edges)) {
        a->failed = 1;
        return;
    }
    a->edges[a->n_edges] = (gr_nedge){to, a->edge_head[from], (uint16_t)lo, (uint16_t)hi};
    a->edge_head[from] = a->n_edges++;
}

static void add_link(gr_nfa *a, uint32_t from, uint32_t to, uint32_t rule)
{
    if (a->failed)
        return;
    if (grow((void **)&a->links, &a->cap_links, a->n_links + 1, sizeof *a->links)) {
        a->failed = 1;
        return;
    }
    a->links[a->n_links] = (gr_nlink){to, a->link_head[from], rule};
    a->link_head[from] = a->n_links++;
}

void nfa_eps(gr_nfa *a, uint32_t from, uint32_t to)
{
    add_link(a, from, to, GR_NONE);
}

void nfa_call(gr_nfa *a, uint32_t from, uint32_t to, uint32_t rule)
{
    add_link(a, from, to, rule);
}

void nfa_lit(gr_nfa *a, uint32_t from, uint32_t to, const void *s, size_t n)
{
    const uint8_t *b = s;
    if (!n) {
        nfa_eps(a, from, to);
        return;
    }
    uint32_t at = from;
    for (size_t i = 0; i < n; i++) {
        uint32_t nx = i + 1 == n ? to : nfa_state(a);
        nfa_edge(a, at, nx, b[i], b[i]);
        at = nx;
    }
}

uint32_t nfa_then(gr_nfa *a, uint32_t from, const char *s)
{
    uint32_t to = nfa_state(a);
    nfa_lit(a, from, to, s, strlen(s));
    return to;
}
