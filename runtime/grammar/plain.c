/* Plain tokens by character chains (for mask.c).
 *
 * From a state x, "regular" plain characters all lead to one state t (or to states that act as t on
 * every plain character, but perhaps a few where t dies and they go on: the tokens holding one of
 * those are walked), the rest are exceptions: dead ones, and live ones (leading elsewhere).
 * Following t from state to state gives a chain; a plain token of at most `run` characters with no
 * exception where it stands (the first character against x's exceptions, later ones against the
 * later states') is accepted without walking it, by operations on the vocabulary's mask rows: by
 * character count, by first character, and by the bytes after the first. Every token has one first
 * character, so the tokens opening with an exception are built from whichever side is cheaper;
 * "holds one of these bytes later" is kept per grammar, since the positions of a bounded repetition
 * share one set. The rest:
 *  - tokens opening with a live exception: the trie subtree below that byte, as a level of its own
 *    when it is large (the same shortcut one character in: the 40k tokens opening with ' ' before
 *    free text, or a capitalized word), else walked;
 *  - tokens holding a later exception that is live somewhere: walked one by one from id lists, or
 *    the trie subtrees that hold one; those holding one that is dead at every later position: out;
 *  - tokens running past a chain that dies after `run` characters with a few live exceptions (the
 *    '.' that ends "[^\n]{0,60}\."): the long ones with one where the chain ends, walked one by one.
 * In a JSON string there are no exceptions; a raw DSML value has one, '<' (163 tokens), since "</"
 * may start its end tag. */
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

static uint32_t inner_count(const grammar_vocab *v, const bset *s)
{
    uint32_t n = 0;
    for (int c = 0; c < 128; c++)
        n += bs_has(s, c) ? v->inner_off[c + 1] - v->inner_off[c] : 0;
    return n;
}

/* Whether a character that leads x to y instead of the regular target t may count as regular: y and
 * t (states of one rule, both simple: the accept bit they may differ in matters to EOS only) go to
 * the same state on every byte a plain character can open with, but those of *follow, where t dies
 * and y goes on. Then a token acts as if the character led to t unless one of those comes next; the
 * tokens holding one are walked, so this pays when they are fewer than those holding the character
 * (inner: how many those are). The '.' that may end a bounded text, {0,60} of it, before its final
 * '.' needs no followers; the 'a' in "[a-z ]*a[0-9]" has the digits. */
static int plain_alike(const grammar *g, uint32_t y, uint32_t t, uint32_t inner, bset *follow)
{
    if (y == t)
        return 1;
    if (!walk_simple(g, y) || !walk_simple(g, t))
        return 0;
    const uint16_t *cls = g->cls + (size_t)g->rule[t] * GR_NSYM;
    const uint32_t *ry = g->next + g->row[y], *rt = g->next + g->row[t];
    if (!memcmp(ry, rt, g->ncls[g->rule[t]] * sizeof *ry))
        return 1;
    bset f = {{0, 0}}, fresh;
    for (unsigned b = 0x20; b < 0xF5; b++) {
        if ((!plain_ascii(b) && b < 0xC2) || ry[cls[b]] == rt[cls[b]])
            continue;
        if (rt[cls[b]])
            return 0;
        bs_set(&f, b < 0x80 ? (int)b : GR_NONASCII);
    }
    for (int i = 0; i < 2; i++)
        fresh.w[i] = f.w[i] & ~follow->w[i];
    if (inner_count(g->v, &fresh) > inner)
        return 0;
    for (int i = 0; i < 2; i++)
        follow->w[i] |= f.w[i];
    return 1;
}

#define TEXT_LIKE 20 /* regular ASCII bytes a state needs for the chain shortcut to pay off */
#define FEW_LIVE 8   /* live exceptions a dying state may have and still end a chain */

/* The regular target from x (0: the chain ends here, every plain character but the live exceptions
 * dies), or GR_NONE when x has no such structure; follow: the bytes after which a character counted
 * regular may lead elsewhere (plain_alike). */
static uint32_t plain_step(const grammar *g, uint32_t x, bset *dead, bset *live, bset *follow)
{
    *dead = *live = *follow = (bset){{0, 0}};
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
    uint32_t alike = GR_NONE; /* the last live target found alike to t */
    for (unsigned b = 0x20; b < 0x7F; b++) {
        if (!plain_ascii(b) || (target[b] == t && t))
            continue;
        uint32_t inner = g->v->inner_off[b + 1] - g->v->inner_off[b];
        if (t && target[b] && (target[b] == alike || plain_alike(g, target[b], t, inner, follow))) {
            alike = target[b];
            continue;
        }
        bs_set(target[b] ? live : dead, (int)b);
    }
    if (m != t || !t)
        bs_set(dead, GR_NONASCII); /* m is 0 then */
    return t;
}

#define UNI_UNKNOWN (GR_NONE - 1)

static uint32_t plain_memo(const grammar *g, uint32_t x, bset *dead, bset *live, bset *follow)
{
    uint32_t t = atomic_load_explicit(&g->uni[x], memory_order_acquire);
    atomic_ullong *e = &g->exc[GR_EXC_WORDS * (size_t)x];
    bset *sets[3] = {dead, live, follow};
    if (t == UNI_UNKNOWN) {
        t = plain_step(g, x, dead, live, follow);
        for (int k = 0; k < GR_EXC_WORDS; k++)
            atomic_store_explicit(&e[k], sets[k / 2]->w[k % 2], memory_order_relaxed);
        atomic_store_explicit(&g->uni[x], t, memory_order_release); /* racing threads store the same */
        return t;
    }
    for (int k = 0; k < GR_EXC_WORDS; k++)
        sets[k / 2]->w[k % 2] = atomic_load_explicit(&e[k], memory_order_relaxed);
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
    bset dead, live, follow;
    chain[0] = q;
    for (;; k++) {
        int32_t m = k ? atomic_load_explicit(&g->run[chain[k]], memory_order_relaxed) : INT32_MIN;
        if (m != INT32_MIN) { /* known: chain[j] runs k - j more, up to the cap */
            r = m < 0 ? -1 : (m + k < cap ? m + k : cap);
            break;
        }
        uint32_t t = plain_memo(g, chain[k], &dead, &live, &follow);
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

/* The exceptions met along a chain of `run` characters, as byte sets. */
typedef struct {
    bset first; /* at the first character (when the chain dies right there: its live ones) */
    bset live0; /* the live ones among them */
    bset later; /* at characters 1 .. run - 1, and at every character of a loop; with the bytes
                 * that may follow a character counted regular and lead elsewhere */
    bset end;   /* the live ones of a dying state after run >= 1 characters */
    bset dead;  /* those of later dead at every character after the first, the end included */
} chain;

static void chain_exceptions(const grammar *g, uint32_t q, int32_t run, chain *c)
{
    bset d, l, f, follow = {{0, 0}};
    *c = (chain){.dead = {{~0ull, ~0ull}}};
    uint32_t x = q;
    for (int32_t j = 0;; j++) {
        uint32_t t = plain_memo(g, x, &d, &l, &f);
        for (int i = 0; j < run && i < 2; i++)
            follow.w[i] |= f.w[i];
        if (j == run) { /* after run characters: a dying end lets its live exceptions go on */
            for (int i = 0; !t && i < 2; i++) {
                (j ? &c->end : &c->first)->w[i] |= l.w[i];
                c->live0.w[i] |= j ? 0 : l.w[i];
                c->dead.w[i] &= j ? d.w[i] : ~0ull;
            }
            break;
        }
        for (int i = 0; i < 2; i++) {
            (j ? &c->later : &c->first)->w[i] |= d.w[i] | l.w[i];
            c->live0.w[i] |= j ? 0 : l.w[i];
            c->dead.w[i] &= j ? d.w[i] : ~0ull;
        }
        if (t == x) { /* a self-loop: every further step the same */
            for (int i = 0; i < 2; i++) {
                c->later.w[i] |= d.w[i] | l.w[i];
                c->dead.w[i] &= d.w[i];
            }
            break;
        }
        x = t;
    }
    for (int i = 0; i < 2; i++) { /* a follower goes elsewhere where it follows: never dead there */
        c->later.w[i] |= follow.w[i];
        c->dead.w[i] &= c->later.w[i] & ~follow.w[i];
    }
}

#define EXCEPTION_TOKENS 4096 /* above this many tokens to walk one by one (~80 ns each), the trie is cheaper */
#define SUBTREE_NODES 1024     /* a first-byte subtree larger than this is worth a level of its own */

/* The plain tokens a level decides: depth 0, all of them, from q (x = q); depth 1, those opening with
 * the byte of trie node `node`, from x = q after that byte, characters counted after it. */
typedef struct {
    uint32_t q, x, node;
    int depth;
} level;

static void set_subtree(const grammar_vocab *v, uint32_t node, uint32_t *x)
{
    const gr_trie *t = &v->trie[GR_TRIE_PLAIN];
    for (uint32_t i = node; i < t->end[node]; i++)
        for (int32_t id = t->tok[i]; id >= 0; id = t->more[i] ? v->same[id] : -1)
            x[(uint32_t)id / 32] |= 1u << (id & 31);
}

/* The depth-1 nodes below the level's node, by byte (ASCII), or the root's children at depth 0. */
static void level_children(const grammar_vocab *v, const level *lv, uint32_t child[128])
{
    const gr_trie *t = &v->trie[GR_TRIE_PLAIN];
    for (int c = 0; c < 128; c++)
        child[c] = lv->depth ? UINT32_MAX : v->top[c];
    for (uint32_t i = lv->node + 1; lv->depth && i < t->end[lv->node]; i = t->end[i])
        if (t->byte[i] < 0x80)
            child[t->byte[i]] = i;
}

#define LIGHT(v) ((v)->words / 16) /* a mask row costs about as much as setting this many bits */

/* What setting the level's tokens whose character at the level's first position is c costs: the
 * nodes of the subtree below that byte, or a row when that is cheaper (non-ASCII: always). */
static uint32_t first_cost(const grammar_vocab *v, const uint32_t child[128], int c)
{
    const gr_trie *t = &v->trie[GR_TRIE_PLAIN];
    if (c == GR_NONASCII)
        return LIGHT(v);
    if (child[c] == UINT32_MAX)
        return 0;
    return t->end[child[c]] - child[c] < LIGHT(v) ? t->end[child[c]] - child[c] : LIGHT(v);
}

/* x = the level's tokens whose character at the level's first position is in s (rows: starts at
 * depth 0, second at depth 1; those of other opening bytes fall outside the level). */
static void first_position(const grammar_vocab *v, const level *lv, const uint32_t child[128], const bset *s,
                           uint32_t *x)
{
    const uint32_t *rows = lv->depth ? v->second : v->starts;
    memset(x, 0, v->words * sizeof *x);
    for (int c = 0; c < 128; c++) {
        uint32_t cost = bs_has(s, c) ? first_cost(v, child, c) : 0;
        if (cost == LIGHT(v))
            mask_or(x, rows + (size_t)c * v->words, v->words);
        else if (cost)
            set_subtree(v, child[c], x);
    }
}

/* Plain tokens holding a byte of a set at a later position: after the first character (depth 0), or
 * from the third on (depth 1); built from rows and id lists, and kept per grammar when they took a
 * while, since a grammar meets few such sets (the positions of a bounded repetition share one). */
typedef struct {
    int depth;
    bset set;
    uint32_t bits[];
} later_mask;

#define LATER_SLOTS ((int)(sizeof ((grammar *)0)->later_masks / sizeof ((grammar *)0)->later_masks[0]))

static const uint32_t *later_positions(walk *w, int depth, const bset *s)
{
    grammar *g = (grammar *)w->g; /* the cache is the grammar's only mutable part, and atomic */
    const grammar_vocab *v = g->v;
    if (!s->w[0] && !s->w[1])
        return v->plain_le; /* row 0: no token has at most 0 characters */
    for (int i = 0; i < LATER_SLOTS; i++) {
        const later_mask *m = atomic_load_explicit(&g->later_masks[i], memory_order_acquire);
        if (m && m->depth == depth && !memcmp(&m->set, s, sizeof *s))
            return m->bits;
    }
    uint32_t *x = w->scratch2, cost = 0;
    memset(x, 0, v->words * sizeof *x);
    for (int c = 0; c < 128; c++) {
        if (!bs_has(s, c))
            continue;
        const int32_t *ids = depth ? v->beyond_ids + v->beyond_off[c] : v->inner_ids + v->inner_off[c];
        uint32_t n = depth ? v->beyond_off[c + 1] - v->beyond_off[c] : v->inner_off[c + 1] - v->inner_off[c];
        if (n > LIGHT(v)) {
            mask_or(x, v->beyond + (size_t)c * v->words, v->words);
            if (!depth)
                mask_or(x, v->second + (size_t)c * v->words, v->words);
            cost += LIGHT(v);
            continue;
        }
        for (uint32_t k = 0; k < n; k++)
            x[(uint32_t)ids[k] / 32] |= 1u << (ids[k] & 31);
        cost += n;
    }
    later_mask *m = cost > 2 * LIGHT(v) ? dsk_malloc(sizeof *m + v->words * sizeof(uint32_t)) : NULL;
    if (!m) /* cheap to build again, or no memory to keep it: use it once */
        return x;
    m->depth = depth;
    m->set = *s;
    memcpy(m->bits, x, v->words * sizeof *x);
    for (int i = 0; i < LATER_SLOTS; i++) {
        void *expected = NULL;
        if (atomic_compare_exchange_strong_explicit(&g->later_masks[i], &expected, m, memory_order_acq_rel,
                                                    memory_order_acquire)) {
            atomic_fetch_add_explicit(&g->cache_bytes, sizeof *m + v->words * sizeof(uint32_t),
                                      memory_order_relaxed);
            return m->bits;
        }
        const later_mask *o = expected;
        if (o->depth == depth && !memcmp(&o->set, s, sizeof *s)) { /* another thread just kept the same */
            free(m);
            return o->bits;
        }
    }
    free(m); /* every slot taken */
    return x;
}

/* bits |= row & opening & (positive ? at : ~at) & ~later, in blocks as mask_or. */
static void add_bulk(uint32_t *restrict bits, const uint32_t *restrict row, const uint32_t *restrict opening,
                     const uint32_t *restrict at, int positive, const uint32_t *restrict later, size_t words)
{
    uint32_t flip = positive ? 0 : ~0u;
    size_t i = 0;
    for (; i + 64 <= words; i += 64)
        for (size_t k = 0; k < 64; k++)
            bits[i + k] |= row[i + k] & opening[i + k] & ((at[i + k] ^ flip) & ~later[i + k]);
    for (; i < words; i++)
        bits[i] |= row[i] & opening[i] & ((at[i] ^ flip) & ~later[i]);
}

/* The plain characters' classes: plain ASCII bytes and GR_NONASCII. */
static bset plain_classes(void)
{
    bset s = {{0, 0}};
    for (int b = 0x20; b < 0x7F; b++)
        if (plain_ascii((unsigned)b))
            bs_set(&s, b);
    bs_set(&s, GR_NONASCII);
    return s;
}

/* The class of plain token p's character number k (it has more than k). */
static int char_at(const uint8_t *p, int32_t k)
{
    uint32_t i = 0;
    while (k-- > 0)
        i += gr_char_len(p[i]);
    return p[i] < 0x80 ? p[i] : GR_NONASCII;
}

/* Walk, one by one, the level's tokens in the id lists of the bytes of s (each once: seen), but
 * those opening with an exception, decided apart (at: the tokens with an exception at the level's
 * first position, or with positive, those without; NULL: none has one); with at_char >= 0, only
 * tokens whose character number at_char is of s (those running past a chain of at_char). */
static void walk_listed(walk *w, const level *lv, const bset *s, const uint32_t *at, int positive,
                        int32_t at_char, uint32_t *seen)
{
    const grammar_vocab *v = w->g->v;
    const gr_trie *t = &v->trie[GR_TRIE_PLAIN];
    const uint32_t *opening = lv->depth ? v->starts + (size_t)t->byte[lv->node] * v->words : NULL;
    uint32_t flip = positive ? ~0u : 0;
    for (int c = 0; c < 128 && !w->failed; c++) {
        if (!bs_has(s, c))
            continue;
        for (uint32_t k = v->inner_off[c]; k < v->inner_off[c + 1]; k++) {
            int32_t id = v->inner_ids[k];
            uint32_t len, word = (uint32_t)id / 32, bit = 1u << (id & 31);
            if ((seen[word] & bit) || (at && ((at[word] ^ flip) & bit)) || (opening && !(opening[word] & bit)) ||
                (int32_t)v->nchars[id] <= at_char ||
                (at_char >= 0 && !bs_has(s, char_at(vocab_bytes(v, id, &len), at_char))))
                continue;
            seen[word] |= bit;
            walk_token(w, lv->q, id);
        }
    }
}

static int plain_level(walk *w, const level *lv, int32_t *base);

/* The subtrees below the level's node that open with a live exception: a level of their own when
 * large and the chain shortcut applies there, else walked. */
static void walk_opens(walk *w, const level *lv, const uint32_t child[128], const bset *opens)
{
    const grammar *g = w->g;
    const gr_trie *t = &g->v->trie[GR_TRIE_PLAIN];
    uint32_t lo = lv->depth ? lv->node + 1 : 0, hi = lv->depth ? t->end[lv->node] : t->n;
    if (bs_has(opens, GR_NONASCII))
        for (uint32_t i = lo; i < hi; i = t->end[i])
            if (t->byte[i] >= 0x80)
                walk_trie(w, lv->x, GR_TRIE_PLAIN, i, t->end[i], 0);
    for (int c = 0; c < GR_NONASCII; c++) {
        uint32_t n = bs_has(opens, c) ? child[c] : UINT32_MAX;
        if (n == UINT32_MAX)
            continue;
        if (!lv->depth && t->end[n] - n > SUBTREE_NODES) {
            level sub = {lv->q, gr_step(g, lv->q, (unsigned)c), n, 1};
            if (!plain_level(w, &sub, NULL))
                continue;
        }
        walk_trie(w, lv->x, GR_TRIE_PLAIN, n, t->end[n], 0);
    }
}

/* The level's plain tokens by x's chain, into w->bits (at depth 0, *base instead when the chain has
 * no exceptions: plain tokens of at most *base characters). 1 when the shortcut does not apply (no
 * chain from x, or too many tokens to walk one by one with bytes the trie does not track): the
 * caller walks the level's trie instead. */
static int plain_level(walk *w, const level *lv, int32_t *base)
{
    const grammar *g = w->g;
    const grammar_vocab *v = g->v;
    const gr_trie *pt = &v->trie[GR_TRIE_PLAIN];
    int32_t run = plain_run(g, lv->x);
    if (run < 0)
        return 1;
    chain c;
    chain_exceptions(g, lv->x, run, &c);
    bset walkn, special;
    for (int i = 0; i < 2; i++)
        special.w[i] = c.end.w[i] & ~c.later.w[i];
    /* live exceptions of the dying end only: the tokens running past the chain with one there, one
     * by one (looking at a token costs far less than walking it, and few are walked); when they are
     * many and the trie tracks them, they join the later exceptions instead */
    int special_letters = 0;
    for (int b = 0; b < 128; b++)
        special_letters |= bs_has(&special, b) && v->track[b] < 0;
    if (!special_letters && inner_count(v, &special) > EXCEPTION_TOKENS)
        for (int i = 0; i < 2; i++) {
            c.later.w[i] |= special.w[i];
            special.w[i] = 0;
        }
    for (int i = 0; i < 2; i++)
        walkn.w[i] = c.later.w[i] & ~c.dead.w[i];
    int lists = inner_count(v, &walkn) <= EXCEPTION_TOKENS, letters = 0;
    uint64_t need = 0;
    for (int b = 0; b < 128; b++)
        if (bs_has(&walkn, b)) {
            if (v->track[b] >= 0)
                need |= 1ull << v->track[b];
            else
                letters = 1;
        }
    if (!lists && letters)
        return 1;
    int plain = !c.first.w[0] && !c.first.w[1] && !c.later.w[0] && !c.later.w[1];
    if (plain && base && !special.w[0] && !special.w[1]) {
        *base = run;
        return 0;
    }
    if (base)
        *base = -1;
    /* the bulk: tokens of at most run characters (after the opening) with no exception where it
     * stands. Every token of the level has one character at the level's first position, so those
     * with an exception there are the complement of those with a regular one: build the cheaper. */
    uint32_t child[128], *x = w->scratch;
    if (c.first.w[0] || c.first.w[1])
        level_children(v, lv, child);
    int32_t chars = run + lv->depth < (int32_t)v->max_chars ? run + lv->depth : (int32_t)v->max_chars;
    const uint32_t *row = v->plain_le + (size_t)chars * v->words;
    const uint32_t *opening = lv->depth ? v->starts + (size_t)pt->byte[lv->node] * v->words : row;
    bset all = plain_classes(), regular;
    uint32_t cost_exc = 0, cost_reg = 0;
    for (int i = 0; i < 2; i++)
        regular.w[i] = all.w[i] & ~c.first.w[i];
    for (int b = 0; b < 128 && (c.first.w[0] || c.first.w[1]); b++) {
        cost_exc += bs_has(&c.first, b) ? first_cost(v, child, b) : 0;
        cost_reg += bs_has(&regular, b) ? first_cost(v, child, b) : 0;
    }
    int positive = cost_reg < cost_exc || !cost_exc;
    const uint32_t *at = NULL; /* no token with an exception at the first position */
    if (cost_exc) {
        first_position(v, lv, child, positive ? &regular : &c.first, x);
        if (positive && lv->depth) /* the opening byte alone has no character there, and is regular */
            for (int32_t id = pt->tok[lv->node]; id >= 0; id = pt->more[lv->node] ? v->same[id] : -1)
                x[(uint32_t)id / 32] |= 1u << (id & 31);
        at = x;
    }
    add_bulk(w->bits, row, opening, at ? at : row, positive, later_positions(w, lv->depth, &c.later), v->words);
    /* tokens holding a later exception that is not dead everywhere, and those running past the end */
    uint32_t *seen = w->scratch2; /* the later mask is used */
    if (walkn.w[0] || walkn.w[1] || special.w[0] || special.w[1])
        memset(seen, 0, v->words * sizeof *seen);
    if (lists)
        walk_listed(w, lv, &walkn, at, positive, -1, seen);
    else if (lv->depth)
        walk_trie(w, lv->q, GR_TRIE_PLAIN, lv->node, pt->end[lv->node], need);
    else
        walk_trie(w, lv->q, GR_TRIE_PLAIN, 0, pt->n, need);
    walk_listed(w, lv, &special, at, positive, chars, seen);
    walk_opens(w, lv, child, &c.live0); /* last: a level below uses the scratch masks */
    return 0;
}

int32_t plain_by_chain(walk *w, uint32_t q)
{
    level lv = {q, q, 0, 0};
    int32_t base;
    return plain_level(w, &lv, &base) ? -2 : base;
}
