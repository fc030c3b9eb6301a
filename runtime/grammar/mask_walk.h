/* The token-set computation's working state, shared by mask.c (entries), trie_walk.c (walking the
 * vocabulary tries) and plain.c (plain tokens by character chains). */
#ifndef DSK_GRAMMAR_MASK_WALK_H
#define DSK_GRAMMAR_MASK_WALK_H

#include "runtime/grammar/grammar_internal.h"

#define WALK_WIDTH 16 /* parses one trie prefix may follow at once */

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
    wframe *fr;           /* frame 0 is implicit; the rest allocated on first use, with slot */
    uint32_t n_fr, cap_fr;
    uint32_t *slot, mask; /* (ret, up) -> frame + 1 */
    uint32_t *bits;  /* accepted plain ids */
    uint32_t *other; /* accepted non-plain tokens, by vocab.other_index */
    uint32_t *scratch, *scratch2; /* two masks' worth of room for plain.c */
    urange *unc; /* uncertain subtrees */
    uint32_t n_unc, cap_unc;
    uent *tunc; /* uncertain tokens walked one by one */
    uint32_t n_tunc, cap_tunc;
    int failed;
    /* last and not zeroed: items[d] is written before it is read */
    uint8_t n_items[256];
    witem items[256][WALK_WIDTH];
} walk;

/* x |= row over words. In blocks of a fixed size, which GCC vectorizes at -O2 (a plain loop over
 * a uint32_t count, through pointers that may alias, it does not). */
static inline void mask_or(uint32_t *restrict x, const uint32_t *restrict row, size_t words)
{
    size_t i = 0;
    for (; i + 64 <= words; i += 64)
        for (size_t k = 0; k < 64; k++)
            x[i + k] |= row[i + k];
    for (; i < words; i++)
        x[i] |= row[i];
}

/* Whether q neither calls nor may return: a walk steps it by table lookup alone. */
static inline int walk_simple(const grammar *g, uint32_t q)
{
    return !(g->flags[q] & GR_SLOW);
}

/* Walk nodes [from, to) of trie k (whole subtrees below one node, whose prefix led to state q),
 * marking the tokens accepted in w->bits and recording the uncertain subtrees; with need, only the
 * plain tokens holding one of those tracked bytes below the range's top depth. */
void walk_trie(walk *w, uint32_t q, int k, uint32_t from, uint32_t to, uint64_t need);
/* One token from q, byte by byte, with the same rules. */
void walk_token(walk *w, uint32_t q, int32_t id);
/* The plain tokens by the chain shortcut (plain.c): the entry's base (plain tokens of at most base
 * characters, when there are no exceptions), -1 when they went into w->bits instead, or -2 when the
 * shortcut does not apply and the plain trie must be walked. */
int32_t plain_by_chain(walk *w, uint32_t q);

#endif
