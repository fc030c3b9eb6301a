/* Split patterns from a tokenizer.json, made to behave in PCRE2 exactly as in the reference.
 *
 * Hugging Face compiles Split patterns with Oniguruma (Ruby syntax). PCRE2 agrees on the syntax the
 * tokenizers use, with two differences we must absorb:
 *  - Unicode tables: PCRE2 may know an older Unicode version than the reference, so code points
 *    assigned since are "unassigned" to it. Each \p{X} is widened with the code points the reference
 *    puts in X and PCRE2 does not (found by asking PCRE2 itself, so this holds for any version).
 *    \s becomes the reference's explicit list (PCRE2 also counts U+180E).
 *  - A few escapes mean different things (\v, \h, \u); the unsafe ones are rejected by name.
 * unicode_tables.c holds the reference classes; tests/tokenizer checks every code point. */
#include "runtime/common/error.h"
#include "runtime/tokenizer/tok_internal.h"
#include "runtime/tokenizer/unicode_tables.h"
#include "runtime/tokenizer/utf8.h"

#include <stdio.h>
#include <string.h>

/* Append code point ranges as PCRE2 class items ("\x{9}-\x{D}..."). */
static int class_items(dsk_buf *out, const uint32_t (*r)[2], size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (r[i][0] == r[i][1] ? dsk_buf_printf(out, "\\x{%X}", r[i][0])
                               : dsk_buf_printf(out, "\\x{%X}-\\x{%X}", r[i][0], r[i][1]))
            return -1;
    }
    return 0;
}

/* The code points of class cls that PCRE2's own \p{X} misses, as class items. */
static int class_additions(int cls, dsk_buf *out)
{
    const uni_class *c = &uni_classes[cls];
    dsk_buf all = {0};
    int rc = -1;
    for (size_t i = 0; i < c->n; i++)
        for (uint32_t cp = c->ranges[i][0]; cp <= c->ranges[i][1]; cp++) {
            uint8_t u[4];
            if (dsk_buf_append(&all, u, (size_t)utf8_encode(cp, u)))
                goto done;
        }
    char neg[16];
    snprintf(neg, sizeof neg, "\\P{%c}", c->pattern[3]);
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)neg, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &err, &eoff, NULL);
    if (!re) {
        dsk_err("PCRE2 cannot compile %s", neg);
        goto done;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) {
        pcre2_code_free(re);
        dsk_err("out of memory");
        goto done;
    }
    uint32_t lo = 0, hi = 0;
    int have = 0;
    PCRE2_SIZE at = 0;
    rc = 0;
    while (at < all.len) {
        int m = pcre2_match(re, (PCRE2_SPTR)all.data, all.len, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        uint32_t cp = utf8_decode((const uint8_t *)all.data + ov[0], ov[1] - ov[0]);
        if (have && cp == hi + 1) {
            hi = cp;
        } else {
            if (have && (rc = class_items(out, &(const uint32_t[2]){lo, hi}, 1)))
                break;
            lo = hi = cp;
            have = 1;
        }
        at = ov[1];
    }
    if (!rc && have)
        rc = class_items(out, &(const uint32_t[2]){lo, hi}, 1);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
done:
    dsk_buf_free(&all);
    return rc;
}

typedef struct {
    dsk_buf items[UNI_NCLASSES]; /* per class: what goes inside [...] to match it exactly */
    uint8_t ready[UNI_NCLASSES];
} class_cache;

/* The class items that match class cls exactly: "\p{X}" plus PCRE2's gaps, or \s's list. */
static const char *exact_items(class_cache *cc, int cls)
{
    if (!cc->ready[cls]) {
        dsk_buf *b = &cc->items[cls];
        const uni_class *c = &uni_classes[cls];
        if (cls == UNI_SPACE ? class_items(b, c->ranges, c->n)
                             : (dsk_buf_printf(b, "%s", c->pattern) || class_additions(cls, b)))
            return NULL;
        if (dsk_buf_append(b, "", 1)) /* NUL-terminate */
            return NULL;
        cc->ready[cls] = 1;
    }
    return cc->items[cls].data;
}

/* Map the name in \p{NAME} to a class we have tables for; -1 if none. */
static int property_class(const char *name, size_t n)
{
    static const char *const names[] = {"N", "L", "P", "S", "M"};
    for (int i = 0; i < 5; i++)
        if (n == 1 && name[0] == names[i][0])
            return i;
    return -1;
}

/* Translate one escape at p (p[0] == '\\') into out; *used gets its length. */
static int translate_escape(class_cache *cc, const char *p, const char *end, int in_class,
                            dsk_buf *out, size_t *used)
{
    if (p + 1 >= end)
        return dsk_err("the pattern ends with a lone backslash");
    char e = p[1];
    *used = 2;
    if (e == 'p' || e == 'P') {
        int negate = e == 'P';
        const char *name = p + 2;
        size_t n = 1;
        if (name < end && *name == '{') {
            const char *close = memchr(name, '}', (size_t)(end - name));
            if (!close)
                return dsk_err("unterminated \\%c{ in the pattern", e);
            name++;
            n = (size_t)(close - name);
            *used = (size_t)(close + 1 - p);
            if (n && name[0] == '^') {
                negate = !negate;
                name++;
                n--;
            }
        } else {
            *used = 3;
        }
        int cls = name < end ? property_class(name, n) : -1;
        if (cls < 0)
            return dsk_err("Unicode property \\%c{%.*s} is not supported (supported: N, L, P, S, M)",
                           e, (int)n, name);
        const char *items = exact_items(cc, cls);
        if (!items)
            return -1;
        if (in_class && negate)
            return dsk_err("a negated property \\P{%.*s} inside [...] is not supported", (int)n,
                           name);
        if (in_class)
            return dsk_buf_printf(out, "%s", items);
        return dsk_buf_printf(out, negate ? "[^%s]" : "[%s]", items);
    }
    if (e == 's' || e == 'S') {
        const char *items = exact_items(cc, UNI_SPACE);
        if (!items)
            return -1;
        if (in_class && e == 'S')
            return dsk_err("\\S inside [...] is not supported");
        if (in_class)
            return dsk_buf_printf(out, "%s", items);
        return dsk_buf_printf(out, e == 'S' ? "[^%s]" : "[%s]", items);
    }
    if (e == 'u') { /* Oniguruma's \uHHHH */
        if (end - p < 6)
            return dsk_err("\\u needs four hex digits");
        *used = 6;
        return dsk_buf_printf(out, "\\x{%.4s}", p + 2);
    }
    if (e == 'v') /* vertical tab in Oniguruma, a class in PCRE2 */
        return dsk_buf_printf(out, "\\x{B}");
    if (strchr("tnrfeax0123456789AzZG", e))
        return dsk_buf_append(out, p, 2);
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z'))
        return dsk_err("regex escape \\%c is not supported (its meaning differs between the "
                       "reference's Oniguruma and PCRE2, or needs Unicode tables we do not have)",
                       e);
    /* an escaped punctuation character or other literal: copy the whole UTF-8 character */
    size_t l = 1;
    if ((uint8_t)e >= 0x80 && utf8_next((const uint8_t *)p + 1, (size_t)(end - p - 1), &l) != UTF8_OK)
        return dsk_err("the pattern is not valid UTF-8");
    *used = 1 + l;
    return dsk_buf_append(out, p, 1 + l);
}

/* Oniguruma (Ruby syntax) pattern -> PCRE2 pattern with exact Unicode classes. */
static int translate(class_cache *cc, const char *p, size_t len, dsk_buf *out)
{
    const char *end = p + len;
    int in_class = 0;
    while (p < end) {
        char c = *p;
        size_t used = 1;
        if (c == '\\') {
            if (translate_escape(cc, p, end, in_class, out, &used))
                return -1;
        } else if (in_class) {
            if (c == '[')
                return dsk_err("a nested character class or POSIX class inside [...] is not "
                               "supported");
            if (c == '&' && p + 1 < end && p[1] == '&')
                return dsk_err("character class intersection && is not supported");
            if (c == ']')
                in_class = 0;
            if (dsk_buf_append(out, p, 1))
                return -1;
        } else if (c == '[') {
            in_class = 1;
            if (dsk_buf_append(out, p, 1))
                return -1;
            if (p + 1 < end && p[1] == '^') {
                if (dsk_buf_append(out, "^", 1))
                    return -1;
                used = 2;
            }
            if (p + used < end && p[used] == ']')
                return dsk_err("a ']' first in a character class is not supported; escape it");
        } else if (c == '(' && p + 1 < end && p[1] == '*') {
            /* PCRE2's verbs and start-of-pattern options ((*LIMIT_MATCH=1), (*UTF), (*SKIP), ...):
             * Oniguruma has none ("(*" is a syntax error there) */
            const char *close = memchr(p, ')', (size_t)(end - p));
            int shown = close && close - p < 40 ? (int)(close + 1 - p) : 12;
            return dsk_err("PCRE2 verb '%.*s' is not supported (it is not Oniguruma syntax)", shown, p);
        } else if (c == '(' && p + 1 < end && p[1] == '?') {
            static const char *const groups[] = {"(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>"};
            size_t k = 0;
            for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
                if ((size_t)(end - p) >= strlen(groups[i]) && !memcmp(p, groups[i], strlen(groups[i])))
                    k = strlen(groups[i]);
            if (!k)
                return dsk_err("group syntax '%.4s' is not supported (options and named groups "
                               "differ between Oniguruma and PCRE2)", p);
            if (dsk_buf_append(out, p, k))
                return -1;
            used = k;
        } else if (c == '{' && p + 1 < end && p[1] == ',') { /* Oniguruma {,n} = {0,n} */
            if (dsk_buf_printf(out, "{0"))
                return -1;
        } else if (dsk_buf_append(out, p, 1)) {
            return -1;
        }
        p += used;
    }
    if (in_class)
        return dsk_err("unterminated character class");
    return dsk_buf_append(out, "", 1);
}

/* A literal string as a PCRE2 pattern: every ASCII punctuation character escaped. */
static int quote_literal(const char *p, size_t len, dsk_buf *out)
{
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        int punct = (uint8_t)c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                                           (c >= 'A' && c <= 'Z') || (uint8_t)c < 0x20);
        if (punct ? dsk_buf_printf(out, "\\%c", c)
                  : (uint8_t)c < 0x20 ? dsk_buf_printf(out, "\\x{%X}", c) : dsk_buf_append(out, &c, 1))
            return -1;
    }
    return dsk_buf_append(out, "", 1);
}

int pretok_compile(const char *pattern, size_t len, int literal, pcre2_code **out)
{
    class_cache cc = {0};
    dsk_buf pat = {0};
    int rc = -1;
    if (!utf8_valid((const uint8_t *)pattern, len)) {
        dsk_err("the pattern is not valid UTF-8");
        goto done;
    }
    if (literal ? quote_literal(pattern, len, &pat) : translate(&cc, pattern, len, &pat))
        goto done;
    pcre2_compile_context *ctx = pcre2_compile_context_create(NULL);
    if (!ctx) {
        dsk_err("out of memory");
        goto done;
    }
    /* Ruby syntax: ^ and $ are line anchors, and '.' and $ know only \n as a newline */
    pcre2_set_newline(ctx, PCRE2_NEWLINE_LF);
    int err;
    PCRE2_SIZE eoff;
    /* by length: a NUL inside the pattern is a character of it, not its end; \C (one code unit) can
     * split a UTF-8 character, so it is refused at compile time too */
    *out = pcre2_compile((PCRE2_SPTR)pat.data, pat.len - 1,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NEVER_BACKSLASH_C, &err, &eoff, ctx);
    pcre2_compile_context_free(ctx);
    if (!*out) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        dsk_err("PCRE2 cannot compile the pattern: %s", (const char *)msg);
        goto done;
    }
    int jrc = pcre2_jit_compile(*out, PCRE2_JIT_COMPLETE);
    if (jrc && jrc != PCRE2_ERROR_JIT_BADOPTION) { /* no JIT on this CPU: the interpreter is fine */
        pcre2_code_free(*out);
        *out = NULL;
        dsk_err("PCRE2 JIT compilation failed (%d)", jrc);
        goto done;
    }
    rc = 0;
done:
    for (int i = 0; i < UNI_NCLASSES; i++)
        dsk_buf_free(&cc.items[i]);
    dsk_buf_free(&pat);
    return rc;
}
