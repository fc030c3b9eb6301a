/* Token masks. For each state the grammar computes, on first use and once, the tokens it accepts on
 * its own (an entry, published atomically): plain tokens by character chains where possible
 * (plain.c), the rest by walking the vocabulary tries (trie_walk.c). A token that runs past the end
 * of the state's own rule depends on the caller: its leftover bytes are kept, grouped, and checked
 * against the real stack when a mask is made; called rules end right after '}' or ']', so such
 * tokens are few. A mask is the OR of the entries of a configuration's stacks. */
#include "runtime/common/error.h"
#include "runtime/grammar/mask_walk.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t tok;   /* suffix = bytes of tok from off */
    uint32_t off;
    uint32_t first, count; /* into ids */
} gr_group;

struct gr_entry {
    int32_t base;         /* plain tokens of at most base characters are accepted; -1: none by this rule */
    uint32_t n_acc;       /* plain ids in acc (when bits is NULL) */
    uint32_t *acc;
    uint32_t *bits;       /* the plain tokens accepted as a full mask, when they are many */
    uint32_t *other_bits; /* the non-plain tokens accepted, by their number (vocab.other_ids) */
    uint32_t n_groups;
    gr_group *groups;
    uint32_t *ids;
};

void mask_cache_free(grammar *g)
{
    for (int i = 0; i < 32; i++)
        free(atomic_load_explicit(&g->later_masks[i], memory_order_relaxed));
    if (g->cache)
        for (uint32_t i = 0; i < g->n; i++)
            free(atomic_load_explicit(&g->cache[i], memory_order_relaxed));
    free(g->cache);
    free(g->run);
    free(g->uni);
    free(g->exc);
    g->exc = NULL;
    g->cache = NULL;
    g->run = NULL;
    g->uni = NULL;
}

/* ---- building an entry ---- */

static int suffix_cmp(const grammar_vocab *v, const uent *a, const uent *b)
{
    uint32_t la, lb;
    const uint8_t *pa = vocab_bytes(v, a->tok, &la), *pb = vocab_bytes(v, b->tok, &lb);
    pa += a->off;
    pb += b->off;
    la -= a->off;
    lb -= b->off;
    int c = memcmp(pa, pb, la < lb ? la : lb);
    return c ? c : (la > lb) - (la < lb);
}

static void sort_uents(const grammar_vocab *v, uent *a, uent *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2, i = 0, j = h, k = 0;
    sort_uents(v, a, tmp, h);
    sort_uents(v, a + h, tmp, n - h);
    while (i < h && j < n)
        tmp[k++] = suffix_cmp(v, &a[j], &a[i]) < 0 ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    memcpy(a, tmp, k * sizeof *a);
}

static int accepted(const walk *w, int32_t id)
{
    uint32_t o = w->g->v->other_index[id];
    if (o != UINT32_MAX)
        return (int)(w->other[o / 32] >> (o & 31) & 1);
    return (int)(w->bits[(uint32_t)id / 32] >> (id & 31) & 1);
}

/* The uncertain tokens (not accepted on their own) with their suffixes, grouped by suffix. */
static uent *collect_uncertain(walk *w, uint32_t *n_out)
{
    const grammar_vocab *v = w->g->v;
    size_t n = 0, cap = 0;
    uent *u = NULL;
    for (uint32_t r = 0; r < w->n_unc; r++) {
        const gr_trie *t = &v->trie[w->unc[r].trie];
        for (uint32_t j = w->unc[r].node; j < t->end[w->unc[r].node]; j++)
            for (int32_t id = t->tok[j]; id >= 0; id = v->same[id]) {
                if (accepted(w, id))
                    continue;
                if (n == cap) {
                    cap = cap ? 2 * cap : 64;
                    uent *nu = dsk_realloc(u, cap * sizeof *nu);
                    if (!nu) {
                        free(u);
                        return NULL;
                    }
                    u = nu;
                }
                u[n++] = (uent){id, w->unc[r].off};
            }
    }
    for (uint32_t i = 0; i < w->n_tunc; i++) {
        if (accepted(w, w->tunc[i].tok))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            uent *nu = dsk_realloc(u, cap * sizeof *nu);
            if (!nu) {
                free(u);
                return NULL;
            }
            u = nu;
        }
        u[n++] = w->tunc[i];
    }
    uent *tmp = dsk_malloc((n + 1) * sizeof *tmp);
    if (!tmp || (!u && !(u = dsk_malloc(sizeof *u)))) {
        free(tmp);
        free(u);
        return NULL;
    }
    sort_uents(v, u, tmp, n);
    free(tmp);
    *n_out = (uint32_t)n;
    return u;
}

static gr_entry *make_entry(walk *w, int32_t base)
{
    const grammar_vocab *v = w->g->v;
    uint32_t n_unc = 0;
    uent *u = collect_uncertain(w, &n_unc);
    if (!u)
        return NULL;
    uint32_t n_groups = 0, n_plain = 0, other_words = (v->n_other + 31) / 32;
    for (uint32_t i = 0; i < n_unc; i++)
        n_groups += !i || suffix_cmp(v, &u[i - 1], &u[i]) != 0;
    /* the accepted plain ids into the scratch mask's room, up to words of them; past that, a full
     * mask it is */
    uint32_t *ids = w->scratch;
    for (uint32_t i = 0; i < v->words && n_plain <= v->words; i++)
        for (uint32_t pl = w->bits[i]; pl; pl &= pl - 1) {
            if (n_plain < v->words)
                ids[n_plain] = i * 32 + (uint32_t)__builtin_ctz(pl);
            n_plain++;
        }
    int as_bits = n_plain > v->words;
    size_t plain_words = as_bits ? v->words : n_plain;
    size_t size = sizeof(gr_entry) + (plain_words + other_words) * 4 + (size_t)n_groups * sizeof(gr_group) +
                  (size_t)n_unc * 4;
    gr_entry *e = dsk_malloc(size); /* every part is written below */
    if (!e) {
        free(u);
        return NULL;
    }
    uint8_t *p = (uint8_t *)(e + 1);
    e->base = base;
    e->n_acc = as_bits ? 0 : n_plain;
    e->bits = as_bits ? (uint32_t *)p : NULL;
    e->acc = as_bits ? NULL : (uint32_t *)p;
    p += plain_words * 4;
    e->other_bits = (uint32_t *)p;
    p += (size_t)other_words * 4;
    if (as_bits)
        memcpy(e->bits, w->bits, v->words * sizeof *e->bits);
    else
        memcpy(e->acc, ids, n_plain * sizeof *e->acc);
    memcpy(e->other_bits, w->other, other_words * sizeof *e->other_bits);
    e->groups = (gr_group *)p;
    e->n_groups = n_groups;
    p += (size_t)n_groups * sizeof(gr_group);
    e->ids = (uint32_t *)p;
    for (uint32_t i = 0, gi = 0; i < n_unc; i++) {
        if (!i || suffix_cmp(v, &u[i - 1], &u[i]) != 0)
            e->groups[gi++] = (gr_group){u[i].tok, u[i].off, i, 0};
        e->groups[gi - 1].count++;
        e->ids[i] = (uint32_t)u[i].tok;
    }
    free(u);
    atomic_fetch_add_explicit(&((grammar *)w->g)->cache_bytes, size, memory_order_relaxed);
    return e;
}

static gr_entry *compute_entry(const grammar *g, uint32_t q)
{
    /* one block: the walk, then its masks (bits and other zeroed, the scratch ones not) */
    size_t words = g->v->words, other_words = (g->v->n_other + 31) / 32 + 1;
    walk *w = dsk_malloc(sizeof *w + (3 * words + other_words) * sizeof(uint32_t));
    gr_entry *e = NULL;
    if (!w)
        return NULL;
    memset(w, 0, offsetof(walk, n_items));
    w->g = g;
    w->mask = 4095;
    w->cap_fr = 2048;
    w->bits = (uint32_t *)(w + 1);
    w->other = w->bits + words;
    w->scratch = w->other + other_words;
    w->scratch2 = w->scratch + words;
    memset(w->bits, 0, (words + other_words) * sizeof *w->bits);
    w->n_fr = 1; /* frame 0 is the state's own rule */
    int32_t base = plain_by_chain(w, q);
    if (base == -2) {
        base = -1;
        walk_trie(w, q, GR_TRIE_PLAIN, 0, g->v->trie[GR_TRIE_PLAIN].n, 0);
    }
    walk_trie(w, q, GR_TRIE_OTHER, 0, g->v->trie[GR_TRIE_OTHER].n, 0);
    if (!w->failed)
        e = make_entry(w, base);
    if (!e)
        dsk_err_ctx("computing the token mask of grammar state %u", q);
    free(w->fr);
    free(w->slot);
    free(w->unc);
    free(w->tunc);
    free(w);
    return e;
}

const gr_entry *mask_entry(const grammar *g, uint32_t q)
{
    gr_entry *e = atomic_load_explicit(&g->cache[q], memory_order_acquire);
    if (e)
        return e;
    if (!(e = compute_entry(g, q)))
        return NULL;
    gr_entry *expected = NULL;
    if (!atomic_compare_exchange_strong_explicit(&g->cache[q], &expected, e, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        free(e); /* another thread published the same set first */
        e = expected;
    }
    return e;
}

/* ---- masks ---- */

int mask_stack(const grammar *g, const uint32_t *st, uint32_t d, uint32_t *mask, gr_config *tmp1,
               gr_config *tmp2)
{
    const grammar_vocab *v = g->v;
    const gr_entry *e = mask_entry(g, st[d - 1]);
    if (!e)
        return -1;
    if (e->base >= 0)
        mask_or(mask, v->plain_le + (size_t)e->base * v->words, v->words);
    if (e->bits) {
        mask_or(mask, e->bits, v->words);
    } else {
        for (uint32_t i = 0; i < e->n_acc; i++)
            mask[e->acc[i] / 32] |= 1u << (e->acc[i] & 31);
    }
    for (uint32_t i = 0; i < (v->n_other + 31) / 32; i++)
        for (uint32_t m = e->other_bits[i]; m; m &= m - 1) {
            int32_t id = v->other_ids[i * 32 + (uint32_t)__builtin_ctz(m)];
            mask[id / 32] |= 1u << (id & 31);
        }
    if (d < 2 || !e->n_groups)
        return 0;
    /* uncertain tokens: their suffix after returning to the caller, on the real stack below */
    gr_config below;
    below.n = 1;
    below.depth[0] = (uint8_t)(d - 1);
    memcpy(below.f[0], st, (d - 1) * sizeof *st);
    for (uint32_t k = 0; k < e->n_groups; k++) {
        const gr_group *gr = &e->groups[k];
        uint32_t len;
        const uint8_t *s = vocab_bytes(v, gr->tok, &len);
        if (config_step_bytes(g, &below, s + gr->off, len - gr->off, tmp1, tmp2) || !tmp1->n)
            continue; /* dead, or too ambiguous to follow (accepting it would fail the same way) */
        for (uint32_t i = gr->first; i < gr->first + gr->count; i++)
            mask[e->ids[i] / 32] |= 1u << (e->ids[i] & 31);
    }
    return 0;
}
