/* Encoding: added tokens, then the pre-tokenizer's Split stages, then byte-level BPE on each piece.
 *
 * Cost is linear in the text except BPE, which is O(n log n) in a piece's length (a heap of candidate
 * merges over a linked list of symbols), so a 100 KB word or a 1 MB run of spaces is cheap. Repeated
 * pieces are looked up in a cache that lives for one call (so loaded tokenizers stay read-only). */
#include "runtime/common/error.h"
#include "runtime/tokenizer/tok_internal.h"
#include "runtime/tokenizer/unicode_tables.h"
#include "runtime/tokenizer/utf8.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_MAX_LEN 48 /* longer pieces are rare and not worth remembering */
/* Backtracking steps one pcre2_match may take on a piece of n bytes: PCRE2's default, plus 8 a byte. */
#define TOK_MATCH_LIMIT_BASE 10000000u
#define TOK_MATCH_LIMIT_PER_BYTE 8u

typedef struct {
    uint64_t hash;
    uint32_t off, len;       /* the piece's bytes in enc->cache_bytes */
    uint32_t ids_off, n_ids; /* its ids in enc->cache_ids; n_ids == 0: free slot */
} cache_slot;

typedef struct {
    const dsk_tokenizer *tok;
    tok_ids *out;
    pcre2_match_data *md;
    pcre2_match_context *mc; /* the match limit, set per call from the piece's length */
    /* BPE scratch for the longest piece so far */
    int32_t *sym, *prev, *next; /* [cap] symbol ids (-1: merged away) and list links */
    uint64_t *heap;             /* [3 * cap] candidate merges: rank << 32 | left position */
    size_t cap;
    /* pre-token -> ids */
    cache_slot *slots;
    size_t mask, used;
    dsk_buf cache_bytes;
    tok_ids cache_ids;
} tok_enc;

int tok_ids_push(tok_ids *ids, int32_t id)
{
    if (ids->len == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 256;
        int32_t *d = dsk_realloc(ids->data, cap * sizeof *d);
        if (!d)
            return -1;
        ids->data = d;
        ids->cap = cap;
    }
    ids->data[ids->len++] = id;
    return 0;
}

void tok_ids_free(tok_ids *ids)
{
    free(ids->data);
    *ids = (tok_ids){0};
}

static int push_ids(tok_ids *out, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tok_ids_push(out, ids[i]))
            return -1;
    return 0;
}

/* ---- the heap of candidate merges (lowest rank first, then leftmost, as Hugging Face) ---- */

static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1] < h[c])
            c++;
        if (v <= h[c])
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

static void push_candidate(const tok_enc *e, uint64_t *heap, size_t *nh, int32_t left)
{
    int32_t right = e->next[left];
    if (right < 0)
        return;
    uint32_t rank = tok_merge_rank(e->tok, e->sym[left], e->sym[right]);
    if (rank != TOK_NO_MERGE)
        heap_push(heap, nh, (uint64_t)rank << 32 | (uint32_t)left);
}

static int grow_scratch(tok_enc *e, size_t n)
{
    if (n <= e->cap)
        return 0;
    size_t cap = e->cap ? e->cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *sym = dsk_realloc(e->sym, cap * sizeof *sym);
    if (sym)
        e->sym = sym;
    int32_t *prev = dsk_realloc(e->prev, cap * sizeof *prev);
    if (prev)
        e->prev = prev;
    int32_t *next = dsk_realloc(e->next, cap * sizeof *next);
    if (next)
        e->next = next;
    uint64_t *heap = dsk_realloc(e->heap, 3 * cap * sizeof *heap);
    if (heap)
        e->heap = heap;
    if (!sym || !prev || !next || !heap)
        return -1;
    e->cap = cap;
    return 0;
}

/* Byte-level BPE of one piece: start from one symbol per byte and apply merges by rank. */
static int bpe(tok_enc *e, const uint8_t *s, size_t n)
{
    if (n > INT32_MAX)
        return dsk_err("a pre-token of %zu bytes is too long", n);
    if (grow_scratch(e, n))
        return -1;
    for (size_t i = 0; i < n; i++) {
        e->sym[i] = e->tok->byte_id[s[i]];
        e->prev[i] = (int32_t)i - 1;
        e->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t rank = e->tok->byte_pair[s[i] << 8 | s[i + 1]];
        if (rank != TOK_NO_MERGE)
            heap_push(e->heap, &nh, (uint64_t)rank << 32 | i);
    }
    while (nh) {
        uint64_t top = heap_pop(e->heap, &nh);
        int32_t left = (int32_t)(uint32_t)top, right = e->next[left];
        if (e->sym[left] < 0 || right < 0)
            continue;
        uint32_t rank = (uint32_t)(top >> 32);
        if (tok_merge_rank(e->tok, e->sym[left], e->sym[right]) != rank)
            continue; /* stale: a neighbour has merged since */
        e->sym[left] = e->tok->merge_result[rank];
        e->sym[right] = -1;
        e->next[left] = e->next[right];
        if (e->next[right] >= 0)
            e->prev[e->next[right]] = left;
        if (e->prev[left] >= 0)
            push_candidate(e, e->heap, &nh, e->prev[left]);
        push_candidate(e, e->heap, &nh, left);
    }
    for (int32_t i = 0; i >= 0; i = e->next[i])
        if (tok_ids_push(e->out, e->sym[i]))
            return -1;
    return 0;
}

/* A piece as one whole vocab entry, for models with ignore_merges; -1 if it is not one, -2 on
 * allocation failure. */
static int32_t whole_piece(const tok_enc *e, const uint8_t *s, size_t n)
{
    dsk_buf mapped = {0};
    for (size_t i = 0; i < n; i++) {
        const char *c = tok_str(e->tok, e->tok->byte_id[s[i]]);
        if (dsk_buf_append(&mapped, c, strlen(c))) {
            dsk_buf_free(&mapped);
            return -2;
        }
    }
    int32_t id = tok_lookup(e->tok, mapped.data, mapped.len);
    dsk_buf_free(&mapped);
    return id;
}

static cache_slot *cache_find(tok_enc *e, uint64_t h, const uint8_t *s, size_t n)
{
    if (!e->slots)
        return NULL;
    for (size_t i = (size_t)h & e->mask;; i = (i + 1) & e->mask) {
        cache_slot *c = &e->slots[i];
        if (!c->n_ids)
            return c;
        if (c->hash == h && c->len == n && !memcmp(e->cache_bytes.data + c->off, s, n))
            return c;
    }
}

static int cache_grow(tok_enc *e)
{
    size_t cap = e->slots ? 2 * (e->mask + 1) : 256;
    cache_slot *old = e->slots;
    size_t old_cap = old ? e->mask + 1 : 0;
    e->slots = dsk_calloc(cap, sizeof *e->slots);
    if (!e->slots) {
        e->slots = old;
        return -1;
    }
    e->mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i].n_ids)
            continue;
        size_t j = (size_t)old[i].hash & e->mask;
        while (e->slots[j].n_ids)
            j = (j + 1) & e->mask;
        e->slots[j] = old[i];
    }
    free(old);
    return 0;
}

/* Ids of one pre-token (one piece after the last Split stage). */
static int piece(tok_enc *e, const uint8_t *s, size_t n)
{
    if (n == 1)
        return tok_ids_push(e->out, e->tok->byte_id[s[0]]);
    uint64_t h = 0;
    if (n <= CACHE_MAX_LEN) {
        h = dsk_xxh64(s, n);
        cache_slot *c = cache_find(e, h, s, n);
        if (c && c->n_ids)
            return push_ids(e->out, e->cache_ids.data + c->ids_off, c->n_ids);
    }
    size_t first = e->out->len;
    int32_t whole = e->tok->ignore_merges ? whole_piece(e, s, n) : -1;
    if (whole == -2)
        return -1;
    if (whole >= 0 ? tok_ids_push(e->out, whole) : bpe(e, s, n))
        return -1;
    if (n > CACHE_MAX_LEN)
        return 0;
    if ((e->used + 1) * 2 > (e->slots ? e->mask + 1 : 0) && cache_grow(e))
        return -1;
    cache_slot *c = cache_find(e, h, s, n);
    *c = (cache_slot){h, (uint32_t)e->cache_bytes.len, (uint32_t)n, (uint32_t)e->cache_ids.len,
                      (uint32_t)(e->out->len - first)};
    e->used++;
    if (dsk_buf_append(&e->cache_bytes, s, n) ||
        push_ids(&e->cache_ids, e->out->data + first, e->out->len - first))
        return -1;
    return 0;
}

/* Split s[0..n) with stage k's pattern: matches and the gaps between them are pieces, each split
 * further by the next stage (Hugging Face's Split with behavior Isolated). */
static int split_stage(tok_enc *e, int k, const uint8_t *s, size_t n)
{
    if (k == e->tok->n_stages)
        return piece(e, s, n);
    pcre2_code *re = e->tok->stage[k];
    size_t at = 0, done = 0;
    /* PCRE2's default limit (10M backtracking steps a call) fails a valid pattern on a long enough piece:
     * \s*[\r\n]+ tries every length of a run of spaces, so a 10 MB run failed where 5 MB worked. The limit
     * grows with the piece, so it still stops a pattern that backtracks more than linearly. */
    uint64_t limit = (uint64_t)TOK_MATCH_LIMIT_BASE + (uint64_t)TOK_MATCH_LIMIT_PER_BYTE * n;
    pcre2_set_match_limit(e->mc, limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit);
    while (at <= n) {
        int rc = pcre2_match(re, s, n, at, PCRE2_NO_UTF_CHECK, e->md, e->mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return dsk_err("pre-tokenizer stage %d failed on a %zu-byte piece: %s", k, n,
                           (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t a = ov[0], b = ov[1];
        if (a > done && split_stage(e, k + 1, s + done, a - done))
            return -1;
        if (b > a && split_stage(e, k + 1, s + a, b - a))
            return -1;
        done = b;
        if (b > a) {
            at = b;
        } else { /* an empty match: step over one character */
            size_t l = 1;
            if (a < n && s[a] >= 0x80)
                utf8_next(s + a, n - a, &l);
            at = a + l;
        }
    }
    if (done < n)
        return split_stage(e, k + 1, s + done, n - done);
    return 0;
}

/* Text without added tokens: well-formed UTF-8 stretches go through the pre-tokenizer; each byte
 * of an ill-formed sequence becomes its own byte token. */
static int encode_plain(tok_enc *e, const uint8_t *s, size_t n)
{
    size_t i = 0, start = 0, l;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (utf8_next(s + i, n - i, &l) == UTF8_OK) {
            i += l;
            continue;
        }
        if (i > start && split_stage(e, 0, s + start, i - start))
            return -1;
        for (size_t j = 0; j < l; j++)
            if (tok_ids_push(e->out, e->tok->byte_id[s[i + j]]))
                return -1;
        i += l;
        start = i;
    }
    if (n > start)
        return split_stage(e, 0, s + start, n - start);
    return 0;
}

/* Whether code point cp is White_Space (what lstrip/rstrip remove). */
static int is_space(uint32_t cp)
{
    const uni_class *c = &uni_classes[UNI_SPACE];
    for (size_t i = 0; i < c->n; i++)
        if (cp >= c->ranges[i][0] && cp <= c->ranges[i][1])
            return 1;
    return 0;
}

/* Byte length of the whitespace character ending at s[end] (s[0..end) precedes); 0 if none. */
static size_t space_before(const uint8_t *s, size_t end)
{
    for (size_t l = 1; l <= 3 && l <= end; l++) {
        size_t got;
        if (utf8_next(s + end - l, l, &got) == UTF8_OK && got == l)
            return is_space(utf8_decode(s + end - l, l)) ? l : 0;
    }
    return 0;
}

static size_t space_at(const uint8_t *s, size_t n)
{
    size_t l;
    if (n && utf8_next(s, n, &l) == UTF8_OK && is_space(utf8_decode(s, l)))
        return l;
    return 0;
}

/* The longest added token of trie t starting at s[0..n); its index or -1, and its length. */
static int32_t trie_match(const tok_trie *t, const uint8_t *s, size_t n, size_t *len)
{
    int32_t best = -1;
    int32_t node = t->root_child[s[0]];
    size_t j = 1;
    while (node >= 0) {
        if (t->nodes[node].added >= 0) {
            best = t->nodes[node].added;
            *len = j;
        }
        if (j == n)
            break;
        int32_t c = t->nodes[node].first_child;
        while (c >= 0 && t->nodes[c].byte != s[j])
            c = t->nodes[c].next_sibling;
        node = c;
        j++;
    }
    return best;
}

/* Split out added tokens of pass 0 (non-normalized) then pass 1 (normalized), leftmost-longest as
 * Hugging Face's Aho-Corasick does, honouring lstrip/rstrip; the gaps go on. */
static int encode_added(tok_enc *e, int pass, const uint8_t *s, size_t n)
{
    const tok_trie *t = &e->tok->trie[pass];
    if (!t->nodes)
        return pass == 0 ? encode_added(e, 1, s, n) : encode_plain(e, s, n);
    size_t done = 0, at = 0;
    while (at < n) {
        size_t len = 0;
        int32_t k = t->root_child[s[at]] >= 0 ? trie_match(t, s + at, n - at, &len) : -1;
        if (k < 0) {
            at++;
            continue;
        }
        const tok_added *a = &e->tok->added[k];
        size_t start = at, stop = at + len;
        if (a->lstrip) {
            size_t l;
            while (start > done && (l = space_before(s, start)) && start - l >= done)
                start -= l;
        }
        if (a->rstrip) {
            size_t l;
            while ((l = space_at(s + stop, n - stop)))
                stop += l;
        }
        if (start > done &&
            (pass == 0 ? encode_added(e, 1, s + done, start - done) : encode_plain(e, s + done, start - done)))
            return -1;
        if (tok_ids_push(e->out, a->id))
            return -1;
        done = stop;
        /* after an rstrip, search on from what it took (HF searches on from the token's end and
         * would overlap a token that starts with whitespace; no tokenizer we know has one) */
        at = stop > at + len ? stop : at + len;
    }
    if (n > done)
        return pass == 0 ? encode_added(e, 1, s + done, n - done) : encode_plain(e, s + done, n - done);
    return 0;
}

int tok_encode_append(const dsk_tokenizer *tok, const char *text, size_t len, unsigned flags,
                      tok_ids *out)
{
    tok_enc e = {.tok = tok, .out = out};
    e.md = pcre2_match_data_create(16, NULL);
    e.mc = pcre2_match_context_create(NULL);
    if (!e.md || !e.mc) {
        pcre2_match_data_free(e.md);
        pcre2_match_context_free(e.mc);
        return dsk_err("out of memory");
    }
    int rc = flags & TOK_SPECIAL ? encode_added(&e, 0, (const uint8_t *)text, len)
                                 : encode_plain(&e, (const uint8_t *)text, len);
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mc);
    free(e.sym);
    free(e.prev);
    free(e.next);
    free(e.heap);
    free(e.slots);
    dsk_buf_free(&e.cache_bytes);
    tok_ids_free(&e.cache_ids);
    return rc;
}

int tok_encode(const dsk_tokenizer *tok, const char *text, size_t len, int add_bos, int32_t **ids,
               size_t *n)
{
    tok_ids out = {0};
    *ids = NULL;
    *n = 0;
    if (add_bos) {
        if (tok->bos < 0)
            return dsk_err("the tokenizer has no <｜begin▁of▁sentence｜> token");
        if (tok_ids_push(&out, tok->bos))
            return -1;
    }
    if (tok_encode_append(tok, text, len, TOK_SPECIAL, &out)) {
        tok_ids_free(&out);
        return -1;
    }
    *ids = out.data;
    *n = out.len;
    return 0;
}
