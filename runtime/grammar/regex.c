/* The regex subset (docs/grammar.md): parsed to a small tree, then emitted as NFA text paths. Its
 * meaning is Python's `re` (the tests' oracle), restricted so that every string the automaton
 * accepts also matches there: \d \w \s are their ASCII parts, and their complements (or a negated
 * class holding them) stay within ASCII, where Python's Unicode classes and ours agree. */
#include "runtime/common/error.h"
#include "runtime/grammar/grammar_internal.h"
#include "runtime/tokenizer/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RX_MAX_REPEAT 1000
#define RX_MAX_NEST 200

enum { RX_SET, RX_CAT, RX_ALT, RX_REP, RX_BOL, RX_EOL };

typedef struct rx rx;
struct rx {
    int kind;
    gr_cset set;
    rx **sub;
    uint32_t n, cap;
    int min, max; /* RX_REP; max < 0: unbounded */
};

typedef struct {
    const uint8_t *s;
    size_t len, at;
    int nest;
    int failed;
} rx_parser;

static void rx_free(rx *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->n; i++)
        rx_free(r->sub[i]);
    free(r->sub);
    cset_free(&r->set);
    free(r);
}

static rx *rx_new(rx_parser *p, int kind)
{
    rx *r = dsk_calloc(1, sizeof *r);
    if (!r)
        p->failed = 1;
    else
        r->kind = kind;
    return r;
}

static int rx_push(rx_parser *p, rx *parent, rx *child)
{
    if (!child)
        return -1;
    if (parent->n == parent->cap) {
        uint32_t cap = parent->cap ? 2 * parent->cap : 4;
        rx **s = dsk_realloc(parent->sub, cap * sizeof *s);
        if (!s) {
            rx_free(child);
            p->failed = 1;
            return -1;
        }
        parent->sub = s;
        parent->cap = cap;
    }
    parent->sub[parent->n++] = child;
    return 0;
}

static int rx_fail(rx_parser *p, const char *what)
{
    p->failed = 1;
    return dsk_err("regex at byte %zu: %s", p->at, what);
}

/* The next code point (advancing); -1 at the end or on bad UTF-8. */
static int32_t next_cp(rx_parser *p)
{
    if (p->at >= p->len)
        return -1;
    size_t l;
    if (utf8_next(p->s + p->at, p->len - p->at, &l) != UTF8_OK) {
        rx_fail(p, "not valid UTF-8");
        return -1;
    }
    uint32_t c = utf8_decode(p->s + p->at, l);
    p->at += l;
    return (int32_t)c;
}

static int peek(const rx_parser *p)
{
    return p->at < p->len ? p->s[p->at] : -1;
}

static int hex_value(rx_parser *p, int digits, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int c = peek(p);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return rx_fail(p, "a hex escape needs hex digits");
        v = v * 16 + (uint32_t)d;
        p->at++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return rx_fail(p, "an escape names no character");
    *out = v;
    return 0;
}

/* Shorthand classes: \d \w \s as ASCII; their complements within ASCII. */
static void add_shorthand(gr_cset *s, int c)
{
    gr_cset t = {0};
    int lower = c | 0x20;
    if (lower == 'd') {
        cset_add(&t, '0', '9');
    } else if (lower == 'w') {
        cset_add(&t, '0', '9');
        cset_add(&t, 'A', 'Z');
        cset_add(&t, 'a', 'z');
        cset_add(&t, '_', '_');
    } else {
        cset_add(&t, '\t', '\r'); /* \t \n \v \f \r */
        cset_add(&t, ' ', ' ');
        if (c == 'S')
            cset_add(&t, 0x1C, 0x1F); /* Python's \s has these too: keep them out of \S */
    }
    if (c < 'a') { /* \D \W \S: the rest of ASCII */
        cset_invert(&t);
        gr_cset ascii_only = {0};
        cset_add(&ascii_only, 0x80, 0x10FFFF);
        cset_sub(&t, &ascii_only);
        cset_free(&ascii_only);
    }
    for (uint32_t i = 0; i < t.n; i++)
        cset_add(s, t.r[i].lo, t.r[i].hi);
    if (t.failed)
        s->failed = 1;
    cset_free(&t);
}

/* An escape after '\': a single code point (*cp) or a shorthand class added to *set (*cp = -1). */
static int parse_escape(rx_parser *p, int in_class, int32_t *cp, gr_cset *set, int *shorthand)
{
    int c = peek(p);
    if (c < 0)
        return rx_fail(p, "a pattern cannot end with '\\'");
    p->at++;
    *cp = -1;
    static const char single[] = "ntrfva";
    static const uint8_t single_val[] = {'\n', '\t', '\r', '\f', '\v', 7};
    const char *q = strchr(single, c);
    if (q && c) {
        *cp = single_val[q - single];
    } else if (strchr("dDwWsS", c)) {
        add_shorthand(set, c);
        *shorthand = c;
    } else if (c == 'b' && in_class) {
        *cp = 8;
    } else if (c == 'x' || c == 'u' || c == 'U') {
        uint32_t v = 0;
        if (hex_value(p, c == 'x' ? 2 : c == 'u' ? 4 : 8, &v))
            return -1;
        *cp = (int32_t)v;
    } else if (c == '0' && !(peek(p) >= '0' && peek(p) <= '7')) {
        *cp = 0;
    } else if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        char msg[96];
        snprintf(msg, sizeof msg, "the escape \\%c (backreferences, boundaries, anchors, \\p) is not supported", c);
        return rx_fail(p, msg);
    } else {
        p->at--;
        *cp = next_cp(p); /* an escaped punctuation or non-ASCII character stands for itself */
    }
    return p->failed ? -1 : 0;
}

static rx *parse_class(rx_parser *p)
{
    rx *r = rx_new(p, RX_SET);
    if (!r)
        return NULL;
    int negate = peek(p) == '^';
    if (negate)
        p->at++;
    int first = 1, ascii_only = 0;
    for (;;) {
        int c = peek(p);
        if (c < 0) {
            rx_fail(p, "an unterminated [class]");
            break;
        }
        if (c == ']' && !first) {
            p->at++;
            break;
        }
        first = 0;
        int32_t lo;
        int sh = 0;
        if (c == '\\') {
            p->at++;
            if (parse_escape(p, 1, &lo, &r->set, &sh))
                break;
        } else {
            lo = next_cp(p);
        }
        if (sh) {
            ascii_only |= sh < 'a' || negate;
            if (peek(p) == '-' && p->at + 1 < p->len && p->s[p->at + 1] != ']') {
                rx_fail(p, "a class range cannot start or end at a \\d, \\w or \\s");
                break;
            }
            continue;
        }
        if (lo < 0)
            break;
        int32_t hi = lo;
        if (peek(p) == '-' && p->at + 1 < p->len && p->s[p->at + 1] != ']') {
            p->at++;
            if (peek(p) == '\\') {
                p->at++;
                if (parse_escape(p, 1, &hi, &r->set, &sh))
                    break;
                if (sh) {
                    rx_fail(p, "a class range cannot start or end at a \\d, \\w or \\s");
                    break;
                }
            } else {
                hi = next_cp(p);
            }
            if (hi < 0)
                break;
            if (hi < lo) {
                rx_fail(p, "a class range goes backwards");
                break;
            }
        }
        cset_add(&r->set, (uint32_t)lo, (uint32_t)hi);
    }
    if (p->failed) {
        rx_free(r);
        return NULL;
    }
    if (negate)
        cset_invert(&r->set);
    if (ascii_only) {
        gr_cset non_ascii = {0};
        cset_add(&non_ascii, 0x80, 0x10FFFF);
        cset_sub(&r->set, &non_ascii);
        cset_free(&non_ascii);
    }
    cset_norm(&r->set);
    if (r->set.failed)
        p->failed = 1;
    return r;
}

static rx *parse_alt(rx_parser *p);

/* A quantifier's {m}, {m,}, {,n} or {m,n}; 0 if what follows '{' is not one (then '{' is literal,
 * as in Python). */
static int parse_braces(rx_parser *p, int *min, int *max)
{
    size_t at = p->at + 1;
    long m = -1, n = -1;
    const uint8_t *s = p->s;
    while (at < p->len && s[at] >= '0' && s[at] <= '9' && m < 100000)
        m = (m < 0 ? 0 : m * 10) + (s[at++] - '0');
    int comma = at < p->len && s[at] == ',';
    if (comma) {
        at++;
        while (at < p->len && s[at] >= '0' && s[at] <= '9' && n < 100000)
            n = (n < 0 ? 0 : n * 10) + (s[at++] - '0');
    }
    if (at >= p->len || s[at] != '}' || (m < 0 && (!comma || n < 0)))
        return 0;
    *min = m < 0 ? 0 : (int)m;
    *max = comma ? (n < 0 ? -1 : (int)n) : *min;
    p->at = at + 1;
    return 1;
}

static rx *parse_atom(rx_parser *p)
{
    int c = peek(p);
    if (c == '(') {
        p->at++;
        if (peek(p) == '?') {
            if (p->at + 1 < p->len && p->s[p->at + 1] == ':') {
                p->at += 2;
            } else if (p->at + 2 < p->len && p->s[p->at + 1] == 'P' && p->s[p->at + 2] == '<') {
                while (p->at < p->len && p->s[p->at] != '>')
                    p->at++;
                p->at++;
            } else {
                rx_fail(p, "(?...) groups other than (?:...) and (?P<name>...) are not supported");
                return NULL;
            }
        }
        if (++p->nest > RX_MAX_NEST) {
            rx_fail(p, "groups nest too deeply");
            return NULL;
        }
        rx *r = parse_alt(p);
        p->nest--;
        if (r && peek(p) != ')') {
            rx_free(r);
            rx_fail(p, "a '(' is not closed");
            return NULL;
        }
        p->at++;
        return r;
    }
    if (c == '[') {
        p->at++;
        return parse_class(p);
    }
    if (c == '^' || c == '$') {
        p->at++;
        return rx_new(p, c == '^' ? RX_BOL : RX_EOL);
    }
    rx *r = rx_new(p, RX_SET);
    if (!r)
        return NULL;
    if (c == '.') {
        p->at++;
        cset_add(&r->set, 0, '\n' - 1);
        cset_add(&r->set, '\n' + 1, 0x10FFFF);
    } else if (c == '\\') {
        p->at++;
        int32_t cp;
        int sh = 0;
        if (parse_escape(p, 0, &cp, &r->set, &sh) == 0 && cp >= 0)
            cset_add(&r->set, (uint32_t)cp, (uint32_t)cp);
    } else {
        int32_t cp = next_cp(p);
        if (cp >= 0)
            cset_add(&r->set, (uint32_t)cp, (uint32_t)cp);
    }
    cset_norm(&r->set);
    if (p->failed || r->set.failed) {
        rx_free(r);
        p->failed = 1;
        return NULL;
    }
    return r;
}

static int at_quantifier(rx_parser *p)
{
    int c = peek(p), min, max;
    if (c == '*' || c == '+' || c == '?')
        return 1;
    size_t at = p->at;
    int q = c == '{' && parse_braces(p, &min, &max);
    p->at = at;
    return q;
}

static rx *parse_cat(rx_parser *p)
{
    rx *cat = rx_new(p, RX_CAT);
    while (cat && !p->failed) {
        int c = peek(p);
        if (c < 0 || c == '|' || c == ')')
            break;
        if (at_quantifier(p)) {
            rx_fail(p, "a quantifier with nothing to repeat");
            break;
        }
        rx *atom = parse_atom(p);
        if (!atom)
            break;
        int min, max, quantified = 0;
        for (;;) {
            c = peek(p);
            if (c == '*' || c == '+' || c == '?') {
                min = c == '+';
                max = c == '?' ? 1 : -1;
                p->at++;
            } else if (!(c == '{' && parse_braces(p, &min, &max))) {
                break;
            }
            if (quantified) {
                rx_fail(p, "a repeated repetition (Python rejects it)");
                break;
            }
            if (atom->kind == RX_BOL || atom->kind == RX_EOL) {
                rx_fail(p, "an anchor cannot be repeated");
                break;
            }
            if ((max >= 0 && max < min) || min > RX_MAX_REPEAT || max > RX_MAX_REPEAT) {
                rx_fail(p, "a repetition count is above 1000 or backwards");
                break;
            }
            if (peek(p) == '?')
                p->at++; /* lazy: the same language */
            else if (peek(p) == '+') {
                rx_fail(p, "possessive quantifiers are not supported");
                break;
            }
            rx *rep = rx_new(p, RX_REP);
            if (!rep || rx_push(p, rep, atom)) {
                rx_free(rep);
                break;
            }
            rep->min = min;
            rep->max = max;
            atom = rep;
            quantified = 1;
        }
        if (p->failed) {
            rx_free(atom);
            break;
        }
        if (rx_push(p, cat, atom))
            break;
    }
    if (p->failed) {
        rx_free(cat);
        return NULL;
    }
    return cat;
}

static rx *parse_alt(rx_parser *p)
{
    rx *alt = rx_new(p, RX_ALT);
    while (alt && !p->failed) {
        if (rx_push(p, alt, parse_cat(p)))
            break;
        if (peek(p) != '|')
            break;
        p->at++;
    }
    if (p->failed) {
        rx_free(alt);
        return NULL;
    }
    return alt;
}

/* Anchors may only open or close a top-level alternative; anywhere else they are refused. */
static int check_anchors(rx_parser *p, const rx *r, int top)
{
    for (uint32_t i = 0; i < r->n; i++) {
        const rx *s = r->sub[i];
        if (s->kind == RX_BOL || s->kind == RX_EOL) {
            int ok = top && r->kind == RX_CAT &&
                     (s->kind == RX_BOL ? i == 0 : i + 1 == r->n);
            if (!ok) {
                p->at = 0;
                return rx_fail(p, "'^' and '$' are supported only at the start and end of the pattern "
                                  "(or of a top-level alternative)");
            }
        } else if (check_anchors(p, s, top && r->kind == RX_ALT && s->kind == RX_CAT)) {
            return -1;
        }
    }
    return 0;
}

/* ---- emission ---- */

typedef struct {
    gr_nfa *a;
    int mode;
    const gr_cset *excluded;
} rx_out;

static void rx_emit(const rx_out *o, const rx *r, uint32_t from, uint32_t to)
{
    gr_nfa *a = o->a;
    if (a->failed)
        return;
    switch (r->kind) {
    case RX_SET:
        emit_cset(a, from, to, &r->set, o->mode, o->excluded);
        break;
    case RX_BOL:
    case RX_EOL:
        nfa_eps(a, from, to);
        break;
    case RX_CAT: {
        uint32_t at = from;
        for (uint32_t i = 0; i < r->n; i++) {
            uint32_t nx = i + 1 == r->n ? to : nfa_state(a);
            rx_emit(o, r->sub[i], at, nx);
            at = nx;
        }
        if (!r->n)
            nfa_eps(a, from, to);
        break;
    }
    case RX_ALT:
        for (uint32_t i = 0; i < r->n; i++)
            rx_emit(o, r->sub[i], from, to);
        break;
    case RX_REP: {
        uint32_t at = from;
        for (int i = 0; i < r->min; i++) {
            uint32_t nx = nfa_state(a);
            rx_emit(o, r->sub[0], at, nx);
            at = nx;
        }
        if (r->max < 0) {
            uint32_t loop = nfa_state(a);
            nfa_eps(a, at, loop);
            rx_emit(o, r->sub[0], loop, loop);
            nfa_eps(a, loop, to);
        } else {
            for (int i = r->min; i < r->max && !a->failed; i++) {
                nfa_eps(a, at, to);
                uint32_t nx = nfa_state(a);
                rx_emit(o, r->sub[0], at, nx);
                at = nx;
            }
            nfa_eps(a, at, to);
        }
        break;
    }
    }
}

static void emit_anything(const rx_out *o, uint32_t from, uint32_t to)
{
    gr_cset all = {0};
    cset_add(&all, 0, 0x10FFFF);
    uint32_t loop = nfa_state(o->a);
    nfa_eps(o->a, from, loop);
    emit_cset(o->a, loop, loop, &all, o->mode, o->excluded);
    nfa_eps(o->a, loop, to);
    cset_free(&all);
}

int regex_emit(gr_nfa *a, const char *re, size_t len, int search, int mode, const gr_cset *excluded,
               uint32_t from, uint32_t to)
{
    rx_parser p = {.s = (const uint8_t *)re, .len = len};
    rx *r = parse_alt(&p);
    if (r && p.at < p.len)
        rx_fail(&p, "an unmatched ')'");
    if (r && !p.failed)
        check_anchors(&p, r, 1);
    if (p.failed || !r) { /* the message is set: a parse error, or the allocation that failed */
        rx_free(r);
        return -1;
    }
    rx_out o = {a, mode, excluded};
    for (uint32_t i = 0; i < r->n; i++) { /* top-level alternatives, each with its anchors */
        const rx *cat = r->sub[i];
        uint32_t s = from, e = to;
        if (search && !(cat->n && cat->sub[0]->kind == RX_BOL)) {
            s = nfa_state(a);
            emit_anything(&o, from, s);
        }
        if (search && !(cat->n && cat->sub[cat->n - 1]->kind == RX_EOL)) {
            e = nfa_state(a);
            emit_anything(&o, e, to);
        }
        rx_emit(&o, cat, s, e);
    }
    rx_free(r);
    return a->failed ? -1 : 0;
}

/* ---- grammars of a regex and of choices ---- */

int grammar_from_regex(const grammar_vocab *v, const char *regex, size_t len, const grammar_options *opt,
                       grammar **out)
{
    *out = NULL;
    gr_build b;
    int rc = build_init(&b, v, opt);
    if (!rc) {
        gr_nfa *a = b.rules[0];
        rc = regex_emit(a, regex, len, 0, GR_TEXT_RAW, NULL, a->start, a->final);
    }
    if (!rc)
        rc = build_finish(&b, out);
    build_free(&b);
    return rc ? dsk_err_ctx("compiling the regex grammar") : 0;
}

int grammar_from_choices(const grammar_vocab *v, const char *const *choices, const size_t *lens, size_t n,
                         grammar **out)
{
    *out = NULL;
    if (!n)
        return dsk_err("grammar_from_choices: no choices");
    gr_build b;
    int rc = build_init(&b, v, NULL);
    if (!rc) {
        gr_nfa *a = b.rules[0];
        for (size_t i = 0; i < n; i++)
            nfa_lit(a, a->start, a->final, choices[i], lens[i]);
        rc = a->failed ? -1 : 0;
    }
    if (!rc)
        rc = build_finish(&b, out);
    build_free(&b);
    return rc ? dsk_err_ctx("compiling the choices grammar") : 0;
}
