/* Loading a tokenizer.json into the tables of tok_internal.h. */
#include "runtime/tokenizer/tok_internal.h"
#include "runtime/tokenizer/utf8.h"
#include "runtime/common/error.h"
#include "runtime/common/json_cost.h"
#include "runtime/common/util.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes are
 * moved, in order, to U+0100 and up. */
static uint32_t byte_to_cp(int b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
        return (uint32_t)b;
    int n = 0;
    for (int i = 0; i < b; i++)
        if (!((i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF)))
            n++;
    return 256u + (uint32_t)n;
}

/* The byte a byte-level character stands for; -1 if cp is not in the alphabet. */
static int cp_to_byte(const int16_t table[324], uint32_t cp)
{
    return cp < 324 ? table[cp] : -1;
}

static uint64_t hash_str(const char *s, size_t len)
{
    return dsk_xxh64(s, len);
}

int32_t tok_lookup(const dsk_tokenizer *tok, const char *s, size_t len)
{
    size_t i = (size_t)hash_str(s, len) & tok->map_mask;
    for (;;) {
        uint32_t v = tok->map[i];
        if (!v)
            return -1;
        int32_t id = (int32_t)(v - 1);
        if (tok->str_len[id] == len && !memcmp(tok->strs + tok->str_off[id], s, len))
            return id;
        i = (i + 1) & tok->map_mask;
    }
}

/* Map string -> id, replacing an earlier id with the same string. */
static void map_put(dsk_tokenizer *tok, int32_t id)
{
    const char *s = tok->strs + tok->str_off[id];
    size_t len = tok->str_len[id];
    size_t i = (size_t)hash_str(s, len) & tok->map_mask;
    for (;;) {
        uint32_t v = tok->map[i];
        if (!v)
            break;
        int32_t o = (int32_t)(v - 1);
        if (tok->str_len[o] == len && !memcmp(tok->strs + tok->str_off[o], s, len))
            break;
        i = (i + 1) & tok->map_mask;
    }
    tok->map[i] = (uint32_t)id + 1;
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n)
        p <<= 1;
    return p;
}

/* ---- the parts of the file we accept ---- */

static int check_normalizer(const json_t *n)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (type && !strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(n, "normalizers");
        size_t i;
        const json_t *v;
        json_array_foreach(list, i, v)
        if (check_normalizer(v))
            return -1;
        return 0;
    }
    return dsk_err("normalizer '%s' is not supported (only none or an empty Sequence)",
                   type ? type : "?");
}

/* Add one pre-tokenizer step (a Split or ByteLevel) to the stages. *byte_level is set once a
 * ByteLevel step is seen; nothing may follow it. */
static int add_pretokenizer(dsk_tokenizer *tok, const json_t *p, int *byte_level)
{
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type)
        return dsk_err("pre_tokenizer step without a type");
    if (*byte_level)
        return dsk_err("pre_tokenizer step '%s' after ByteLevel is not supported", type);
    if (!strcmp(type, "Sequence")) {
        size_t i;
        const json_t *v;
        json_array_foreach(json_object_get(p, "pretokenizers"), i, v)
        if (add_pretokenizer(tok, v, byte_level))
            return -1;
        return 0;
    }
    const char *pattern = NULL;
    size_t plen = 0;
    int literal = 0;
    if (!strcmp(type, "Split")) {
        const char *behavior = json_string_value(json_object_get(p, "behavior"));
        if (!behavior || strcmp(behavior, "Isolated"))
            return dsk_err("Split behavior '%s' is not supported (only Isolated)",
                           behavior ? behavior : "?");
        if (json_is_true(json_object_get(p, "invert")))
            return dsk_err("Split with invert=true is not supported");
        const json_t *pat = json_object_get(p, "pattern");
        const json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
        if (json_is_string(re)) {
            pattern = json_string_value(re);
            plen = json_string_length(re);
        } else if (json_is_string(str)) {
            pattern = json_string_value(str);
            plen = json_string_length(str);
            literal = 1;
        } else {
            return dsk_err("Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
        }
    } else if (!strcmp(type, "ByteLevel")) {
        *byte_level = 1;
        if (json_is_true(json_object_get(p, "add_prefix_space")))
            return dsk_err("ByteLevel pre_tokenizer with add_prefix_space=true is not supported");
        if (!json_is_true(json_object_get(p, "use_regex")))
            return 0;
        /* GPT-2's split, which ByteLevel applies itself when use_regex is set */
        pattern = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
        plen = strlen(pattern);
    } else {
        return dsk_err("pre_tokenizer '%s' is not supported (only Sequence, Split, ByteLevel)", type);
    }
    if (tok->n_stages == TOK_MAX_STAGES)
        return dsk_err("more than %d pre_tokenizer Split steps", TOK_MAX_STAGES);
    if (plen > TOK_MAX_PATTERN_BYTES)
        return dsk_err("pre_tokenizer step %d (%s): the pattern is %zu bytes, more than the %d one may have",
                       tok->n_stages, type, plen, TOK_MAX_PATTERN_BYTES);
    if (pretok_compile(pattern, plen, literal, &tok->stage[tok->n_stages]))
        return dsk_err_ctx("pre_tokenizer step %d (%s)", tok->n_stages, type);
    tok->n_stages++;
    return 0;
}

static int check_model_options(const json_t *model)
{
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type || strcmp(type, "BPE"))
        return dsk_err("model type '%s' is not supported (only BPE)", type ? type : "?");
    const json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0.0)
        return dsk_err("BPE dropout is not supported");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const json_t *v = json_object_get(model, affixes[i]);
        if (v && !json_is_null(v) && json_string_length(v) > 0)
            return dsk_err("BPE %s is not supported", affixes[i]);
    }
    return 0;
}

/* ---- building the tables ---- */

static int set_string(dsk_tokenizer *tok, dsk_buf *strs, int32_t id, const char *s, size_t len,
                      const char *what)
{
    if (id < 0 || id >= tok->n_ids)
        return dsk_err("%s '%s' has an invalid id %d", what, s, id);
    if (len > TOK_MAX_TOKEN_BYTES)
        return dsk_err("%s '%.40s...' (id %d) is %zu bytes, more than the %d a token may have", what, s, id, len,
                       TOK_MAX_TOKEN_BYTES);
    if (tok->str_off[id] != UINT32_MAX) {
        if (tok->str_len[id] == len && !memcmp(strs->data + tok->str_off[id], s, len))
            return 0;
        return dsk_err("id %d is given to both '%s' and '%s'", id, strs->data + tok->str_off[id], s);
    }
    if (strs->len + len + 1 > UINT32_MAX)
        return dsk_err("the vocabulary's strings exceed 4 GiB");
    tok->str_off[id] = (uint32_t)strs->len;
    tok->str_len[id] = (uint32_t)len;
    if (dsk_buf_append(strs, s, len) || dsk_buf_append(strs, "", 1))
        return -1;
    return 0;
}

static int trie_add(tok_trie *t, const char *s, size_t len, int32_t added)
{
    if (!t->nodes) {
        t->cap = 64;
        t->nodes = dsk_malloc(t->cap * sizeof *t->nodes);
        if (!t->nodes)
            return -1;
        t->nodes[0] = (tok_trie_node){-1, -1, -1, 0};
        t->n = 1;
        memset(t->root_child, 0xFF, sizeof t->root_child);
    }
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = node == 0 ? t->root_child[b] : t->nodes[node].first_child;
        if (node != 0)
            while (c >= 0 && t->nodes[c].byte != b)
                c = t->nodes[c].next_sibling;
        if (c < 0) {
            if (t->n == t->cap) {
                tok_trie_node *n = dsk_realloc(t->nodes, 2 * t->cap * sizeof *n);
                if (!n)
                    return -1;
                t->nodes = n;
                t->cap *= 2;
            }
            c = (int32_t)t->n++;
            t->nodes[c] = (tok_trie_node){-1, -1, t->nodes[node].first_child, b};
            t->nodes[node].first_child = c;
            if (node == 0)
                t->root_child[b] = c;
        }
        node = c;
    }
    t->nodes[node].added = added;
    return 0;
}

/* Added tokens, numbered as Hugging Face numbers them (the file's "id" fields are not used): one whose
 * content is already a vocab entry or an earlier added token takes that id; the others take, in file
 * order, the next id after the largest added id so far, or the vocab's entry count if that is larger. */
static int load_added(dsk_tokenizer *tok, const json_t *list, size_t vocab_count, dsk_buf *strs)
{
    size_t i;
    const json_t *a;
    int64_t max_added = -1;
    size_t added_bytes = 0;
    json_array_foreach(list, i, a) {
        const json_t *content = json_object_get(a, "content");
        const char *s = json_string_value(content);
        size_t len = json_string_length(content);
        if (!s)
            return dsk_err("added_tokens[%zu] lacks its content", i);
        if (json_is_true(json_object_get(a, "single_word")))
            return dsk_err("added token '%s': single_word=true is not supported", s);
        if (!len)
            continue; /* ignored by Hugging Face too */
        /* each one is a path in the added-token trie: bounded, as the vocabulary's strings are */
        added_bytes += len;
        if (len > TOK_MAX_TOKEN_BYTES || added_bytes > TOK_MAX_ADDED_BYTES)
            return dsk_err("added_tokens[%zu] ('%.40s...', %zu bytes): an added token may have %d bytes, all of "
                           "them together %zu",
                           i, s, len, TOK_MAX_TOKEN_BYTES, TOK_MAX_ADDED_BYTES);
        tok->strs = strs->data;
        int32_t id = tok_lookup(tok, s, len);
        if (id < 0) {
            id = (int32_t)(max_added >= (int64_t)vocab_count || !vocab_count ? max_added + 1
                                                                              : (int64_t)vocab_count);
            if (set_string(tok, strs, id, s, len, "added token"))
                return -1;
            tok->strs = strs->data;
            map_put(tok, id);
        }
        tok_added *t = &tok->added[tok->n_added++];
        t->id = id;
        t->len = len;
        t->special = json_is_true(json_object_get(a, "special"));
        t->lstrip = json_is_true(json_object_get(a, "lstrip"));
        t->rstrip = json_is_true(json_object_get(a, "rstrip"));
        const json_t *norm = json_object_get(a, "normalized");
        t->normalized = norm ? json_is_true(norm) : !t->special;
        tok->special[id] |= TOK_FLAG_ADDED;
        if (t->special)
            tok->special[id] |= TOK_FLAG_SPECIAL;
        if (id > max_added)
            max_added = id;
    }
    return 0;
}

static int load_merges(dsk_tokenizer *tok, const json_t *merges)
{
    size_t n = json_array_size(merges);
    if (n >= (1u << TOK_RANK_BITS) || tok->n_ids >= TOK_MAX_IDS)
        return dsk_err("%zu merges over %d ids: more than this BPE table holds", n, tok->n_ids);
    tok->merge_mask = pow2_at_least(2 * n + 1) - 1;
    tok->merges = dsk_malloc((tok->merge_mask + 1) * sizeof *tok->merges);
    tok->merge_result = dsk_malloc((n + 1) * sizeof *tok->merge_result);
    tok->byte_pair = dsk_malloc(65536 * sizeof *tok->byte_pair);
    if (!tok->merges || !tok->merge_result || !tok->byte_pair)
        return -1;
    memset(tok->merges, 0xFF, (tok->merge_mask + 1) * sizeof *tok->merges);
    char both[1024];
    for (size_t r = 0; r < n; r++) {
        const json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) { /* "left right" */
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return dsk_err("merges[%zu] '%s' is not two tokens separated by a space", r, a);
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) { /* ["left", "right"] */
            a = json_string_value(json_array_get(m, 0));
            la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            lb = json_string_length(json_array_get(m, 1));
        } else {
            return dsk_err("merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", r);
        }
        if (la + lb > sizeof both)
            return dsk_err("merges[%zu] is longer than %zu bytes", r, sizeof both);
        memcpy(both, a, la);
        memcpy(both + la, b, lb);
        int32_t ia = tok_lookup(tok, a, la), ib = tok_lookup(tok, b, lb);
        int32_t im = tok_lookup(tok, both, la + lb);
        if (ia < 0 || ib < 0 || im < 0)
            return dsk_err("merges[%zu] '%.*s %.*s': a token is not in the vocabulary", r, (int)la, a,
                           (int)lb, b);
        uint64_t key = (uint64_t)ia << TOK_ID_BITS | (uint64_t)ib;
        size_t s = tok_merge_slot(key, tok->merge_mask);
        while (tok->merges[s] != TOK_EMPTY_SLOT && tok->merges[s] >> TOK_RANK_BITS != key)
            s = (s + 1) & tok->merge_mask;
        /* a repeated pair keeps its last rank, as Hugging Face's map does */
        tok->merges[s] = key << TOK_RANK_BITS | r;
        tok->merge_result[r] = im;
    }
    for (int b1 = 0; b1 < 256; b1++)
        for (int b2 = 0; b2 < 256; b2++)
            tok->byte_pair[b1 << 8 | b2] = tok_merge_rank(tok, tok->byte_id[b1], tok->byte_id[b2]);
    return 0;
}

/* The bytes each id decodes to. Hugging Face's ByteLevel decoder maps a token's characters back to
 * bytes, unless one of them is outside the byte alphabet: then the token's own UTF-8 is used. */
static int build_decoded(dsk_tokenizer *tok)
{
    int16_t table[324];
    memset(table, 0xFF, sizeof table);
    for (int b = 0; b < 256; b++)
        table[byte_to_cp(b)] = (int16_t)b;
    dsk_buf out = {0};
    tok->byte_off = dsk_malloc(((size_t)tok->n_ids + 1) * sizeof *tok->byte_off);
    if (!tok->byte_off)
        return -1;
    for (int32_t id = 0; id < tok->n_ids; id++) {
        tok->byte_off[id] = (uint32_t)out.len;
        if (tok->str_off[id] == UINT32_MAX)
            continue;
        const uint8_t *s = (const uint8_t *)tok->strs + tok->str_off[id];
        size_t len = tok->str_len[id], at = out.len, l;
        int mapped = 1;
        for (size_t i = 0; i < len; i += l) {
            int b = utf8_next(s + i, len - i, &l) == UTF8_OK ? cp_to_byte(table, utf8_decode(s + i, l))
                                                             : -1;
            if (b < 0) {
                mapped = 0;
                break;
            }
            uint8_t c = (uint8_t)b;
            if (dsk_buf_append(&out, &c, 1))
                goto fail;
            if (!l)
                l = 1;
        }
        if (!mapped) {
            out.len = at;
            if (dsk_buf_append(&out, s, len))
                goto fail;
        }
    }
    tok->byte_off[tok->n_ids] = (uint32_t)out.len;
    tok->bytes = (uint8_t *)out.data;
    return 0;
fail:
    dsk_buf_free(&out);
    return -1;
}

static int load_root(dsk_tokenizer *tok, const json_t *root)
{
    const json_t *model = json_object_get(root, "model");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    const json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return dsk_err("model.vocab (object) or model.merges (array) is missing");
    if (check_normalizer(json_object_get(root, "normalizer")) || check_model_options(model))
        return -1;
    const char *dec = json_string_value(json_object_get(json_object_get(root, "decoder"), "type"));
    if (!dec || strcmp(dec, "ByteLevel"))
        return dsk_err("decoder '%s' is not supported (only ByteLevel)", dec ? dec : "none");
    tok->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));

    /* ids run to the largest one given */
    json_int_t max_id = -1;
    const char *key;
    const json_t *v;
    /* every id is checked against the table limit before anything is sized by the largest one (an id
     * of 2^30 - 2 used to allocate 4.2 GB first) */
    json_object_foreach((json_t *)vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            return dsk_err("vocab entry '%s' has no valid id", key);
        if (json_integer_value(v) >= TOK_MAX_IDS)
            return dsk_err("vocab entry '%s' has id %lld; ids must be below %d", key,
                           (long long)json_integer_value(v), TOK_MAX_IDS);
        if (json_integer_value(v) > max_id)
            max_id = json_integer_value(v);
    }
    if (json_array_size(added) >= TOK_MAX_IDS || json_object_size(vocab) >= TOK_MAX_IDS)
        return dsk_err("%zu vocab entries and %zu added tokens: more than the %d ids a tokenizer may have",
                       json_object_size(vocab), json_array_size(added), TOK_MAX_IDS);
    /* room for every added token numbered after the vocab (trimmed once they are placed) */
    size_t vocab_count = json_object_size(vocab);
    if (max_id < (json_int_t)vocab_count)
        max_id = (json_int_t)vocab_count;
    tok->n_ids = (int32_t)(max_id + 1 + (json_int_t)json_array_size(added));
    size_t n = (size_t)tok->n_ids;
    tok->str_off = dsk_malloc(n * sizeof *tok->str_off);
    tok->str_len = dsk_calloc(n, sizeof *tok->str_len);
    tok->special = dsk_calloc(n, 1);
    tok->added = dsk_calloc(json_array_size(added) + 1, sizeof *tok->added);
    if (!tok->str_off || !tok->str_len || !tok->special || !tok->added)
        return -1;
    memset(tok->str_off, 0xFF, n * sizeof *tok->str_off);

    /* string -> id: vocab entries, then added tokens (which win, as in Hugging Face) */
    tok->map_mask = pow2_at_least(2 * n) - 1;
    tok->map = dsk_calloc(tok->map_mask + 1, sizeof *tok->map);
    if (!tok->map)
        return -1;
    dsk_buf strs = {0};
    void *it;
    for (it = json_object_iter((json_t *)vocab); it; it = json_object_iter_next((json_t *)vocab, it)) {
        int32_t id = (int32_t)json_integer_value(json_object_iter_value(it));
        if (set_string(tok, &strs, id, json_object_iter_key(it), json_object_iter_key_len(it),
                       "vocab entry"))
            goto fail;
    }
    tok->strs = strs.data;
    for (int32_t id = 0; id < tok->n_ids; id++)
        if (tok->str_off[id] != UINT32_MAX)
            map_put(tok, id);
    if (load_added(tok, added, vocab_count, &strs))
        goto fail;
    tok->strs = strs.data;
    while (tok->n_ids > 0 && tok->str_off[tok->n_ids - 1] == UINT32_MAX)
        tok->n_ids--;

    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        int l = utf8_encode(byte_to_cp(b), u);
        tok->byte_id[b] = tok_lookup(tok, (const char *)u, (size_t)l);
        if (tok->byte_id[b] < 0)
            return dsk_err("the vocabulary lacks the byte-level token of byte 0x%02X", b);
    }
    if (load_merges(tok, merges))
        return -1;
    for (size_t k = 0; k < tok->n_added; k++) {
        tok_added *a = &tok->added[k];
        a->content = tok->strs + tok->str_off[a->id];
        if (a->len && trie_add(&tok->trie[a->normalized ? 1 : 0], a->content, a->len, (int32_t)k))
            return -1;
    }
    int byte_level = 0;
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    if (pre && !json_is_null(pre) && add_pretokenizer(tok, pre, &byte_level))
        return -1;
    if (!byte_level)
        return dsk_err("the pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");
    if (build_decoded(tok))
        return -1;
    static const char bos[] = "<｜begin▁of▁sentence｜>", eos[] = "<｜end▁of▁sentence｜>";
    tok->bos = tok_lookup(tok, bos, sizeof bos - 1);
    tok->eos = tok_lookup(tok, eos, sizeof eos - 1);
    return 0;
fail:
    tok->strs = NULL;
    dsk_buf_free(&strs);
    return -1;
}

int tok_load_json(const char *text, size_t len, dsk_tokenizer **out)
{
    *out = NULL;
    if (len > TOK_MAX_FILE_BYTES)
        return dsk_err("the tokenizer is %zu bytes, more than the %zu a tokenizer.json may have", len,
                       TOK_MAX_FILE_BYTES);
    /* jansson's document can cost 80 times the text (empty objects): refuse before building it */
    size_t cost = dsk_json_cost(text, len);
    if (cost > TOK_MAX_PARSE_BYTES)
        return dsk_err("the tokenizer's JSON would take about %zu MiB to parse, more than the %zu MiB allowed "
                       "(a tokenizer.json is a few large tables, not millions of small values)",
                       cost >> 20, TOK_MAX_PARSE_BYTES >> 20);
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
    if (!root)
        return dsk_err("invalid JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    dsk_tokenizer *tok = dsk_calloc(1, sizeof *tok);
    if (!tok) {
        json_decref(root);
        return -1;
    }
    int rc = load_root(tok, root);
    json_decref(root);
    if (rc) {
        tok_free(tok);
        return -1;
    }
    *out = tok;
    return 0;
}

int tok_load(const char *path, dsk_tokenizer **out)
{
    char *text;
    size_t len;
    if (dsk_read_file_max(path, TOK_MAX_FILE_BYTES, "tokenizer", &text, &len))
        return dsk_err_ctx("loading tokenizer %s", path);
    int rc = tok_load_json(text, len, out);
    free(text);
    if (rc)
        return dsk_err_ctx("loading tokenizer %s", path);
    return 0;
}

void tok_free(dsk_tokenizer *tok)
{
    if (!tok)
        return;
    for (int i = 0; i < tok->n_stages; i++)
        pcre2_code_free(tok->stage[i]);
    for (int i = 0; i < 2; i++)
        free(tok->trie[i].nodes);
    free(tok->strs);
    free(tok->str_off);
    free(tok->str_len);
    free(tok->bytes);
    free(tok->byte_off);
    free(tok->special);
    free(tok->map);
    free(tok->merges);
    free(tok->merge_result);
    free(tok->byte_pair);
    free(tok->added);
    free(tok);
}
