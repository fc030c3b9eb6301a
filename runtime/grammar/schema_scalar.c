/* JSON Schema strings (length, pattern, format, and their intersections), enum/const literals, and
 * object keys. Numbers are in schema_number.c. */
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
