/* The grammar library's shared structures: the vocabulary tries, the NFA builder the compilers write
 * into, the per-rule DFAs, and the linked grammar the matchers run on. docs/grammar.md explains the
 * design; each .c file says which part it owns. */
#ifndef DSK_GRAMMAR_INTERNAL_H
#define DSK_GRAMMAR_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/grammar/grammar.h"

/* Symbols: bytes 0..255, then control tokens a grammar names (only ｜DSML｜ so far). */
#define GR_NONASCII 127 /* DEL is never in a plain token: its slot stands for "a non-ASCII character" */
#define GR_SYM_DSML 256
#define GR_NSYM 257
#define GR_NONE UINT32_MAX

#define GR_MAX_LEVELS 32                 /* options.max_recursion cap */
#define GR_MAX_DEPTH (GR_MAX_LEVELS + 2) /* matcher stack frames: root + one per level, + slack */
#define GR_MAX_STACKS 32                 /* parses one matcher follows at once (ambiguous grammars) */

/* ---- the vocabulary (vocab.c) ---- */

enum { GR_TOK_NONE, GR_TOK_PLAIN, GR_TOK_OTHER, GR_TOK_CONTROL };
enum { GR_TRIE_PLAIN, GR_TRIE_OTHER };

/* A byte trie of token strings, nodes in preorder: node i's subtree is [i, end[i]); its byte is
 * the depth[i]-th of the tokens below it. Walking it in index order visits parents first, so the
 * automaton state after a node's prefix is always the one stored for depth - 1. */
typedef struct {
    uint32_t n;
    uint8_t *byte, *depth;
    uint32_t *end;
    int32_t *tok;  /* the id whose bytes end here, or -1 */
    uint8_t *more; /* other ids have the same bytes: vocab.same[tok] and on */
    uint64_t *below; /* plain trie: bit vocab.track[c] set if byte c is in the node or below it */
    uint32_t *ord;   /* other trie: vocab.other_index of tok (token sets of them are indexed so) */
} gr_trie;

/* A run of UTF-8 byte ranges (lo[i]..hi[i] for byte i) that spells a range of code points. */
typedef struct {
    uint8_t n, lo[4], hi[4];
} gr_seq;

/* "Plain" tokens are well-formed UTF-8 made only of characters every string state treats alike:
 * printable ASCII but '"' and '\', and any non-ASCII character but U+FF5C (the DSML marker's bar);
 * the last may be cut short (byte-level BPE splits characters), unless what is left could begin
 * U+FF5C: such a prefix lives exactly where a non-ASCII character may come, and counts as one.
 * 126k of the 128k text tokens are plain; a state where every plain character leads to the same
 * next state decides all of them by character count alone (mask.c). */
struct grammar_vocab {
    int32_t size;   /* model vocabulary: bits in a mask */
    uint32_t words; /* (size + 31) / 32 */
    int32_t eos, dsml;
    uint8_t *blob;   /* text tokens' bytes */
    uint32_t *off;   /* [size + 1]: token i is blob[off[i] .. off[i + 1]) */
    uint8_t *kind;   /* [size] GR_TOK_* */
    uint8_t *nchars; /* [size] characters of a plain token */
    int32_t *same;   /* [size] next id with the same bytes, -1 */
    gr_trie trie[2];
    uint32_t max_chars; /* characters in the longest plain token */
    uint32_t *plain_le; /* [(max_chars + 1) * words]: row c = plain tokens of at most c characters */
    /* Plain tokens by where a character stands, as mask rows [128 * words], row b for ASCII byte b
     * (row GR_NONASCII: any non-ASCII character): whose first character is b, whose second is b, and
     * holding b from their third on. As id lists, those holding b after their first character
     * (inner_ids[inner_off[b] .. inner_off[b + 1])) and from their third on (beyond_ids). */
    uint32_t *starts, *second, *beyond;
    uint32_t inner_off[129], beyond_off[129];
    int32_t *inner_ids, *beyond_ids;
    uint32_t top[256]; /* the plain trie's depth-1 node of each first byte, UINT32_MAX for none */
    int8_t track[128]; /* the bit of a non-letter plain byte (and GR_NONASCII) in trie.below, or -1 */
    uint32_t n_other;     /* the non-plain text tokens, numbered 0.. so a set of them is small */
    int32_t *other_ids;   /* [n_other] */
    uint32_t *other_index; /* [size] number of a non-plain token, UINT32_MAX for others */
    gr_seq seqs[16];    /* the plain non-ASCII characters */
    int n_seqs;
};

/* The bytes of the well-formed UTF-8 character that opens with byte lead. */
static inline uint32_t gr_char_len(uint8_t lead)
{
    return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

static inline const uint8_t *vocab_bytes(const grammar_vocab *v, int32_t id, uint32_t *len)
{
    *len = v->off[id + 1] - v->off[id];
    return v->blob + v->off[id];
}

/* Split code points lo..hi (no surrogates inside) into UTF-8 byte-range sequences (text.c). */
int utf8_sequences(uint32_t lo, uint32_t hi, gr_seq *out, int cap);

/* ---- code point sets (text.c) ---- */

typedef struct {
    uint32_t lo, hi;
} gr_range;

/* Sorted, disjoint, non-adjacent ranges once normalized. Sticky on allocation failure. */
typedef struct {
    gr_range *r;
    uint32_t n, cap;
    int failed;
} gr_cset;

void cset_add(gr_cset *s, uint32_t lo, uint32_t hi);
void cset_norm(gr_cset *s);
void cset_invert(gr_cset *s); /* within 0..0x10FFFF */
void cset_sub(gr_cset *s, const gr_cset *minus);
void cset_free(gr_cset *s);
int cset_has(const gr_cset *s, uint32_t c);

/* ---- NFA builder (nfa.c) ---- */

typedef struct {
    uint32_t to, next;
    uint16_t lo, hi; /* symbols lo..hi */
} gr_nedge;

typedef struct {
    uint32_t to, next, rule; /* rule: GR_NONE for an epsilon edge */
} gr_nlink;

/* A rule's NFA. Builders are sticky: after the first failure (allocation, or the compile's state
 * budget) every call is a no-op, failed is set and the error message names what failed. */
typedef struct {
    uint32_t n, cap;
    uint32_t *edge_head, *link_head; /* [cap] first edge / epsilon-or-call, GR_NONE when none */
    gr_nedge *edges;
    uint32_t n_edges, cap_edges;
    gr_nlink *links;
    uint32_t n_links, cap_links;
    uint32_t start, final;
    int64_t *budget; /* states the whole compile may still add */
    int failed;
} gr_nfa;

int nfa_init(gr_nfa *a, int64_t *budget);
void nfa_free(gr_nfa *a);
uint32_t nfa_state(gr_nfa *a);
void nfa_edge(gr_nfa *a, uint32_t from, uint32_t to, unsigned lo, unsigned hi);
void nfa_eps(gr_nfa *a, uint32_t from, uint32_t to);
void nfa_call(gr_nfa *a, uint32_t from, uint32_t to, uint32_t rule);
/* Exact bytes from -> to. */
void nfa_lit(gr_nfa *a, uint32_t from, uint32_t to, const void *s, size_t n);
static inline void nfa_str(gr_nfa *a, uint32_t from, uint32_t to, const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    nfa_lit(a, from, to, s, n);
}
/* A fresh state reached from `from` by the bytes s; returns it. */
uint32_t nfa_then(gr_nfa *a, uint32_t from, const char *s);

/* Text emission: characters of a code point set as raw UTF-8, or as the characters of a JSON
 * string's content (escaping '"', '\' and controls, which cannot appear raw). Code points in
 * `excluded` (may be NULL) never appear raw. */
enum { GR_TEXT_RAW, GR_TEXT_JSON };
void emit_cset(gr_nfa *a, uint32_t from, uint32_t to, const gr_cset *s, int mode, const gr_cset *excluded);
/* One JSON string character: raw, \" \\ \/ \b \f \n \r \t, and with u_escapes \uXXXX (surrogates in
 * valid pairs only; never \u0000). */
void emit_json_char(gr_nfa *a, uint32_t from, uint32_t to, const gr_cset *excluded, int u_escapes);
/* Bounded JSON whitespace: up to max bytes of [ \t\n\r]. */
void emit_ws(gr_nfa *a, uint32_t from, uint32_t to, int max);

/* The strings regex re matches (regex.c; docs/grammar.md lists the syntax), emitted between from
 * and to as text of the given mode. search: JSON Schema "pattern" semantics (a match anywhere,
 * unless anchored by ^ / $); otherwise the whole text must match. */
int regex_emit(gr_nfa *a, const char *re, size_t len, int search, int mode, const gr_cset *excluded,
               uint32_t from, uint32_t to);

/* ---- per-rule DFAs (dfa.c) ---- */

typedef struct {
    uint32_t rule, to;
} gr_dcall;

/* Symbols are grouped into classes (intervals of the symbol line no edge boundary cuts). */
typedef struct {
    uint32_t n, ncls;
    uint16_t cls[GR_NSYM];
    uint32_t *next;     /* [n * ncls] successor, GR_NONE for none */
    uint8_t *accept;    /* [n] */
    uint32_t *call_off; /* [n + 1] into calls */
    gr_dcall *calls;
} gr_dfa;

/* Subset construction; more than max_states states is an error naming the limit. */
int dfa_build(const gr_nfa *a, uint32_t max_states, gr_dfa *out);
/* The intersection of two call-free DFAs (with y_complement: the strings of x that y rejects). */
int dfa_intersect(const gr_dfa *x, const gr_dfa *y, int y_complement, uint32_t max_states, gr_dfa *out);
/* Copy d into a as states between from and to. */
void dfa_emit(const gr_dfa *d, gr_nfa *a, uint32_t from, uint32_t to);
void dfa_free(gr_dfa *d);

/* ---- building a grammar from rules (link.c) ---- */

typedef struct {
    const grammar_vocab *v;
    grammar_options opt;
    gr_nfa **rules; /* rule 0 is the start rule; each a separately allocated NFA */
    uint32_t n_rules, cap_rules;
    int64_t budget;  /* NFA states left */
    int uses_dsml;   /* the grammar has the ｜DSML｜ symbol */
} gr_build;

int build_init(gr_build *b, const grammar_vocab *v, const grammar_options *opt);
/* A new empty rule (start and final states made); its NFA is b->rules[*rule]. */
int build_rule(gr_build *b, uint32_t *rule);
/* Determinize every rule, link them, drop states that cannot finish; frees the NFAs. */
int build_finish(gr_build *b, grammar **out);
void build_free(gr_build *b);

/* ---- the linked grammar ---- */

/* GR_SLOW: the state calls, or may return to a caller (GR_CALLS, or GR_ACCEPT outside the root).
 * GR_FINAL: no symbol edge and no call leaves it (a called rule's end, after its '}' or ']'). */
enum { GR_ACCEPT = 1, GR_CALLS = 2, GR_ROOT = 4, GR_SLOW = 8, GR_FINAL = 16 };

typedef struct {
    uint32_t start, ret; /* callee's start state, and the caller's state once it returns */
} gr_call;

typedef struct gr_entry gr_entry;

/* States of all rules share one numbering ("gids"); gid 0 is dead. A state's successors are a row of
 * its rule's class table. A state with GR_CALLS may enter a callee; a non-root GR_ACCEPT state may
 * return to the caller. Recursion is unrolled into levels, so stacks are at most levels + 1 deep. */
struct grammar {
    const grammar_vocab *v;
    uint32_t n, n_rules;
    uint16_t *rule;     /* [n] */
    uint32_t *row;      /* [n] offset of the state's row in next */
    uint32_t *next;     /* rows of successor gids, 0 = dead (the first GR_NSYM entries are zeros) */
    uint16_t *cls;      /* [n_rules * GR_NSYM]; a rule's classes are intervals of the symbol line */
    uint32_t *ncls;     /* [n_rules] */
    uint8_t *flags;     /* [n] */
    uint32_t *call_off; /* [n + 1] into calls */
    gr_call *calls;
    uint32_t *dist; /* [n] fewest symbols from the state to the end of its rule */
    uint32_t start;
    int uses_dsml;
    _Atomic(gr_entry *) *cache; /* [n] lazily built token sets (mask.c) */
    _Atomic(void *) later_masks[32]; /* plain tokens holding given bytes past their start, by set (plain.c) */
    size_t table_bytes;          /* the automaton's arrays */
    atomic_size_t cache_bytes;   /* the token sets built so far */
    atomic_int *run;            /* [n] plain-character chain length memo (mask.c) */
    atomic_uint *uni;           /* [n] where regular plain characters lead, memo (mask.c) */
    atomic_ullong *exc;         /* [GR_EXC_WORDS n] that state's exceptions (dead, live, followers), memo (plain.c) */
};

static inline uint32_t gr_step(const grammar *g, uint32_t q, unsigned sym)
{
    return g->next[g->row[q] + g->cls[(size_t)g->rule[q] * GR_NSYM + sym]];
}

#define GR_EXC_WORDS 6 /* grammar.exc words per state: three byte sets */

/* ---- matcher configurations (matcher.c) ---- */

/* The parses a matcher follows: stacks of gids, the top last; below the top, return states. Kept
 * normalized: a stack whose top may return to its caller has the returned stack beside it (and is
 * dropped if returning is all it can do), so no token set has to cover "return first". */
typedef struct {
    uint32_t n;
    uint8_t depth[GR_MAX_STACKS];
    uint32_t f[GR_MAX_STACKS][GR_MAX_DEPTH];
} gr_config;

/* Append to out every stack that stack st (depth d) becomes on symbol sym. Returns -1 (error set)
 * when out would need more than GR_MAX_STACKS stacks. */
int config_step_stack(const grammar *g, uint32_t *st, uint32_t d, unsigned sym, gr_config *out);
/* out = in after the bytes s[0..n). */
int config_step_bytes(const grammar *g, const gr_config *in, const uint8_t *s, size_t n, gr_config *out,
                      gr_config *tmp);
int config_complete(const grammar *g, const uint32_t *st, uint32_t d);
/* out = in after symbol sym, with the returns each stack can make right away (config.c). */
int config_step(const grammar *g, const gr_config *in, unsigned sym, gr_config *out);
void config_copy(gr_config *dst, const gr_config *src);

/* ---- masks (mask.c) ---- */

/* The token set of one state, computed on first use and published atomically. */
const gr_entry *mask_entry(const grammar *g, uint32_t q);
/* OR into mask the tokens the stack st (depth d) allows. */
int mask_stack(const grammar *g, const uint32_t *st, uint32_t d, uint32_t *mask, gr_config *tmp1,
               gr_config *tmp2);
void mask_cache_free(grammar *g);

#endif
