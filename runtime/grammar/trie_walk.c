/* Walking the vocabulary tries against the automaton: a node's state is its parent's plus one byte,
 * a dead state skips the subtree. Calls are followed on a local stack of frames; a return to the
 * state's own (unknown) caller makes the tokens below uncertain: kept with their leftover bytes. */
#include "runtime/common/error.h"
#include "runtime/grammar/mask_walk.h"

#include <stdlib.h>
#include <string.h>

static uint32_t frame_of(walk *w, uint32_t ret, uint32_t up)
{
    if (w->failed)
        return 0;
    if (!w->slot) { /* the first call or return: most states never make one */
        w->fr = dsk_malloc(w->cap_fr * sizeof *w->fr);
        w->slot = dsk_calloc(w->mask + 1, sizeof *w->slot);
        if (!w->fr || !w->slot) {
            w->failed = 1;
            return 0;
        }
        w->fr[0] = (wframe){0, 0};
    }
    uint64_t key = (uint64_t)ret << 32 | up;
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & w->mask;
    for (; w->slot[h]; h = (h + 1) & w->mask)
        if (w->fr[w->slot[h] - 1].ret == ret && w->fr[w->slot[h] - 1].up == up)
            return w->slot[h] - 1;
    if (w->n_fr + 1 >= w->cap_fr || 2 * (w->n_fr + 1) > w->mask) {
        w->failed = 1;
        dsk_err("a token mask needs more than %u call frames", w->mask / 2);
        return 0;
    }
    w->fr[w->n_fr] = (wframe){ret, up};
    w->slot[h] = ++w->n_fr;
    return w->n_fr - 1;
}

static void add_item(walk *w, witem *set, uint8_t *n, uint32_t q, uint32_t fp)
{
    for (uint8_t i = 0; i < *n; i++)
        if (set[i].q == q && set[i].fp == fp)
            return;
    if (*n == WALK_WIDTH) {
        w->failed = 1;
        dsk_err("the grammar is too ambiguous: more than %d parses of one token", WALK_WIDTH);
        return;
    }
    set[(*n)++] = (witem){q, fp};
}

/* Every (state, frame) that (q, fp) becomes on symbol b: its own edge, through a call, or after
 * returning to a local caller; *basepop when q could return to the unknown caller first. */
static void expand(walk *w, uint32_t q, uint32_t fp, unsigned b, witem *out, uint8_t *n, int *basepop,
                   int guard)
{
    const grammar *g = w->g;
    if (guard > 2 * GR_MAX_DEPTH || w->failed)
        return;
    uint32_t t = gr_step(g, q, b);
    if (t)
        add_item(w, out, n, t, fp);
    uint8_t f = g->flags[q];
    if (f & GR_CALLS)
        for (uint32_t i = g->call_off[q]; i < g->call_off[q + 1]; i++)
            expand(w, g->calls[i].start, frame_of(w, g->calls[i].ret, fp), b, out, n, basepop, guard + 1);
    if ((f & GR_ACCEPT) && !(f & GR_ROOT)) {
        if (fp)
            expand(w, w->fr[fp].ret, w->fr[fp].up, b, out, n, basepop, guard + 1);
        else
            *basepop = 1;
    }
}

static int grow(void *pp, uint32_t *cap, uint32_t n, size_t elem)
{
    void **p = pp;
    if (n < *cap)
        return 0;
    uint32_t c = *cap ? 2 * *cap : 64;
    void *q = dsk_realloc(*p, c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static void record_uncertain(walk *w, int k, uint32_t node, uint32_t off)
{
    if (grow(&w->unc, &w->cap_unc, w->n_unc, sizeof *w->unc)) {
        w->failed = 1;
        return;
    }
    w->unc[w->n_unc++] = (urange){(uint8_t)k, node, off};
}

/* One token from q, byte by byte, with the trie walk's rules (the shortcut's exception tokens). */
void walk_token(walk *w, uint32_t q, int32_t id)
{
    uint32_t len;
    const uint8_t *s = vocab_bytes(w->g->v, id, &len);
    witem a[WALK_WIDTH], b[WALK_WIDTH];
    uint8_t na = 1, nb;
    a[0] = (witem){q, 0};
    for (uint32_t i = 0; i < len && !w->failed; i++) {
        if (na == 1 && !a[0].fp && walk_simple(w->g, a[0].q)) { /* the common case: one state, one rule */
            if (!(a[0].q = gr_step(w->g, a[0].q, s[i])))
                return;
            continue;
        }
        int basepop = 0;
        nb = 0;
        for (uint8_t j = 0; j < na; j++)
            expand(w, a[j].q, a[j].fp, s[i], b, &nb, &basepop, 0);
        if (basepop && i) {
            if (grow(&w->tunc, &w->cap_tunc, w->n_tunc, sizeof *w->tunc)) {
                w->failed = 1;
                return;
            }
            w->tunc[w->n_tunc++] = (uent){id, i};
        }
        if (!nb)
            return;
        memcpy(a, b, nb * sizeof *b);
        na = nb;
    }
    w->bits[(uint32_t)id / 32] |= 1u << (id & 31);
}

/* Walk nodes [from, to) of trie k, whole subtrees below one node (the root, or a deeper one) whose
 * prefix led to state q, marking the tokens accepted (w->bits, w->other) and recording the uncertain
 * subtrees. With need (plain trie): only the tokens holding one of those tracked bytes below the
 * range's top depth. While the parse is one state of q's own rule that neither calls nor returns
 * (nearly always), the state per depth is a single gid in st[]; otherwise (st[d] == GR_NONE) the set
 * is in items[d]. */
void walk_trie(walk *w, uint32_t q, int k, uint32_t from, uint32_t to, uint64_t need)
{
    const grammar *g = w->g;
    const gr_trie *t = &g->v->trie[k];
    const uint8_t *byte = t->byte, *depth = t->depth, *more = t->more, *flags = g->flags;
    const uint32_t *end = t->end, *row = g->row, *next = g->next;
    const int32_t *tok = t->tok, *same = g->v->same;
    const uint16_t *cls = g->cls + (size_t)g->rule[q] * GR_NSYM;
    const uint64_t *below = t->below;
    const int8_t *track = g->v->track;
    uint32_t *bits = w->bits, st[256];
    uint8_t held[256]; /* need: the path to this depth holds a byte asked for (then walk it all) */
    if (from >= to)
        return;
    uint32_t top = depth[from];
    st[top - 1] = q;
    held[top - 1] = 0;
    for (uint32_t i = from; i < to && !w->failed;) {
        uint32_t d = depth[i], x = st[d - 1];
        if (need) {
            if (!held[d - 1] && !(below[i] & need)) { /* no token through here holds one */
                i = end[i];
                continue;
            }
            int c = byte[i] < 0x80 ? byte[i] : GR_NONASCII;
            held[d] = held[d - 1] || (d > top && track[c] >= 0 && (need >> track[c] & 1));
        }
        if (x != GR_NONE && !(flags[x] & GR_SLOW)) {
            uint32_t nx = next[row[x] + cls[byte[i]]];
            if (!nx) {
                i = end[i];
                continue;
            }
            st[d] = nx;
        } else {
            witem one = {x, 0};
            const witem *par = x != GR_NONE ? &one : w->items[d - 1];
            uint8_t np = x != GR_NONE ? 1 : w->n_items[d - 1], nn = 0;
            int basepop = 0;
            for (uint8_t j = 0; j < np; j++)
                expand(w, par[j].q, par[j].fp, byte[i], w->items[d], &nn, &basepop, 0);
            w->n_items[d] = nn;
            if (basepop && d > 1) /* returning before the first byte: the config's own returned stack */
                record_uncertain(w, k, i, d - 1);
            if (!nn) {
                i = end[i];
                continue;
            }
            st[d] = nn == 1 && !w->items[d][0].fp ? w->items[d][0].q : GR_NONE;
        }
        int32_t id = tok[i];
        if (id >= 0 && k == GR_TRIE_OTHER) { /* in node order: no scattered lookups */
            uint32_t o = t->ord[i];
            w->other[o / 32] |= 1u << (o & 31);
            for (id = more[i] ? same[id] : -1; id >= 0; id = same[id]) {
                o = g->v->other_index[id];
                w->other[o / 32] |= 1u << (o & 31);
            }
        }
        while (id >= 0) {
            bits[(uint32_t)id / 32] |= 1u << (id & 31);
            id = more[i] ? same[id] : -1;
        }
        i++;
    }
}
