/* JSON Schema scalars: strings (length, pattern, format, and their intersections), numbers (bounds
 * as digit automata), enum/const literals, and object keys. */
#include "runtime/common/error.h"
#include "runtime/grammar/schema.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- strings ---- */

#define YEAR "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"
#define DATE                                                                                       \
    YEAR "-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|" \
         "02-(?:0[1-9]|1[0-9]|2[0-8]))"
#define TIME "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
#define OCTET "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#define HEX4 "[0-9a-fA-F]{4}"

/* Formats as regexes of the subset (docs/grammar.md states what each allows). */
static const struct {
    const char *name, *regex;
} formats[] = {
    {"date", DATE},
    {"time", TIME},
    {"date-time", DATE "T" TIME},
    {"uuid", HEX4 HEX4 "-" HEX4 "-" HEX4 "-" HEX4 "-" HEX4 HEX4 HEX4},
    {"email", "[A-Za-z0-9_+-]{1,32}(?:\\.[A-Za-z0-9_+-]{1,32}){0,3}@"
              "(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,30}[A-Za-z0-9])?\\.){1,3}[A-Za-z]{2,12}"},
    {"ipv4", OCTET "\\." OCTET "\\." OCTET "\\." OCTET},
};

static int count_keyword(const gs_at *at, const char *key, long long *out)
{
    const json_t *v = json_object_get(at->node, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return dsk_err("\"%s\" at %s must be a non-negative integer", key, at->path);
    *out = json_integer_value(v);
    return 0;
}

typedef struct {
    int kind; /* 0 length, 1 pattern, 2 format */
    const char *regex;
    size_t len;
    long long min, max; /* length: max < 0 unbounded */
} str_part;

static int emit_part(gs_ctx *s, gr_nfa *a, const str_part *p, int raw, const gr_cset *excluded, uint32_t from,
                     uint32_t to)
{
    if (p->kind) /* patterns match anywhere; a format is the whole string */
        return regex_emit(a, p->regex, p->len, p->kind == 1, raw ? GR_TEXT_RAW : GR_TEXT_JSON, excluded, from,
                          to);
    gr_cset any = {0};
    cset_add(&any, 0, 0x10FFFF);
    uint32_t at = from;
    /* bounded strings spell characters raw or with the short escapes only (no \uXXXX): fewer
     * states per position, and still every character JSON strings need */
#define CHAR(x, y)                                                                                 \
    (raw ? emit_cset(a, x, y, &any, GR_TEXT_RAW, excluded) : emit_json_char(a, x, y, excluded, p->max < 0))
    for (long long i = 0; i < p->min && !a->failed; i++) {
        uint32_t nx = nfa_state(a);
        CHAR(at, nx);
        at = nx;
    }
    if (p->max < 0) {
        uint32_t loop = nfa_state(a);
        nfa_eps(a, at, loop);
        CHAR(loop, loop);
        nfa_eps(a, loop, to);
    } else {
        for (long long i = p->min; i < p->max && !a->failed; i++) {
            nfa_eps(a, at, to);
            uint32_t nx = nfa_state(a);
            CHAR(at, nx);
            at = nx;
        }
        nfa_eps(a, at, to);
    }
#undef CHAR
    cset_free(&any);
    return a->failed ? -1 : 0;
}

/* Several constraints on one string: each its own DFA, intersected. */
static int emit_parts(gs_ctx *s, const str_part *parts, int n, int raw, const gr_cset *excluded, uint32_t from,
                      uint32_t to)
{
    gr_dfa acc = {0}, one = {0}, both = {0};
    uint32_t max = (uint32_t)s->b->opt.max_states;
    int rc = -1;
    for (int i = 0; i < n; i++) {
        gr_nfa tmp;
        if (nfa_init(&tmp, &s->b->budget))
            goto out;
        int bad = emit_part(s, &tmp, &parts[i], raw, excluded, tmp.start, tmp.final) ||
                  dfa_build(&tmp, max, i ? &one : &acc);
        nfa_free(&tmp);
        if (bad)
            goto out;
        if (i) {
            if (dfa_intersect(&acc, &one, 0, max, &both))
                goto out;
            dfa_free(&acc);
            dfa_free(&one);
            acc = both;
            both = (gr_dfa){0};
        }
    }
    dfa_emit(&acc, s->a, from, to);
    rc = s->a->failed ? -1 : 0;
out:
    dfa_free(&acc);
    dfa_free(&one);
    dfa_free(&both);
    return rc;
}

int gs_string(gs_ctx *s, const gs_at *at, uint32_t from, uint32_t to, int raw)
{
    str_part parts[3];
    int n = 0;
    long long mn = 0, mx = -1;
    if (count_keyword(at, "minLength", &mn) || count_keyword(at, "maxLength", &mx))
        return -1;
    if (mn > GS_MAX_STR_LEN)
        return dsk_err("\"minLength\" %lld at %s is above the supported %d", mn, at->path, GS_MAX_STR_LEN);
    if (mx >= 0 && mx < mn)
        return 0; /* no such string */
    if (mx > GS_MAX_STR_LEN)
        mx = GS_MAX_STR_LEN; /* shorter strings still validate */
    if (mn || mx >= 0)
        parts[n++] = (str_part){0, NULL, 0, mn, mx};
    const json_t *pat = json_object_get(at->node, "pattern"), *fmt = json_object_get(at->node, "format");
    if (pat) {
        if (!json_is_string(pat))
            return dsk_err("\"pattern\" at %s must be a string", at->path);
        parts[n++] = (str_part){1, json_string_value(pat), json_string_length(pat), 0, 0};
    }
    if (fmt) {
        size_t k = 0, nf = sizeof formats / sizeof formats[0];
        while (k < nf && !(json_is_string(fmt) && !strcmp(json_string_value(fmt), formats[k].name)))
            k++;
        if (k == nf)
            return dsk_err("\"format\" %s at %s is not supported (supported: date, time, date-time, uuid, email, "
                           "ipv4)", json_is_string(fmt) ? json_string_value(fmt) : "(not a string)", at->path);
        parts[n++] = (str_part){2, formats[k].regex, strlen(formats[k].regex), 0, 0};
    }
    if (!n)
        parts[n++] = (str_part){0, NULL, 0, 0, -1};
    gr_cset excluded = {0}; /* raw DSML values: never NUL either (the parser refuses a block with one) */
    for (uint32_t i = 0; i < s->excluded.n; i++)
        cset_add(&excluded, s->excluded.r[i].lo, s->excluded.r[i].hi);
    if (raw)
        cset_add(&excluded, 0, 0);
    cset_norm(&excluded);
    uint32_t q1 = from, q2 = to;
    if (!raw) {
        q1 = nfa_then(s->a, from, "\"");
        q2 = nfa_state(s->a);
        nfa_str(s->a, q2, to, "\"");
    }
    int rc = n == 1 ? emit_part(s, s->a, &parts[0], raw, &excluded, q1, q2)
                    : emit_parts(s, parts, n, raw, &excluded, q1, q2);
    cset_free(&excluded);
    if (rc && pat)
        dsk_err_ctx("\"pattern\" at %s", at->path);
    return rc;
}

/* ---- literals and keys ---- */

static int put_json_string(gs_ctx *s, dsk_buf *b, const char *str, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    int bad = dsk_buf_append(b, "\"", 1);
    for (size_t i = 0; i < n && !bad;) {
        uint8_t c = (uint8_t)str[i];
        size_t l = 1;
        uint32_t cp = c;
        if (c >= 0x80) { /* jansson strings are valid UTF-8 */
            l = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            cp = c & (0x3F >> (l - 1));
            for (size_t k = 1; k < l; k++)
                cp = cp << 6 | ((uint8_t)str[i + k] & 0x3F);
        }
        static const char short_form[] = {[8] = 'b', [9] = 't', [10] = 'n', [12] = 'f', [13] = 'r'};
        if (cp == '"' || cp == '\\' || (cp < sizeof short_form && short_form[cp])) {
            char e[2] = {'\\', cp < sizeof short_form && short_form[cp] ? short_form[cp] : (char)cp};
            bad = dsk_buf_append(b, e, 2);
        } else if (cp < 0x20 || (cp < 0x10000 && cset_has(&s->excluded, cp))) {
            char e[6] = {'\\', 'u', hex[cp >> 12 & 15], hex[cp >> 8 & 15], hex[cp >> 4 & 15], hex[cp & 15]};
            bad = dsk_buf_append(b, e, 6);
        } else {
            bad = dsk_buf_append(b, str + i, l);
        }
        i += l;
    }
    return bad || dsk_buf_append(b, "\"", 1) ? -1 : 0;
}

/* The shortest decimal that reads back as d, in a form JSON accepts. */
static int put_real(dsk_buf *b, double d)
{
    if (!isfinite(d))
        return dsk_err("a non-finite number cannot be written as JSON");
    char t[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*g", p, d);
        if (strtod(t, NULL) == d)
            break;
    }
    if (!strpbrk(t, ".eEn"))
        strcat(t, ".0");
    return dsk_buf_append(b, t, strlen(t));
}

static int put_json(gs_ctx *s, dsk_buf *b, const json_t *v)
{
    char t[32];
    switch (json_typeof(v)) {
    case JSON_NULL:
        return dsk_buf_append(b, "null", 4);
    case JSON_TRUE:
        return dsk_buf_append(b, "true", 4);
    case JSON_FALSE:
        return dsk_buf_append(b, "false", 5);
    case JSON_INTEGER:
        snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v));
        return dsk_buf_append(b, t, strlen(t));
    case JSON_REAL:
        return put_real(b, json_real_value(v));
    case JSON_STRING:
        return put_json_string(s, b, json_string_value(v), json_string_length(v));
    case JSON_ARRAY: {
        size_t i;
        const json_t *e;
        if (dsk_buf_append(b, "[", 1))
            return -1;
        json_array_foreach(v, i, e) {
            if ((i && dsk_buf_append(b, ",", 1)) || put_json(s, b, e))
                return -1;
        }
        return dsk_buf_append(b, "]", 1);
    }
    default: {
        const char *k;
        const json_t *e;
        int first = 1;
        if (dsk_buf_append(b, "{", 1))
            return -1;
        json_object_foreach((json_t *)v, k, e) {
            if ((!first && dsk_buf_append(b, ",", 1)) || put_json_string(s, b, k, strlen(k)) ||
                dsk_buf_append(b, ":", 1) || put_json(s, b, e))
                return -1;
            first = 0;
        }
        return dsk_buf_append(b, "}", 1);
    }
    }
}

int gs_literal(gs_ctx *s, const json_t *v, uint32_t from, uint32_t to, int raw)
{
    if (raw) {
        const char *str = json_string_value(v);
        size_t n = json_string_length(v);
        if (memchr(str, 0, n) || memmem(str, n, "\xEF\xBD\x9C", 3))
            return 1; /* NUL or U+FF5C cannot be a raw DSML value: this choice is left out */
        nfa_lit(s->a, from, to, str, n);
        return s->a->failed ? -1 : 0;
    }
    dsk_buf b = {0};
    int rc = put_json(s, &b, v);
    if (!rc)
        nfa_lit(s->a, from, to, b.data, b.len);
    dsk_buf_free(&b);
    return rc || s->a->failed ? -1 : 0;
}

int gs_json_key(gs_ctx *s, const char *name, size_t len, uint32_t from, uint32_t to)
{
    dsk_buf b = {0};
    int rc = put_json_string(s, &b, name, len);
    if (!rc)
        nfa_lit(s->a, from, to, b.data, b.len);
    dsk_buf_free(&b);
    return rc || s->a->failed ? -1 : 0;
}

int gs_other_name(gs_ctx *s, const char *const *names, const size_t *lens, uint32_t n, const char *base_regex,
                  uint32_t from, uint32_t to)
{
    gr_nfa *a = s->a;
    if (!n && !base_regex) { /* any key: every JSON string */
        uint32_t loop = nfa_state(a);
        nfa_eps(a, from, loop);
        emit_json_char(a, loop, loop, &s->excluded, 1);
        nfa_eps(a, loop, to);
        return a->failed ? -1 : 0;
    }
    /* the keys' spelling without escapes (base_regex for DSML names), minus the declared names */
    gr_nfa base, names_nfa;
    gr_dfa db = {0}, dn = {0}, dd = {0};
    uint32_t max = (uint32_t)s->b->opt.max_states;
    int rc = -1;
    if (nfa_init(&base, &s->b->budget))
        return -1;
    if (nfa_init(&names_nfa, &s->b->budget)) {
        nfa_free(&base);
        return -1;
    }
    if (base_regex) {
        if (regex_emit(&base, base_regex, strlen(base_regex), 0, GR_TEXT_RAW, &s->excluded, base.start, base.final))
            goto out;
    } else {
        gr_cset chars = {0};
        cset_add(&chars, 0x20, 0x10FFFF);
        gr_cset minus = {0};
        cset_add(&minus, '"', '"');
        cset_add(&minus, '\\', '\\');
        cset_sub(&chars, &minus);
        cset_free(&minus);
        uint32_t loop = nfa_state(&base);
        nfa_eps(&base, base.start, loop);
        emit_cset(&base, loop, loop, &chars, GR_TEXT_RAW, &s->excluded);
        nfa_eps(&base, loop, base.final);
        cset_free(&chars);
    }
    for (uint32_t i = 0; i < n; i++)
        nfa_lit(&names_nfa, names_nfa.start, names_nfa.final, names[i], lens[i]);
    if (base.failed || names_nfa.failed || dfa_build(&base, max, &db) || dfa_build(&names_nfa, max, &dn) ||
        dfa_intersect(&db, &dn, 1, max, &dd))
        goto out;
    dfa_emit(&dd, a, from, to);
    rc = a->failed ? -1 : 0;
out:
    nfa_free(&base);
    nfa_free(&names_nfa);
    dfa_free(&db);
    dfa_free(&dn);
    dfa_free(&dd);
    return rc;
}

/* ---- numbers ---- */

#define MAX_INT_DIGITS 18 /* fits int64, so every JSON parser reads it exactly */
#define MAX_DEC_DIGITS 15 /* bounded numbers: digits in all, so double rounding keeps comparisons */

static void digits_edge(gr_nfa *a, uint32_t from, uint32_t to, int lo, int hi)
{
    nfa_edge(a, from, to, (unsigned)('0' + lo), (unsigned)('0' + hi));
}

static void any_digits(gr_nfa *a, uint32_t from, uint32_t to, int n)
{
    uint32_t at = from;
    for (int i = 0; i < n; i++) {
        uint32_t nx = i + 1 == n ? to : nfa_state(a);
        digits_edge(a, at, nx, 0, 9);
        at = nx;
    }
    if (!n)
        nfa_eps(a, from, to);
}

static int all_of(const char *s, int n, char c)
{
    for (int i = 0; i < n; i++)
        if (s[i] != c)
            return 0;
    return 1;
}

/* Digit strings of n digits between x and y (x <= y, both n digits). */
static void same_len(gr_nfa *a, uint32_t from, uint32_t to, const char *x, const char *y, int n)
{
    if (!n) {
        nfa_eps(a, from, to);
        return;
    }
    int x0 = x[0] - '0', y0 = y[0] - '0';
    if (all_of(x + 1, n - 1, '0') && all_of(y + 1, n - 1, '9')) {
        uint32_t m = nfa_state(a);
        digits_edge(a, from, m, x0, y0);
        any_digits(a, m, to, n - 1);
        return;
    }
    static const char nines[] = "9999999999999999999", zeros[] = "0000000000000000000";
    uint32_t m = nfa_state(a);
    digits_edge(a, from, m, x0, x0);
    if (x0 == y0) {
        same_len(a, m, to, x + 1, y + 1, n - 1);
        return;
    }
    same_len(a, m, to, x + 1, nines, n - 1);
    if (x0 + 1 <= y0 - 1) {
        uint32_t mid = nfa_state(a);
        digits_edge(a, from, mid, x0 + 1, y0 - 1);
        any_digits(a, mid, to, n - 1);
    }
    uint32_t last = nfa_state(a);
    digits_edge(a, from, last, y0, y0);
    same_len(a, last, to, zeros, y + 1, n - 1);
}

/* Callback per digit count d: the integers lo..hi of d digits have been written from `from` to mid. */
typedef void (*after_int)(gs_ctx *s, void *ctx, int d, uint32_t mid, uint32_t to);

/* Non-negative integers lo..hi without leading zeros. */
static void uint_range(gs_ctx *s, uint32_t from, uint32_t to, uint64_t lo, uint64_t hi, after_int then, void *ctx)
{
    gr_nfa *a = s->a;
    uint64_t p = 1;
    for (int d = 1; d <= MAX_INT_DIGITS && lo <= hi; d++, p *= 10) {
        uint64_t first = d == 1 ? 0 : p, last = p * 10 - 1;
        if (hi < first)
            break;
        if (lo > last)
            continue;
        uint64_t x = lo > first ? lo : first, y = hi < last ? hi : last;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%0*llu", d, (unsigned long long)x);
        snprintf(ys, sizeof ys, "%0*llu", d, (unsigned long long)y);
        uint32_t mid = then ? nfa_state(a) : to;
        same_len(a, from, mid, xs, ys, d);
        if (then)
            then(s, ctx, d, mid, to);
    }
}

/* A decimal bound: sign, integer digits and fraction digits (no trailing zeros). */
typedef struct {
    int neg;
    char ip[400], fp[400];
    int excl, set;
} decimal;

static int to_decimal(const json_t *v, int excl, decimal *out)
{
    *out = (decimal){.excl = excl, .set = 1};
    char t[64];
    if (json_is_integer(v)) {
        snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v));
    } else {
        double d = json_real_value(v);
        if (!isfinite(d))
            return -1;
        for (int p = 1; p <= 17; p++) {
            snprintf(t, sizeof t, "%.*e", p - 1, d);
            if (strtod(t, NULL) == d)
                break;
        }
    }
    const char *c = t;
    if (*c == '-') {
        out->neg = 1;
        c++;
    }
    char digits[64];
    int nd = 0, exp = 0, point = -1;
    for (; *c && *c != 'e'; c++) {
        if (*c == '.')
            point = nd;
        else
            digits[nd++] = *c;
    }
    if (point < 0)
        point = nd;
    if (*c == 'e')
        exp = atoi(c + 1);
    point += exp; /* digits[0..point) is the integer part */
    int ni = 0, nf = 0;
    for (int i = 0; i < point && ni < 390; i++)
        out->ip[ni++] = i < nd ? digits[i] : '0';
    for (int i = point; i < nd && nf < 390; i++)
        out->fp[nf++] = i < 0 ? '0' : digits[i];
    int lead = 0; /* leading zeros of the integer part */
    while (lead + 1 < ni && out->ip[lead] == '0')
        lead++;
    memmove(out->ip, out->ip + lead, (size_t)(ni - lead));
    ni -= lead;
    if (!ni)
        out->ip[ni++] = '0';
    out->ip[ni] = 0;
    while (nf && out->fp[nf - 1] == '0')
        nf--;
    out->fp[nf] = 0;
    if (!strcmp(out->ip, "0") && !nf)
        out->neg = 0;
    return 0;
}

/* Compare magnitudes |a| and |b|. */
static int mag_cmp(const decimal *a, const decimal *b)
{
    size_t la = strlen(a->ip), lb = strlen(b->ip);
    if (la != lb)
        return la < lb ? -1 : 1;
    int c = strcmp(a->ip, b->ip);
    if (c)
        return c < 0 ? -1 : 1;
    c = strcmp(a->fp, b->fp); /* no trailing zeros: plain string order is numeric order */
    return c < 0 ? -1 : c > 0;
}

static int dec_cmp(const decimal *a, const decimal *b)
{
    if (a->neg != b->neg)
        return a->neg ? -1 : 1;
    int c = mag_cmp(a, b);
    return a->neg ? -c : c;
}

/* Fraction digit strings f (none, or "." then 1..max digits) with lo <= f (lo < f if lo->excl) and
 * f <= hi (f < hi), comparing as decimals; lo/hi may be NULL. */
enum { EQ, GT, LT };

typedef struct {
    const decimal *lo, *hi;
} frac_bounds;

static int frac_ok(const frac_bounds *fb, int k, int clo, int chi)
{
    if (fb->lo) {
        int rest = (size_t)k < strlen(fb->lo->fp); /* f is a prefix of lo's digits: f < lo */
        if (clo == LT || (clo == EQ && (rest || fb->lo->excl)))
            return 0;
    }
    if (fb->hi) {
        int rest = (size_t)k < strlen(fb->hi->fp);
        if (chi == GT || (chi == EQ && !rest && fb->hi->excl))
            return 0;
    }
    return 1;
}

static int cmp_digit(const decimal *b, int k, int c, int state)
{
    if (state != EQ)
        return state;
    int bd = (size_t)k < strlen(b->fp) ? b->fp[k] - '0' : 0;
    return c > bd ? GT : c < bd ? LT : EQ;
}

static void fraction(gs_ctx *s, const frac_bounds *fb, int max, uint32_t from, uint32_t to)
{
    gr_nfa *a = s->a;
    if (frac_ok(fb, 0, EQ, EQ))
        nfa_eps(a, from, to);
    if (max <= 0)
        return;
    uint32_t cur[9], nxt[9];
    for (int i = 0; i < 9; i++)
        cur[i] = GR_NONE;
    cur[EQ * 3 + EQ] = nfa_then(a, from, ".");
    for (int k = 0; k < max && !a->failed; k++) {
        for (int i = 0; i < 9; i++)
            nxt[i] = GR_NONE;
        for (int i = 0; i < 9; i++) {
            if (cur[i] == GR_NONE)
                continue;
            for (int c = 0; c <= 9; c++) {
                int lo = fb->lo ? cmp_digit(fb->lo, k, c, i / 3) : GT;
                int hi = fb->hi ? cmp_digit(fb->hi, k, c, i % 3) : LT;
                int j = lo * 3 + hi;
                if ((fb->lo && lo == LT) || (fb->hi && hi == GT))
                    continue; /* already out of bounds: no longer digits can fix it */
                if (nxt[j] == GR_NONE) {
                    nxt[j] = nfa_state(a);
                    if (frac_ok(fb, k + 1, lo, hi))
                        nfa_eps(a, nxt[j], to);
                }
                digits_edge(a, cur[i], nxt[j], c, c);
            }
        }
        memcpy(cur, nxt, sizeof cur);
    }
}

typedef struct {
    frac_bounds fb;
} frac_ctx;

static void any_fraction(gs_ctx *s, void *ctx, int d, uint32_t mid, uint32_t to)
{
    frac_bounds none = {NULL, NULL};
    fraction(s, ctx ? &((frac_ctx *)ctx)->fb : &none, MAX_DEC_DIGITS - d, mid, to);
}

static uint64_t ip_value(const decimal *d, int *big)
{
    *big = strlen(d->ip) > MAX_DEC_DIGITS;
    return *big ? 0 : strtoull(d->ip, NULL, 10);
}

/* Magnitudes m >= 0 (as I[.F]) with lo <= m <= hi (each optional, inclusive or not). */
static void magnitude(gs_ctx *s, const decimal *lo, const decimal *hi, uint32_t from, uint32_t to)
{
    const uint64_t top = 999999999999999ull; /* MAX_DEC_DIGITS nines */
    int lo_big = 0, hi_big = 0;
    uint64_t li = lo ? ip_value(lo, &lo_big) : 0, hi_i = hi ? ip_value(hi, &hi_big) : top;
    if (lo_big)
        return; /* above every number written here */
    if (hi_big)
        hi = NULL, hi_i = top;
    if (lo && hi && mag_cmp(lo, hi) > 0)
        return;
    if (!hi) { /* I > li with any fraction, and I == li above lo */
        if (li < top)
            uint_range(s, from, to, li + 1, top, any_fraction, NULL);
    } else if (li + 1 <= hi_i - 1 && hi_i > 0) {
        uint_range(s, from, to, li + 1, hi_i - 1, any_fraction, NULL);
    }
    frac_ctx c_lo = {{lo, hi && li == hi_i ? hi : NULL}}, c_hi = {{NULL, hi}};
    uint_range(s, from, to, li, li, any_fraction, &c_lo); /* I == li: fraction within lo (and hi) */
    if (hi && hi_i > li)
        uint_range(s, from, to, hi_i, hi_i, any_fraction, &c_hi);
}

static int number_bound(const gs_at *at, const char *key, const json_t **out)
{
    *out = json_object_get(at->node, key);
    if (*out && !json_is_number(*out))
        return dsk_err("\"%s\" at %s must be a number", key, at->path);
    return 0;
}

/* The tighter of an inclusive and an exclusive bound (lower: the larger). */
static void pick_bound(const json_t *incl, const json_t *excl, int lower, decimal *out)
{
    decimal a, b;
    out->set = 0;
    if (incl && !to_decimal(incl, 0, &a))
        *out = a;
    if (excl && !to_decimal(excl, 1, &b)) {
        int c = out->set ? dec_cmp(&b, out) : 0;
        if (!out->set || (lower ? c >= 0 : c <= 0))
            *out = b;
    }
}

static void int_bounds(const json_t *incl, const json_t *excl, int lower, long long *out)
{
    const double lim = 999999999999999999.0;
    double best = lower ? -lim : lim;
    if (incl) {
        double v = json_number_value(incl);
        best = lower ? fmax(best, ceil(v)) : fmin(best, floor(v));
    }
    if (excl) {
        double v = json_number_value(excl);
        best = lower ? fmax(best, floor(v) + 1) : fmin(best, ceil(v) - 1);
    }
    best = fmax(-lim, fmin(lim, best));
    *out = (long long)best;
    /* exact for integer bounds given as JSON integers (doubles lose digits above 2^53) */
    if (incl && json_is_integer(incl) && !excl)
        *out = json_integer_value(incl) < -(long long)lim ? -(long long)lim
             : json_integer_value(incl) > (long long)lim ? (long long)lim
                                                           : json_integer_value(incl);
}

int gs_number(gs_ctx *s, const gs_at *at, int integer, uint32_t from, uint32_t to)
{
    gr_nfa *a = s->a;
    const json_t *mn, *mx, *xmn, *xmx;
    if (number_bound(at, "minimum", &mn) || number_bound(at, "maximum", &mx) ||
        number_bound(at, "exclusiveMinimum", &xmn) || number_bound(at, "exclusiveMaximum", &xmx))
        return -1;
    uint32_t neg = nfa_state(a);
    if (!mn && !mx && !xmn && !xmx) { /* -?(0|[1-9][0-9]{0,17}) (. digits)? (e digits)? */
        uint32_t ip = nfa_state(a), one = nfa_state(a);
        nfa_eps(a, from, neg);
        nfa_str(a, from, neg, "-");
        nfa_str(a, neg, ip, "0");
        digits_edge(a, neg, one, 1, 9);
        uint32_t at_d = one;
        nfa_eps(a, one, ip);
        for (int i = 1; i < MAX_INT_DIGITS; i++) {
            uint32_t nx = nfa_state(a);
            digits_edge(a, at_d, nx, 0, 9);
            nfa_eps(a, nx, ip);
            at_d = nx;
        }
        if (integer) {
            nfa_eps(a, ip, to);
            return a->failed ? -1 : 0;
        }
        uint32_t fr = nfa_state(a), ex = nfa_state(a), es = nfa_state(a), ed = nfa_state(a);
        nfa_eps(a, ip, fr);
        uint32_t dot = nfa_then(a, ip, "."), at_f = dot;
        for (int i = 0; i < 16; i++) {
            uint32_t nx = nfa_state(a);
            digits_edge(a, at_f, nx, 0, 9);
            nfa_eps(a, nx, fr);
            at_f = nx;
        }
        nfa_eps(a, fr, to);
        nfa_str(a, fr, ex, "e");
        nfa_str(a, fr, ex, "E");
        nfa_eps(a, ex, es);
        nfa_str(a, ex, es, "+");
        nfa_str(a, ex, es, "-");
        digits_edge(a, es, ed, 0, 9);
        nfa_eps(a, ed, to);
        uint32_t ed2 = nfa_state(a);
        digits_edge(a, ed, ed2, 0, 9);
        nfa_eps(a, ed2, to);
        return a->failed ? -1 : 0;
    }
    if (integer) {
        long long lo, hi;
        int_bounds(mn, xmn, 1, &lo);
        int_bounds(mx, xmx, 0, &hi);
        if (lo > hi)
            return 0; /* no such integer */
        if (hi >= 0)
            uint_range(s, from, to, (uint64_t)(lo > 0 ? lo : 0), (uint64_t)hi, NULL, NULL);
        if (lo < 0) {
            nfa_str(a, from, neg, "-");
            uint_range(s, neg, to, (uint64_t)(hi < -1 ? -hi : 1), (uint64_t)-lo, NULL, NULL);
        }
        return a->failed ? -1 : 0;
    }
    decimal lo, hi; /* x >= lo, x <= hi (or strict) */
    pick_bound(mn, xmn, 1, &lo);
    pick_bound(mx, xmx, 0, &hi);
    if (lo.set && hi.set && dec_cmp(&lo, &hi) > 0)
        return 0;
    /* x >= 0: magnitude bounds are lo (when positive) and hi (when not negative) */
    int pos_lo = lo.set && !lo.neg, pos_hi = hi.set;
    if (!(hi.set && hi.neg))
        magnitude(s, pos_lo ? &lo : NULL, pos_hi ? &hi : NULL, from, to);
    /* x = -m: x >= lo means m <= -lo (lo negative); x <= hi means m >= -hi (hi negative) */
    if (!(lo.set && !lo.neg && (strcmp(lo.ip, "0") || lo.fp[0] || lo.excl))) {
        decimal m_hi = lo, m_lo = hi;
        m_hi.neg = m_lo.neg = 0;
        int hi_zero = hi.set && !strcmp(hi.ip, "0") && !hi.fp[0];
        nfa_str(a, from, neg, "-");
        magnitude(s, hi.set && (hi.neg || hi_zero) ? &m_lo : NULL, lo.set ? &m_hi : NULL, neg, to);
    }
    return a->failed ? -1 : 0;
}
