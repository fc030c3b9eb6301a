/* Token masks. For each state the grammar lazily computes, once, which tokens it accepts on its own
 * (an entry): the vocabulary trie is walked against the automaton, pruning a subtree as soon as its
 * prefix dies, with calls into other rules followed on a local stack. A token that runs past the end
 * of the state's own rule depends on the caller: its leftover bytes ("suffix") are kept, grouped, and
 * checked against the real stack when a mask is made. Rules end only after '}' or ']', so few tokens
 * are uncertain.
 *
 * Plain tokens (grammar_internal.h) are not walked at all where every plain character leads to one
 * same next state along a chain of states (inside a string): there the plain tokens accepted are
 * exactly those of at most `run` characters, a precomputed row of the vocabulary. */
#include "runtime/common/error.h"
#include "runtime/grammar/grammar_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define WALK_WIDTH 16 /* parses one trie prefix may follow at once */

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
    for (int i = 0; i < 16; i++)
        free(atomic_load_explicit(&g->xmasks[i], memory_order_relaxed));
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

/* ---- plain-character chains ----
 *
 * From a state x, "regular" plain characters all lead to one state t, the rest are exceptions:
 * dead ones, and live ones (leading elsewhere). Following t from state to state gives a chain; a
 * plain token of at most `run` characters none of which is an exception anywhere on the chain is
 * accepted without walking it. Exceptions cost little when few tokens hold them: tokens with a
 * live exception are walked one by one, those with only exceptions that are dead all along the
 * chain are rejected. In a JSON string there are no exceptions at all; a raw DSML value has one,
 * '<' (163 tokens), since "</" may start its end tag. */

typedef struct {
    uint64_t w[2]; /* bit b: plain ASCII byte b; bit GR_NONASCII: a non-ASCII character */
} bset;

static int simple(const grammar *g, uint32_t q)
{
    return !(g->flags[q] & GR_SLOW);
}

static void bs_set(bset *s, int b)
{
    s->w[b >> 6] |= 1ull << (b & 63);
}

static int bs_has(const bset *s, int b)
{
    return (int)(s->w[b >> 6] >> (b & 63) & 1);
}

static int plain_ascii(unsigned b)
{
    return b >= 0x20 && b < 0x7F && b != '"' && b != '\\';
}

/* Whether every byte path of seq from x (from byte i on) ends in t. */
static int seq_all(const grammar *g, uint32_t x, const gr_seq *seq, int i, uint32_t t)
{
    uint32_t last = GR_NONE;
    for (unsigned b = seq->lo[i]; b <= seq->hi[i]; b++) {
        uint32_t y = gr_step(g, x, b);
        if (i + 1 == seq->n) {
            if (y != t)
                return 0;
            continue;
        }
        if (y == last)
            continue;
        last = y;
        if (!y) {
            if (t)
                return 0;
            continue;
        }
        if (!simple(g, y) || !seq_all(g, y, seq, i + 1, t))
            return 0;
    }
    return 1;
}

/* Where all plain non-ASCII characters lead from x (0: they die), or GR_NONE if not all alike. */
static uint32_t multibyte_target(const grammar *g, uint32_t x)
{
    const gr_seq *first = &g->v->seqs[0];
    uint32_t m = x;
    for (int i = 0; i < first->n && m; i++)
        m = gr_step(g, m, first->lo[i]);
    for (int k = 0; k < g->v->n_seqs; k++)
        if (!seq_all(g, x, &g->v->seqs[k], 0, m))
            return GR_NONE;
    return m;
}

#define TEXT_LIKE 20 /* regular ASCII bytes a state needs for the chain shortcut to pay off */
#define FEW_LIVE 8   /* live exceptions a dying state may have and still end a chain */

/* The regular target from x (0: the chain ends here, every plain character but the live exceptions
 * dies), or GR_NONE when x has no such structure. */
static uint32_t plain_step(const grammar *g, uint32_t x, bset *dead, bset *live)
{
    *dead = *live = (bset){{0, 0}};
    if (!simple(g, x))
        return GR_NONE;
    uint32_t m = multibyte_target(g, x);
    if (m == GR_NONE)
        return GR_NONE;
    uint32_t target[128], t = m;
    int n_live = 0;
    for (unsigned b = 0x20; b < 0x7F; b++)
        if (plain_ascii(b) && (target[b] = gr_step(g, x, b)))
            n_live++;
    if (!m && n_live) { /* non-ASCII dies: the regular target is the most common live one */
        uint32_t seen[96], count[96], n_seen = 0, best = 0;
        for (unsigned b = 0x20; b < 0x7F; b++) {
            if (!plain_ascii(b) || !target[b])
                continue;
            uint32_t k = 0;
            while (k < n_seen && seen[k] != target[b])
                k++;
            if (k == n_seen) {
                seen[n_seen] = target[b];
                count[n_seen++] = 0;
            }
            if (++count[k] > best) {
                best = count[k];
                t = target[b];
            }
        }
        if (best < TEXT_LIKE) {
            if (n_live > FEW_LIVE)
                return GR_NONE;
            t = 0;
        }
    }
    for (unsigned b = 0x20; b < 0x7F; b++)
        if (plain_ascii(b) && (target[b] != t || !t))
            bs_set(target[b] ? live : dead, (int)b);
    if (m != t || !t)
        bs_set(dead, GR_NONASCII); /* m is 0 then */
    return t;
}

#define UNI_UNKNOWN (GR_NONE - 1)

static uint32_t plain_memo(const grammar *g, uint32_t x, bset *dead, bset *live)
{
    uint32_t t = atomic_load_explicit(&g->uni[x], memory_order_acquire);
    atomic_ullong *e = &g->exc[4 * (size_t)x];
    if (t == UNI_UNKNOWN) {
        t = plain_step(g, x, dead, live);
        for (int i = 0; i < 2; i++) {
            atomic_store_explicit(&e[i], dead->w[i], memory_order_relaxed);
            atomic_store_explicit(&e[2 + i], live->w[i], memory_order_relaxed);
        }
        atomic_store_explicit(&g->uni[x], t, memory_order_release); /* racing threads store the same */
        return t;
    }
    for (int i = 0; i < 2; i++) {
        dead->w[i] = atomic_load_explicit(&e[i], memory_order_relaxed);
        live->w[i] = atomic_load_explicit(&e[2 + i], memory_order_relaxed);
    }
    return t;
}

/* How many plain characters the chain from q runs (capped at the longest plain token), or -1 when
 * it meets a state without the structure. Memoized per state. */
static int32_t plain_run(const grammar *g, uint32_t q)
{
    int32_t r = atomic_load_explicit(&g->run[q], memory_order_relaxed);
    if (r != INT32_MIN)
        return r;
    int32_t cap = (int32_t)g->v->max_chars;
    uint32_t chain[257];
    int32_t k = 0;
    bset dead, live;
    chain[0] = q;
    for (;; k++) {
        int32_t m = k ? atomic_load_explicit(&g->run[chain[k]], memory_order_relaxed) : INT32_MIN;
        if (m != INT32_MIN) { /* known: chain[j] runs k - j more, up to the cap */
            r = m < 0 ? -1 : (m + k < cap ? m + k : cap);
            break;
        }
        uint32_t t = plain_memo(g, chain[k], &dead, &live);
        if (t == GR_NONE || !t) { /* exact for every state of the chain */
            for (int32_t j = 0; j <= k; j++)
                atomic_store_explicit(&g->run[chain[j]], t ? -1 : k - j, memory_order_relaxed);
            return t ? -1 : k;
        }
        if (t == chain[k]) { /* a loop: unbounded */
            for (int32_t j = 0; j <= k; j++)
                atomic_store_explicit(&g->run[chain[j]], cap, memory_order_relaxed);
            return cap;
        }
        if (k == cap) {
            r = cap; /* only chain[0] is known to reach the cap */
            break;
        }
        chain[k + 1] = t;
    }
    atomic_store_explicit(&g->run[q], r, memory_order_relaxed);
    return r;
}

/* The exceptions met along q's chain of `run` characters: at the first character (first), at the
 * later ones (later; at the dying state that may end a short chain, only its live ones), and those
 * dead at every position (dead). */
static void chain_exceptions(const grammar *g, uint32_t q, int32_t run, bset *first, bset *later, bset *dead)
{
    bset d, l;
    *first = *later = (bset){{0, 0}};
    *dead = (bset){{~0ull, ~0ull}};
    uint32_t x = q;
    for (int32_t j = 0;; j++) {
        uint32_t t = plain_memo(g, x, &d, &l);
        bset *at = j ? later : first;
        if (j == run) { /* after run characters: a dying end lets its live exceptions go on */
            for (int i = 0; !t && i < 2; i++) {
                at->w[i] |= l.w[i];
                dead->w[i] &= d.w[i];
            }
            break;
        }
        for (int i = 0; i < 2; i++) {
            at->w[i] |= d.w[i] | l.w[i];
            dead->w[i] &= d.w[i];
        }
        if (t == x) { /* a self-loop: every further step the same */
            for (int i = 0; i < 2; i++)
                later->w[i] |= d.w[i] | l.w[i];
            break;
        }
        x = t;
    }
    for (int i = 0; i < 2; i++)
        dead->w[i] &= first->w[i] | later->w[i];
}

/* ---- the trie walk ---- */

typedef struct {
    uint32_t q, fp; /* state, local frame (0: the state's own rule, whose caller is unknown) */
} witem;

typedef struct {
    uint32_t ret, up;
} wframe;

typedef struct {
    uint8_t trie;
    uint32_t node, off;
} urange;

typedef struct {
    int32_t tok;
    uint32_t off;
} uent;

typedef struct {
    const grammar *g;
    wframe *fr;
    uint32_t n_fr, cap_fr;
    uint32_t *slot, mask; /* (ret, up) -> frame + 1 */
    witem items[256][WALK_WIDTH];
    uint8_t n_items[256];
    uint32_t *bits; /* accepted ids */
    uint32_t n_acc;
    urange *unc; /* uncertain subtrees */
    uint32_t n_unc, cap_unc;
    uent *tunc; /* uncertain tokens walked one by one */
    uint32_t n_tunc, cap_tunc;
    int failed;
} walk;

static uint32_t frame_of(walk *w, uint32_t ret, uint32_t up)
{
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
static void walk_token(walk *w, uint32_t q, int32_t id)
{
    uint32_t len;
    const uint8_t *s = vocab_bytes(w->g->v, id, &len);
    witem a[WALK_WIDTH], b[WALK_WIDTH];
    uint8_t na = 1, nb;
    a[0] = (witem){q, 0};
    for (uint32_t i = 0; i < len && !w->failed; i++) {
        if (na == 1 && !a[0].fp && simple(w->g, a[0].q)) { /* the common case: one state, one rule */
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

/* Walk nodes [from, to) of trie k (whole subtrees) from state q (with need: only subtrees holding one
 * of those tracked bytes, plain trie), marking the tokens accepted and recording the uncertain subtrees. While
 * the parse is one state of q's own rule that neither calls nor returns (nearly always), the state
 * per depth is a single gid in st[]; otherwise (st[d] == GR_NONE) the set is in items[d]. */
static void walk_trie(walk *w, uint32_t q, int k, uint32_t from, uint32_t to, uint64_t need)
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
    st[0] = q;
    held[0] = 0;
    for (uint32_t i = from; i < to && !w->failed;) {
        uint32_t d = depth[i], x = st[d - 1];
        if (need) {
            if (!held[d - 1] && !(below[i] & need)) { /* no token through here holds one */
                i = end[i];
                continue;
            }
            int c = byte[i] < 0x80 ? byte[i] : GR_NONASCII;
            held[d] = held[d - 1] || (track[c] >= 0 && (need >> track[c] & 1));
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
        while (id >= 0) {
            bits[(uint32_t)id / 32] |= 1u << (id & 31);
            id = more[i] ? same[id] : -1;
        }
        i++;
    }
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
                if (w->bits[(uint32_t)id / 32] >> (id & 31) & 1)
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
        if (w->bits[(uint32_t)w->tunc[i].tok / 32] >> (w->tunc[i].tok & 31) & 1)
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
    for (uint32_t i = 0; i < v->words; i++)
        for (uint32_t m = w->bits[i]; m; m &= m - 1)
            n_plain += v->kind[i * 32 + (uint32_t)__builtin_ctz(m)] == GR_TOK_PLAIN;
    int as_bits = n_plain > v->words;
    size_t plain_words = as_bits ? v->words : n_plain;
    size_t size = sizeof(gr_entry) + (plain_words + other_words) * 4 + (size_t)n_groups * sizeof(gr_group) +
                  (size_t)n_unc * 4;
    gr_entry *e = dsk_calloc(1, size);
    if (!e) {
        free(u);
        return NULL;
    }
    uint8_t *p = (uint8_t *)(e + 1);
    e->base = base;
    e->n_acc = n_plain;
    e->bits = as_bits ? (uint32_t *)p : NULL;
    e->acc = as_bits ? NULL : (uint32_t *)p;
    p += plain_words * 4;
    e->other_bits = (uint32_t *)p;
    p += (size_t)other_words * 4;
    for (uint32_t i = 0, k = 0; i < v->words; i++)
        for (uint32_t m = w->bits[i]; m; m &= m - 1) {
            uint32_t id = i * 32 + (uint32_t)__builtin_ctz(m), o = v->other_index[id];
            if (o != UINT32_MAX)
                e->other_bits[o / 32] |= 1u << (o & 31);
            else if (as_bits)
                e->bits[i] |= 1u << (id & 31);
            else
                e->acc[k++] = id;
        }
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

typedef struct {
    uint64_t key[4]; /* first-byte exceptions, anywhere exceptions */
    uint32_t bits[];
} xmask;

/* The plain tokens opening with a byte of `first` or holding one of `other`: an OR of many rows,
 * the same for every position of a bounded repetition, so kept per grammar (a few sets at most).
 * *owned: the caller frees the mask (the cache was full). */
static const uint32_t *exclusion(const grammar *g, const bset *first, const bset *other, int *owned)
{
    const grammar_vocab *v = g->v;
    uint64_t key[4] = {first->w[0], first->w[1], other->w[0], other->w[1]};
    grammar *mg = (grammar *)g; /* the cache is the grammar's only mutable part, and atomic */
    *owned = 0;
    for (int i = 0; i < 16; i++) {
        const xmask *x = atomic_load_explicit(&mg->xmasks[i], memory_order_acquire);
        if (x && !memcmp(x->key, key, sizeof key))
            return x->bits;
    }
    xmask *x = dsk_malloc(sizeof *x + v->words * sizeof(uint32_t));
    if (!x)
        return NULL;
    memcpy(x->key, key, sizeof key);
    const uint32_t *rows[128];
    int n = 0;
    for (int b = 0; b < 128; b++) {
        if (bs_has(first, b))
            rows[n++] = v->starts + (size_t)b * v->words;
        else if (bs_has(other, b))
            rows[n++] = v->contains + (size_t)b * v->words;
    }
    /* in blocks of words, so the block of the result stays in registers/L1 across all rows */
    for (uint32_t i0 = 0; i0 < v->words; i0 += 64) {
        uint32_t n_w = v->words - i0 < 64 ? v->words - i0 : 64, acc[64] = {0};
        for (int k = 0; k < n; k++)
            for (uint32_t i = 0; i < n_w; i++)
                acc[i] |= rows[k][i0 + i];
        memcpy(x->bits + i0, acc, n_w * sizeof *acc);
    }
    for (int i = 0; i < 16; i++) {
        void *expected = NULL;
        if (atomic_compare_exchange_strong_explicit(&mg->xmasks[i], &expected, x, memory_order_acq_rel,
                                                    memory_order_acquire))
            return x->bits;
        const xmask *y = expected;
        if (!memcmp(y->key, key, sizeof key)) { /* another thread just added the same */
            free(x);
            return y->bits;
        }
    }
    *owned = 1;
    return x->bits;
}

static void free_exclusion(const uint32_t *bits, int owned)
{
    if (owned)
        free((uint8_t *)bits - offsetof(xmask, bits));
}

#define EXCEPTION_TOKENS 32768 /* above this many exception tokens, walking the trie is cheaper */

/* The plain tokens by the chain shortcut. Returns the entry's base (plain tokens of at most base
 * characters, when there are no exceptions), -1 when the plain tokens went into w->bits instead,
 * or -2 when the shortcut does not apply. */
static int32_t plain_by_chain(walk *w, uint32_t q)
{
    const grammar *g = w->g;
    const grammar_vocab *v = g->v;
    const gr_trie *pt = &v->trie[GR_TRIE_PLAIN];
    int32_t run = plain_run(g, q);
    if (run < 0)
        return -2;
    bset first, later, dead, walk1 = {{0, 0}}, walkn = {{0, 0}};
    chain_exceptions(g, q, run, &first, &later, &dead);
    if (!first.w[0] && !first.w[1] && !later.w[0] && !later.w[1])
        return run;
    /* tokens with a later exception that is not always dead: one by one; tokens opening with a
     * first-character-only exception: their trie subtree (a non-ASCII one: one by one too) */
    for (int i = 0; i < 2; i++) {
        walkn.w[i] = later.w[i] & ~dead.w[i];
        walk1.w[i] = first.w[i] & ~later.w[i] & ~dead.w[i];
    }
    if (bs_has(&walk1, GR_NONASCII)) {
        walk1.w[1] &= ~(1ull << (GR_NONASCII - 64));
        bs_set(&walkn, GR_NONASCII);
    }
    /* tokens holding a later exception: the plain trie's subtrees that hold one, or, when that is a
     * letter (the subtree sets do not track letters), the tokens one by one, if not too many */
    uint64_t need = 0;
    int letters = 0;
    uint32_t walked = 0;
    for (int b = 0; b < 128; b++)
        if (bs_has(&walkn, b)) {
            walked += v->has_off[b + 1] - v->has_off[b];
            if (v->track[b] >= 0)
                need |= 1ull << v->track[b];
            else
                letters = 1;
        }
    if (letters && walked > EXCEPTION_TOKENS)
        return -2;
    bset other;
    for (int i = 0; i < 2; i++)
        other.w[i] = (first.w[i] | later.w[i]) & ~walk1.w[i];
    int owned;
    const uint32_t *row = v->plain_le + (size_t)run * v->words, *x = exclusion(g, &walk1, &other, &owned);
    uint32_t *bits = w->bits;
    if (!x) {
        w->failed = 1;
        return -1;
    }
    for (uint32_t i = 0; i < v->words; i++)
        bits[i] |= row[i] & ~x[i];
    free_exclusion(x, owned);
    uint8_t opens[128] = {0};
    for (uint32_t i = 0; i < pt->n; i = pt->end[i])
        if (pt->byte[i] < 0x80 && bs_has(&walk1, pt->byte[i])) {
            opens[pt->byte[i]] = 1;
            walk_trie(w, q, GR_TRIE_PLAIN, i, pt->end[i], 0);
        }
    if (need && !letters) {
        walk_trie(w, q, GR_TRIE_PLAIN, 0, pt->n, need);
        return -1;
    }
    uint32_t *seen = dsk_calloc(v->words, sizeof *seen);
    if (!seen) {
        w->failed = 1;
        return -1;
    }
    for (int b = 0; b < 128 && !w->failed; b++) {
        if (!bs_has(&walkn, b))
            continue;
        for (uint32_t k = v->has_off[b]; k < v->has_off[b + 1]; k++) {
            int32_t id = v->has[k];
            uint32_t len;
            const uint8_t *s = vocab_bytes(v, id, &len);
            if ((seen[(uint32_t)id / 32] >> (id & 31) & 1) || opens[s[0] < 0x80 ? s[0] : GR_NONASCII])
                continue;
            seen[(uint32_t)id / 32] |= 1u << (id & 31);
            walk_token(w, q, id);
        }
    }
    free(seen);
    return -1;
}

static gr_entry *compute_entry(const grammar *g, uint32_t q)
{
    walk *w = dsk_calloc(1, sizeof *w);
    gr_entry *e = NULL;
    if (!w)
        return NULL;
    w->g = g;
    w->mask = 4095;
    w->cap_fr = 2048;
    w->fr = dsk_malloc(w->cap_fr * sizeof *w->fr);
    w->slot = dsk_calloc(w->mask + 1, sizeof *w->slot);
    w->bits = dsk_calloc(g->v->words, sizeof *w->bits);
    if (!w->fr || !w->slot || !w->bits)
        goto done;
    w->fr[0] = (wframe){0, 0};
    w->n_fr = 1; /* frame 0 is the state's own rule */
    int32_t base = plain_by_chain(w, q);
    if (base == -2) {
        base = -1;
        walk_trie(w, q, GR_TRIE_PLAIN, 0, g->v->trie[GR_TRIE_PLAIN].n, 0);
    }
    walk_trie(w, q, GR_TRIE_OTHER, 0, g->v->trie[GR_TRIE_OTHER].n, 0);
    for (uint32_t i = 0; i < g->v->words; i++)
        w->n_acc += (uint32_t)__builtin_popcount(w->bits[i]);
    if (!w->failed)
        e = make_entry(w, base);
done:
    if (!e)
        dsk_err_ctx("computing the token mask of grammar state %u", q);
    free(w->fr);
    free(w->slot);
    free(w->bits);
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
    if (e->base >= 0) {
        const uint32_t *row = v->plain_le + (size_t)e->base * v->words;
        for (uint32_t i = 0; i < v->words; i++)
            mask[i] |= row[i];
    }
    if (e->bits) {
        for (uint32_t i = 0; i < v->words; i++)
            mask[i] |= e->bits[i];
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
