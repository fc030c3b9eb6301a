/* Plain tokens by character chains (for mask.c).
 *
 * From a state x, "regular" plain characters all lead to one state t, the rest are exceptions:
 * dead ones, and live ones (leading elsewhere). Following t from state to state gives a chain; a
 * plain token of at most `run` characters none of which is an exception anywhere on the chain is
 * accepted without walking it, by bitmask operations over the vocabulary's precomputed rows.
 * Tokens holding a live exception are found by walking only the trie subtrees that hold one;
 * tokens whose exceptions are all dead everywhere on the chain are rejected; an exception only at
 * the first character costs the trie subtree that opens with it. In a JSON string there are no
 * exceptions; a raw DSML value has one, '<' (163 tokens), since "</" may start its end tag. */
#include "runtime/common/error.h"
#include "runtime/grammar/mask_walk.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t w[2]; /* bit b: plain ASCII byte b; bit GR_NONASCII: a non-ASCII character */
} bset;

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

/* Whether every byte path of seq from x (from byte i on) ends in t. A rule's byte classes are
 * intervals, so a byte range meets a few consecutive classes: visit those, not 64 bytes. */
static int seq_all(const grammar *g, uint32_t x, const gr_seq *seq, int i, uint32_t t)
{
    const uint16_t *cls = g->cls + (size_t)g->rule[x] * GR_NSYM;
    const uint32_t *row = g->next + g->row[x];
    uint32_t last = GR_NONE;
    for (uint32_t c = cls[seq->lo[i]]; c <= cls[seq->hi[i]]; c++) {
        uint32_t y = row[c];
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
        if (!walk_simple(g, y) || !seq_all(g, y, seq, i + 1, t))
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
    if (!walk_simple(g, x))
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

int32_t plain_by_chain(walk *w, uint32_t q)
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
