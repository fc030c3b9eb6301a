/* The vocabulary as grammars see it: each id's bytes, whether it is text or a control token, two byte
 * tries (plain tokens, the rest) and the plain tokens' masks: by character count, and by which
 * character stands where (mask.c and plain.c decide most plain tokens with them). Built once per
 * tokenizer and read-only afterwards. */
#include "runtime/common/error.h"
#include "runtime/grammar/grammar_internal.h"
#include "runtime/tokenizer/dsml.h"
#include "runtime/tokenizer/utf8.h"

#include <stdlib.h>
#include <string.h>

/* Whether bytes s[0..n) are plain (grammar_internal.h); *chars gets the character count. */
static int is_plain(const uint8_t *s, uint32_t n, uint32_t *chars)
{
    uint32_t c = 0;
    for (uint32_t i = 0; i < n;) {
        if (s[i] < 0x80) {
            if (s[i] < 0x20 || s[i] == 0x7F || s[i] == '"' || s[i] == '\\')
                return 0;
            i++;
        } else {
            size_t l;
            int r = utf8_next(s + i, n - i, &l);
            if (r == UTF8_SHORT && !(s[i] == 0xEF && (l == 1 || s[i + 1] == 0xBD))) {
                c++; /* cut short at the end, and not the start of U+FF5C (EF BD 9C) */
                break;
            }
            if (r != UTF8_OK || utf8_decode(s + i, l) == 0xFF5C)
                return 0;
            i += (uint32_t)l;
        }
        c++;
    }
    *chars = c;
    return c > 0 && c < 256;
}

/* Order of ids by their bytes (then id). Sorting uses a merge sort because qsort has no context
 * argument and qsort_r is not C11. */
static int less_bytes(const grammar_vocab *v, int32_t x, int32_t y)
{
    uint32_t lx, ly;
    const uint8_t *px = vocab_bytes(v, x, &lx), *py = vocab_bytes(v, y, &ly);
    int c = memcmp(px, py, lx < ly ? lx : ly);
    if (c)
        return c < 0;
    if (lx != ly)
        return lx < ly;
    return x < y;
}

static void merge_sort(const grammar_vocab *v, int32_t *a, int32_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(v, a, tmp, h);
    merge_sort(v, a + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = less_bytes(v, a[j], a[i]) ? a[j++] : a[i++];
    while (i < h)
        tmp[k++] = a[i++];
    memcpy(a, tmp, k * sizeof *a);
}

/* Build a preorder trie from ids sorted by bytes. */
static int build_trie(grammar_vocab *v, const int32_t *ids, size_t n, gr_trie *t)
{
    size_t nodes = 0;
    uint32_t prev_len = 0;
    const uint8_t *prev = NULL;
    for (size_t i = 0; i < n; i++) { /* count: bytes beyond the common prefix with the previous */
        uint32_t len, k = 0;
        const uint8_t *s = vocab_bytes(v, ids[i], &len);
        while (prev && k < len && k < prev_len && s[k] == prev[k])
            k++;
        nodes += len - k;
        prev = s;
        prev_len = len;
    }
    t->n = (uint32_t)nodes;
    t->byte = dsk_malloc(nodes + 1);
    t->depth = dsk_malloc(nodes + 1);
    t->end = dsk_malloc((nodes + 1) * sizeof *t->end);
    t->tok = dsk_malloc((nodes + 1) * sizeof *t->tok);
    t->more = dsk_calloc(nodes + 1, 1);
    if (!t->byte || !t->depth || !t->end || !t->tok || !t->more)
        return dsk_err_ctx("grammar vocabulary: %zu trie nodes", nodes);
    uint32_t path[256]; /* node index at each depth of the current path */
    uint32_t m = 0, depth = 0;
    prev = NULL;
    prev_len = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t len, k = 0;
        const uint8_t *s = vocab_bytes(v, ids[i], &len);
        while (prev && k < len && k < prev_len && s[k] == prev[k])
            k++;
        if (prev && k == len && len == prev_len) { /* same bytes as the previous id */
            t->more[path[len - 1]] = 1;
            int32_t *p = &t->tok[path[len - 1]];
            while (v->same[*p] >= 0)
                p = &v->same[*p];
            v->same[*p] = ids[i];
            continue;
        }
        while (depth > k)
            t->end[path[--depth]] = m;
        for (; depth < len; depth++) {
            t->byte[m] = s[depth];
            t->depth[m] = (uint8_t)(depth + 1);
            t->tok[m] = -1;
            path[depth] = m++;
        }
        t->tok[path[len - 1]] = ids[i];
        prev = s;
        prev_len = len;
    }
    while (depth > 0)
        t->end[path[--depth]] = m;
    t->n = m;
    return 0;
}

size_t grammar_mask_words(const grammar_vocab *v)
{
    return v->words;
}

void grammar_vocab_free(grammar_vocab *v)
{
    if (!v)
        return;
    free(v->blob);
    free(v->off);
    free(v->kind);
    free(v->nchars);
    free(v->same);
    for (int i = 0; i < 2; i++) {
        free(v->trie[i].byte);
        free(v->trie[i].depth);
        free(v->trie[i].end);
        free(v->trie[i].tok);
        free(v->trie[i].more);
        free(v->trie[i].below);
        free(v->trie[i].ord);
    }
    free(v->plain_le);
    free(v->other_ids);
    free(v->other_index);
    free(v->starts);
    free(v->second);
    free(v->beyond);
    free(v->inner_ids);
    free(v->beyond_ids);
    free(v);
}

static int fill(grammar_vocab *v, const dsk_tokenizer *tok)
{
    int32_t n_tok = tok_vocab_size(tok);
    size_t total = 0;
    for (int32_t id = 0; id < v->size && id < n_tok; id++) {
        size_t len;
        if (!tok_is_added(tok, id) && tok_bytes(tok, id, &len))
            total += len;
    }
    v->blob = dsk_malloc(total + 1);
    v->off = dsk_malloc(((size_t)v->size + 1) * sizeof *v->off);
    v->kind = dsk_calloc((size_t)v->size, 1);
    v->nchars = dsk_calloc((size_t)v->size, 1);
    v->same = dsk_malloc((size_t)v->size * sizeof *v->same);
    if (!v->blob || !v->off || !v->kind || !v->nchars || !v->same)
        return -1;
    size_t at = 0;
    for (int32_t id = 0; id < v->size; id++) {
        v->off[id] = (uint32_t)at;
        v->same[id] = -1;
        size_t len = 0;
        const uint8_t *b = id < n_tok ? tok_bytes(tok, id, &len) : NULL;
        if (!b)
            continue;
        if (tok_is_added(tok, id)) {
            v->kind[id] = GR_TOK_CONTROL;
            continue;
        }
        if (!len || len > 255) /* no such BPE token; a longer one would overflow the trie depth */
            continue;
        memcpy(v->blob + at, b, len);
        at += len;
        uint32_t chars;
        if (is_plain(b, (uint32_t)len, &chars)) {
            v->kind[id] = GR_TOK_PLAIN;
            v->nchars[id] = (uint8_t)chars;
            if (chars > v->max_chars)
                v->max_chars = chars;
        } else {
            v->kind[id] = GR_TOK_OTHER;
        }
    }
    v->off[v->size] = (uint32_t)at;
    v->kind[v->eos] = GR_TOK_CONTROL; /* EOS ends the output, whatever its bytes */
    v->other_index = dsk_malloc((size_t)v->size * sizeof *v->other_index);
    if (!v->other_index)
        return -1;
    for (int32_t id = 0; id < v->size; id++)
        v->other_index[id] = v->kind[id] == GR_TOK_OTHER ? v->n_other++ : UINT32_MAX;
    v->other_ids = dsk_malloc((v->n_other + 1) * sizeof *v->other_ids);
    if (!v->other_ids)
        return -1;
    for (int32_t id = 0; id < v->size; id++)
        if (v->kind[id] == GR_TOK_OTHER)
            v->other_ids[v->other_index[id]] = id;
    return 0;
}

static int other_order(grammar_vocab *v)
{
    gr_trie *t = &v->trie[GR_TRIE_OTHER];
    t->ord = dsk_malloc((t->n + 1) * sizeof *t->ord);
    if (!t->ord)
        return -1;
    for (uint32_t i = 0; i < t->n; i++)
        t->ord[i] = t->tok[i] >= 0 ? v->other_index[t->tok[i]] : UINT32_MAX;
    return 0;
}

static int build_tries(grammar_vocab *v)
{
    int32_t *ids = dsk_malloc((size_t)v->size * sizeof *ids);
    int32_t *tmp = dsk_malloc((size_t)v->size * sizeof *tmp);
    int rc = -1;
    if (!ids || !tmp)
        goto done;
    for (int k = 0; k < 2; k++) {
        size_t n = 0;
        for (int32_t id = 0; id < v->size; id++)
            if (v->kind[id] == (k == GR_TRIE_PLAIN ? GR_TOK_PLAIN : GR_TOK_OTHER))
                ids[n++] = id;
        merge_sort(v, ids, tmp, n);
        if (build_trie(v, ids, n, &v->trie[k]))
            goto done;
    }
    rc = 0;
done:
    free(ids);
    free(tmp);
    return rc;
}

/* Which bytes each plain-trie subtree holds (for the tracked bytes: not letters), so a walk after
 * tokens holding some byte can skip the subtrees without it. */
static int build_below(grammar_vocab *v)
{
    int bit = 0;
    for (int b = 0; b < 128; b++) {
        int letter = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z');
        int plain = (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') || b == GR_NONASCII;
        v->track[b] = (int8_t)(plain && !letter ? bit++ : -1);
    }
    gr_trie *t = &v->trie[GR_TRIE_PLAIN];
    t->below = dsk_calloc(t->n + 1, sizeof *t->below);
    if (!t->below)
        return -1;
    uint64_t acc[258] = {0}; /* per depth: what the subtrees at that depth under the current parent hold */
    for (uint32_t i = t->n; i-- > 0;) { /* children come after their parent: go backwards */
        uint32_t d = t->depth[i];
        int c = t->byte[i] < 0x80 ? t->byte[i] : GR_NONASCII;
        uint64_t own = v->track[c] >= 0 ? 1ull << v->track[c] : 0;
        t->below[i] = own | acc[d + 1];
        acc[d + 1] = 0;
        acc[d] |= t->below[i];
    }
    return 0;
}

/* Plain tokens of at most c characters; by first character, second character, and the characters
 * after the first (rows and id lists); the trie's first-byte nodes. */
static int build_plain_masks(grammar_vocab *v)
{
    size_t w = v->words;
    v->plain_le = dsk_calloc((v->max_chars + 1) * w, sizeof *v->plain_le);
    if (!v->plain_le)
        return -1;
    for (int32_t id = 0; id < v->size; id++)
        if (v->kind[id] == GR_TOK_PLAIN)
            v->plain_le[v->nchars[id] * w + (uint32_t)id / 32] |= 1u << (id & 31);
    for (uint32_t c = 1; c <= v->max_chars; c++)
        for (size_t i = 0; i < w; i++)
            v->plain_le[c * w + i] |= v->plain_le[(c - 1) * w + i];
    v->starts = dsk_calloc(128 * w, sizeof *v->starts);
    v->second = dsk_calloc(128 * w, sizeof *v->second);
    v->beyond = dsk_calloc(128 * w, sizeof *v->beyond);
    if (!v->starts || !v->second || !v->beyond)
        return -1;
    memset(v->inner_off, 0, sizeof v->inner_off);
    memset(v->beyond_off, 0, sizeof v->beyond_off);
    uint8_t seen[128] = {0};
    for (int pass = 0; pass < 2; pass++) {
        uint32_t at[128], at2[128];
        memcpy(at, v->inner_off, sizeof at);
        memcpy(at2, v->beyond_off, sizeof at2);
        for (int32_t id = 0; id < v->size; id++) {
            if (v->kind[id] != GR_TOK_PLAIN)
                continue;
            uint32_t len, bit = 1u << (id & 31), word = (uint32_t)id / 32;
            const uint8_t *b = vocab_bytes(v, id, &len);
            uint32_t n0 = gr_char_len(b[0]), n1 = n0 < len ? n0 + gr_char_len(b[n0]) : len;
            if (!pass) {
                v->starts[(b[0] < 0x80 ? b[0] : GR_NONASCII) * w + word] |= bit;
                if (n0 < len)
                    v->second[(b[n0] < 0x80 ? b[n0] : GR_NONASCII) * w + word] |= bit;
            }
            /* the token's classes after its first character (bit 0), and from its third on (bit 1) */
            uint8_t list[128], n_list = 0;
            for (uint32_t i = n0; i < len; i++) {
                uint8_t c = b[i] < 0x80 ? b[i] : GR_NONASCII;
                if (!seen[c])
                    list[n_list++] = c;
                seen[c] |= (uint8_t)(i < n1 ? 1 : 3);
            }
            for (uint8_t k = 0; k < n_list; k++) {
                uint8_t c = list[k], f = seen[c];
                seen[c] = 0;
                if (pass) {
                    if (f & 1)
                        v->inner_ids[at[c]++] = id;
                    if (f & 2)
                        v->beyond_ids[at2[c]++] = id;
                } else {
                    v->inner_off[c + 1] += f & 1;
                    v->beyond_off[c + 1] += f >> 1;
                    if (f & 2)
                        v->beyond[c * w + word] |= bit;
                }
            }
        }
        if (!pass) {
            for (int c = 0; c < 128; c++) {
                v->inner_off[c + 1] += v->inner_off[c];
                v->beyond_off[c + 1] += v->beyond_off[c];
            }
            v->inner_ids = dsk_malloc((v->inner_off[128] + 1) * sizeof *v->inner_ids);
            v->beyond_ids = dsk_malloc((v->beyond_off[128] + 1) * sizeof *v->beyond_ids);
            if (!v->inner_ids || !v->beyond_ids)
                return -1;
        }
    }
    const gr_trie *pt = &v->trie[GR_TRIE_PLAIN];
    for (int c = 0; c < 256; c++)
        v->top[c] = UINT32_MAX;
    for (uint32_t i = 0; i < pt->n; i = pt->end[i])
        v->top[pt->byte[i]] = i;
    /* the non-ASCII plain characters: U+0080..U+10FFFF but surrogates and U+FF5C */
    static const uint32_t ranges[][2] = {{0x80, 0xD7FF}, {0xE000, 0xFF5B}, {0xFF5D, 0x10FFFF}};
    v->n_seqs = 0;
    for (int i = 0; i < 3; i++) {
        int k = utf8_sequences(ranges[i][0], ranges[i][1], v->seqs + v->n_seqs, 16 - v->n_seqs);
        if (k < 0)
            return dsk_err("grammar vocabulary: plain character ranges overflow");
        v->n_seqs += k;
    }
    return 0;
}

int grammar_vocab_new(const dsk_tokenizer *tok, int vocab_size, int32_t eos_id, grammar_vocab **out)
{
    *out = NULL;
    if (vocab_size <= 0 || vocab_size < tok_vocab_size(tok))
        return dsk_err("grammar vocabulary: vocab_size %d is below the tokenizer's %d ids", vocab_size,
                       tok_vocab_size(tok));
    if (eos_id < 0 || eos_id >= vocab_size)
        return dsk_err("grammar vocabulary: EOS id %d is outside the vocabulary", eos_id);
    grammar_vocab *v = dsk_calloc(1, sizeof *v);
    if (!v)
        return -1;
    v->size = vocab_size;
    v->words = ((uint32_t)vocab_size + 31) / 32;
    v->eos = eos_id;
    v->dsml = tok_id(tok, DSML_TOKEN);
    if (v->dsml >= 0 && !tok_is_added(tok, v->dsml))
        v->dsml = -1; /* "｜DSML｜" as an ordinary vocabulary entry is text, not the marker */
    if (fill(v, tok) || build_tries(v) || other_order(v) || build_below(v) || build_plain_masks(v)) {
        grammar_vocab_free(v);
        return dsk_err_ctx("building the grammar vocabulary");
    }
    *out = v;
    return 0;
}
