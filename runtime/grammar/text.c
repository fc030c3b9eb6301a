/* Code point sets and how text is spelled in the automata: UTF-8 byte-range paths for a set of
 * characters, JSON string characters (raw or escaped), bounded JSON whitespace. */
#include "runtime/common/error.h"
#include "runtime/grammar/grammar_internal.h"
#include "runtime/tokenizer/utf8.h"

#include <stdlib.h>
#include <string.h>

/* ---- code point sets ---- */

void cset_add(gr_cset *s, uint32_t lo, uint32_t hi)
{
    if (s->failed || lo > hi)
        return;
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 8;
        gr_range *r = dsk_realloc(s->r, cap * sizeof *r);
        if (!r) {
            s->failed = 1;
            return;
        }
        s->r = r;
        s->cap = cap;
    }
    s->r[s->n++] = (gr_range){lo, hi};
}

static int cmp_range(const void *a, const void *b)
{
    const gr_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

void cset_norm(gr_cset *s)
{
    if (s->failed || !s->n)
        return;
    qsort(s->r, s->n, sizeof *s->r, cmp_range);
    uint32_t k = 0;
    for (uint32_t i = 1; i < s->n; i++) {
        if (s->r[i].lo <= s->r[k].hi + 1) {
            if (s->r[i].hi > s->r[k].hi)
                s->r[k].hi = s->r[i].hi;
        } else {
            s->r[++k] = s->r[i];
        }
    }
    s->n = k + 1;
}

void cset_invert(gr_cset *s)
{
    cset_norm(s);
    if (s->failed)
        return;
    gr_cset out = {0};
    uint32_t at = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->r[i].lo > at)
            cset_add(&out, at, s->r[i].lo - 1);
        at = s->r[i].hi + 1;
    }
    if (at <= 0x10FFFF)
        cset_add(&out, at, 0x10FFFF);
    free(s->r);
    *s = out;
}

void cset_sub(gr_cset *s, const gr_cset *minus)
{
    if (!minus || !minus->n)
        return;
    gr_cset m = {0};
    for (uint32_t i = 0; i < minus->n; i++)
        cset_add(&m, minus->r[i].lo, minus->r[i].hi);
    cset_invert(&m); /* s - minus = s & ~minus, by walking both sorted lists */
    cset_norm(s);
    gr_cset out = {0};
    out.failed = s->failed | m.failed;
    for (uint32_t i = 0, j = 0; i < s->n && j < m.n;) {
        uint32_t lo = s->r[i].lo > m.r[j].lo ? s->r[i].lo : m.r[j].lo;
        uint32_t hi = s->r[i].hi < m.r[j].hi ? s->r[i].hi : m.r[j].hi;
        cset_add(&out, lo, hi);
        if (s->r[i].hi < m.r[j].hi)
            i++;
        else
            j++;
    }
    cset_free(&m);
    free(s->r);
    *s = out;
}

int cset_has(const gr_cset *s, uint32_t c)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (c >= s->r[i].lo && c <= s->r[i].hi)
            return 1;
    return 0;
}

void cset_free(gr_cset *s)
{
    free(s->r);
    *s = (gr_cset){0};
}

/* ---- UTF-8 ranges ---- */

/* Split lo..hi until each piece's first and last code points have UTF-8 forms of one length whose
 * bytes differ only in whole trailing ranges; then each byte position is one range. */
static int split(uint32_t lo, uint32_t hi, gr_seq *out, int cap, int *n)
{
    if (lo > hi)
        return 0;
    static const uint32_t max_of_len[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= max_of_len[i] && max_of_len[i] < hi)
            return split(lo, max_of_len[i], out, cap, n) || split(max_of_len[i] + 1, hi, out, cap, n);
    for (int i = 1; i < 4 && hi > 0x7F; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m)
                return split(lo, lo | m, out, cap, n) || split((lo | m) + 1, hi, out, cap, n);
            if ((hi & m) != m)
                return split(lo, (hi & ~m) - 1, out, cap, n) || split(hi & ~m, hi, out, cap, n);
        }
    }
    if (*n == cap)
        return -1;
    uint8_t a[4], b[4];
    int len = utf8_encode(lo, a);
    utf8_encode(hi, b);
    gr_seq *q = &out[(*n)++];
    q->n = (uint8_t)len;
    for (int i = 0; i < len; i++) {
        q->lo[i] = a[i];
        q->hi[i] = b[i];
    }
    return 0;
}

int utf8_sequences(uint32_t lo, uint32_t hi, gr_seq *out, int cap)
{
    int n = 0;
    return split(lo, hi, out, cap, &n) ? -1 : n;
}

/* ---- emission ---- */

/* Code points lo..hi as UTF-8 paths. Trailing full continuation bytes (0x80..0xBF) go through tail[k],
 * a chain shared by every sequence of one emission (created on demand): fewer NFA states, and the
 * DFA's subsets coincide instead of multiplying. */
static void emit_utf8(gr_nfa *a, uint32_t from, uint32_t to, uint32_t lo, uint32_t hi, uint32_t tail[4])
{
    gr_seq seqs[24];
    int n = utf8_sequences(lo, hi, seqs, 24);
    for (int k = 0; k < n; k++) {
        const gr_seq *q = &seqs[k];
        int full = 0; /* trailing bytes that may be any continuation byte */
        while (full + 1 < q->n && q->lo[q->n - 1 - full] == 0x80 && q->hi[q->n - 1 - full] == 0xBF)
            full++;
        for (int j = 1; j <= full; j++)
            if (tail[j] == GR_NONE) {
                tail[j] = nfa_state(a);
                nfa_edge(a, tail[j], tail[j - 1], 0x80, 0xBF);
            }
        uint32_t at = from;
        for (int i = 0; i < q->n - full; i++) {
            uint32_t nx = i + 1 == q->n - full ? tail[full] : nfa_state(a);
            nfa_edge(a, at, nx, q->lo[i], q->hi[i]);
            at = nx;
        }
    }
}

/* Each range of s (surrogates skipped) as UTF-8. */
static void emit_raw(gr_nfa *a, uint32_t from, uint32_t to, const gr_cset *s)
{
    uint32_t tail[4] = {to, GR_NONE, GR_NONE, GR_NONE};
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        if (lo < 0xD800)
            emit_utf8(a, from, to, lo, hi < 0xD7FF ? hi : 0xD7FF, tail);
        if (hi > 0xDFFF)
            emit_utf8(a, from, to, lo > 0xE000 ? lo : 0xE000, hi, tail);
    }
}

static void emit_u_escape(gr_nfa *a, uint32_t from, uint32_t to, uint32_t c)
{
    static const char hex[] = "0123456789abcdef";
    char e[7] = {'\\', 'u', hex[c >> 12 & 15], hex[c >> 8 & 15], hex[c >> 4 & 15], hex[c & 15], 0};
    nfa_str(a, from, to, e);
}

/* A JSON string's spelling of control character c (never NUL). */
static void emit_control(gr_nfa *a, uint32_t from, uint32_t to, uint32_t c)
{
    static const char short_form[] = {[8] = 'b', [9] = 't', [10] = 'n', [12] = 'f', [13] = 'r'};
    if (c < sizeof short_form && short_form[c]) {
        char e[3] = {'\\', short_form[c], 0};
        nfa_str(a, from, to, e);
    } else if (c) {
        emit_u_escape(a, from, to, c);
    }
}

void emit_cset(gr_nfa *a, uint32_t from, uint32_t to, const gr_cset *s, int mode, const gr_cset *excluded)
{
    gr_cset raw = {0};
    for (uint32_t i = 0; i < s->n; i++)
        cset_add(&raw, s->r[i].lo, s->r[i].hi);
    cset_norm(&raw);
    if (mode == GR_TEXT_JSON) {
        gr_cset must_escape = {0};
        cset_add(&must_escape, 0, 0x1F);
        cset_add(&must_escape, '"', '"');
        cset_add(&must_escape, '\\', '\\');
        cset_sub(&raw, &must_escape);
        cset_free(&must_escape);
        for (uint32_t c = 1; c < 0x20; c++)
            if (cset_has(s, c))
                emit_control(a, from, to, c);
        if (cset_has(s, '"'))
            nfa_str(a, from, to, "\\\"");
        if (cset_has(s, '\\'))
            nfa_str(a, from, to, "\\\\");
        for (uint32_t i = 0; excluded && i < excluded->n; i++) /* excluded raw, escaped instead */
            for (uint32_t c = excluded->r[i].lo; c <= excluded->r[i].hi && c < 0x10000; c++)
                if (c >= 0x20 && cset_has(s, c) && (c < 0xD800 || c > 0xDFFF))
                    emit_u_escape(a, from, to, c);
    }
    cset_sub(&raw, excluded);
    if (raw.failed) {
        dsk_err("out of memory building a character set");
        a->failed = 1;
    }
    emit_raw(a, from, to, &raw);
    cset_free(&raw);
}

static void hex_edge(gr_nfa *a, uint32_t from, uint32_t to)
{
    nfa_edge(a, from, to, '0', '9');
    nfa_edge(a, from, to, 'a', 'f');
    nfa_edge(a, from, to, 'A', 'F');
}

/* \uXXXX: any BMP code point but NUL and surrogates, or a high-low surrogate pair. */
static void emit_any_u_escape(gr_nfa *a, uint32_t u0, uint32_t to)
{
    uint32_t h1 = nfa_state(a), h2 = nfa_state(a), h3 = nfa_state(a);
    hex_edge(a, h1, to);
    hex_edge(a, h2, h1);
    hex_edge(a, h3, h2);
    nfa_edge(a, u0, h3, '1', '9');
    nfa_edge(a, u0, h3, 'a', 'c');
    nfa_edge(a, u0, h3, 'A', 'C');
    nfa_edge(a, u0, h3, 'e', 'f');
    nfa_edge(a, u0, h3, 'E', 'F');
    /* 0XXX without 0000 */
    uint32_t z1 = nfa_state(a), z2 = nfa_state(a), z3 = nfa_state(a);
    nfa_edge(a, u0, z1, '0', '0');
    nfa_edge(a, z1, z2, '0', '0');
    nfa_edge(a, z2, z3, '0', '0');
    uint32_t zs[3] = {z1, z2, z3}, hs[3] = {h2, h1, to};
    for (int i = 0; i < 3; i++) {
        nfa_edge(a, zs[i], hs[i], '1', '9');
        nfa_edge(a, zs[i], hs[i], 'a', 'f');
        nfa_edge(a, zs[i], hs[i], 'A', 'F');
    }
    /* D000-D7FF, and D800-DBFF followed by \uDC00-\uDFFF */
    uint32_t d1 = nfa_state(a);
    nfa_edge(a, u0, d1, 'd', 'd');
    nfa_edge(a, u0, d1, 'D', 'D');
    nfa_edge(a, d1, h2, '0', '7');
    uint32_t p2 = nfa_state(a), p3 = nfa_state(a), p4 = nfa_state(a);
    nfa_edge(a, d1, p2, '8', '9');
    nfa_edge(a, d1, p2, 'a', 'b');
    nfa_edge(a, d1, p2, 'A', 'B');
    hex_edge(a, p2, p3);
    hex_edge(a, p3, p4);
    uint32_t p6 = nfa_then(a, p4, "\\u"), p7 = nfa_state(a);
    nfa_edge(a, p6, p7, 'd', 'd');
    nfa_edge(a, p6, p7, 'D', 'D');
    nfa_edge(a, p7, h2, 'c', 'f');
    nfa_edge(a, p7, h2, 'C', 'F');
}

void emit_json_char(gr_nfa *a, uint32_t from, uint32_t to, const gr_cset *excluded, int u_escapes)
{
    gr_cset raw = {0};
    cset_add(&raw, 0x20, 0x21);
    cset_add(&raw, 0x23, 0x5B);
    cset_add(&raw, 0x5D, 0x10FFFF);
    cset_sub(&raw, excluded);
    if (raw.failed) {
        dsk_err("out of memory building a character set");
        a->failed = 1;
    }
    emit_raw(a, from, to, &raw);
    cset_free(&raw);
    uint32_t e = nfa_then(a, from, "\\");
    static const char simple[] = "\"\\/bfnrt";
    for (const char *c = simple; *c; c++)
        nfa_edge(a, e, to, (uint8_t)*c, (uint8_t)*c);
    if (u_escapes)
        emit_any_u_escape(a, nfa_then(a, e, "u"), to);
}

void emit_ws(gr_nfa *a, uint32_t from, uint32_t to, int max)
{
    nfa_eps(a, from, to);
    uint32_t at = from;
    for (int i = 0; i < max; i++) {
        uint32_t nx = nfa_state(a);
        nfa_edge(a, at, nx, '\t', '\n');
        nfa_edge(a, at, nx, '\r', '\r');
        nfa_edge(a, at, nx, ' ', ' ');
        nfa_eps(a, nx, to);
        at = nx;
    }
}
