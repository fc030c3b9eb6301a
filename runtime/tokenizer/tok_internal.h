/* The tokenizer's tables, shared by loading (tokenizer.c), encoding (encode.c) and the pre-tokenizer
 * (pretok.c). Everything here is written once by tok_load and only read afterwards. */
#ifndef DSK_TOK_INTERNAL_H
#define DSK_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/tokenizer/tokenizer.h"

#define TOK_MAX_STAGES 8
/* What a tokenizer.json may hold (docs/tokenizer.md "Limits"; the real one: 7.8 MB, tokens of at most
 * 256 bytes, 829 added tokens of 16 KB together, Split patterns under 300 bytes, an estimated 40 MB to
 * parse). Checked before the text is parsed or any table is sized, so a hostile file is refused fast and
 * in bounded memory. */
#define TOK_MAX_FILE_BYTES ((size_t)64 << 20)
#define TOK_MAX_PARSE_BYTES ((size_t)512 << 20) /* jansson's estimated memory (json_cost.h) */
#define TOK_MAX_TOKEN_BYTES 1024                /* of a vocab entry or added token, as of a merge */
#define TOK_MAX_ADDED_BYTES ((size_t)1 << 20)   /* all added tokens' contents together */
#define TOK_MAX_PATTERN_BYTES 65536             /* of a Split pattern */
#define TOK_FLAG_SPECIAL 1
#define TOK_FLAG_ADDED 2

/* BPE merges live in an open-addressing table of packed entries: left id, right id, rank. A lower
 * rank merges first; the merged token is merge_result[rank]. Eight bytes an entry keeps the table
 * small enough to stay in cache, which is most of BPE's cost. */
#define TOK_ID_BITS 21   /* ids < 2^21 - 1 */
#define TOK_MAX_IDS ((1 << TOK_ID_BITS) - 1)
#define TOK_RANK_BITS 22 /* ranks < 2^22 */
#define TOK_NO_MERGE UINT32_MAX
#define TOK_EMPTY_SLOT UINT64_MAX

/* A node of a byte trie over added-token contents. */
typedef struct {
    int32_t added;        /* index into tok->added of the token ending here, or -1 */
    int32_t first_child;  /* -1 when none */
    int32_t next_sibling; /* -1 when none */
    uint8_t byte;
} tok_trie_node;

typedef struct {
    tok_trie_node *nodes; /* [n], node 0 is the root */
    size_t n, cap;
    int32_t root_child[256]; /* the root's children by byte, -1 when none */
} tok_trie;

typedef struct {
    int32_t id;
    const char *content; /* points into tok->strs */
    size_t len;
    uint8_t special, lstrip, rstrip, normalized;
} tok_added;

struct dsk_tokenizer {
    int32_t n_ids; /* one more than the largest id */
    /* Per id: the string as the file spells it, and the bytes it decodes to. */
    char *strs;         /* all strings, each NUL-terminated */
    uint32_t *str_off;  /* [n_ids] offset into strs; UINT32_MAX for ids not in the vocabulary */
    uint32_t *str_len;  /* [n_ids] byte length of each string */
    uint8_t *bytes;     /* all decoded byte strings, back to back */
    uint32_t *byte_off; /* [n_ids + 1] id i decodes to bytes[byte_off[i] .. byte_off[i + 1]) */
    uint8_t *special;   /* [n_ids] TOK_FLAG_ADDED for added tokens, | TOK_FLAG_SPECIAL if marked so */

    /* string -> id: open addressing over ids + 1 (0 = free), hashed with xxh3 */
    uint32_t *map;
    size_t map_mask;

    /* byte-level BPE */
    int32_t byte_id[256]; /* the id of each single byte's token */
    uint64_t *merges;       /* [merge_mask + 1] (left << 21 | right) << 22 | rank, or TOK_EMPTY_SLOT */
    size_t merge_mask;
    int32_t *merge_result;  /* [n_merges] the token each merge makes */
    uint32_t *byte_pair;    /* [65536] rank of merging the tokens of bytes b1, b2 (index b1 << 8 | b2) */
    int ignore_merges; /* a pre-token that is itself a vocab entry is one token */

    /* added tokens: matched first among non-normalized ones, then normalized ones (HF order) */
    tok_added *added; /* [n_added] */
    size_t n_added;
    tok_trie trie[2]; /* [0] non-normalized contents, [1] normalized contents */

    /* pre-tokenizer: each stage splits every piece of the previous one (Isolated behaviour) */
    pcre2_code *stage[TOK_MAX_STAGES];
    int n_stages;

    int32_t bos, eos;
};

static inline size_t tok_merge_slot(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/* The rank of merging (left, right); TOK_NO_MERGE if they do not merge. */
static inline uint32_t tok_merge_rank(const dsk_tokenizer *tok, int32_t left, int32_t right)
{
    uint64_t key = (uint64_t)left << TOK_ID_BITS | (uint64_t)right;
    for (size_t i = tok_merge_slot(key, tok->merge_mask);; i = (i + 1) & tok->merge_mask) {
        uint64_t e = tok->merges[i];
        if (e >> TOK_RANK_BITS == key)
            return (uint32_t)(e & ((1u << TOK_RANK_BITS) - 1));
        if (e == TOK_EMPTY_SLOT)
            return TOK_NO_MERGE;
    }
}

/* The id of a string of len bytes; -1 if absent. */
int32_t tok_lookup(const dsk_tokenizer *tok, const char *s, size_t len);

/* Translate a Split pattern from the file (Oniguruma syntax, as Hugging Face compiles it) into a
 * PCRE2 pattern whose Unicode classes equal the reference's, and compile it. literal: the pattern
 * is a plain string, not a regex. */
int pretok_compile(const char *pattern, size_t len, int literal, pcre2_code **out);

#endif
