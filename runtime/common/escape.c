#include "runtime/common/escape.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Length of the well-formed UTF-8 sequence at s (shortest form, no surrogates, at most U+10FFFF), with
 * its code point, or 0 when the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, v = c & 0x1Fu, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, v = c & 0x0Fu, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, v = c & 0x07u, min = 0x10000;
    else
        return 0;
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

static int unsafe_cp(uint32_t cp)
{
    return (cp >= 0x80 && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2066 && cp <= 0x2069);
}

/* What one step of the escaper emits for the bytes at s: either the bytes themselves (*keep = its
 * length) or an escape written to esc. Returns the input bytes consumed. */
static size_t step(const unsigned char *s, size_t len, int flags, size_t *keep, char esc[16])
{
    unsigned char c = s[0];
    *keep = 0;
    if ((c >= 0x20 && c < 0x7F) || (c == '\n' && (flags & DSK_ESC_KEEP_NEWLINES))) {
        *keep = 1;
        return 1;
    }
    if (c < 0x80) {
        if (c == '\n' || c == '\r' || c == '\t')
            snprintf(esc, 16, "\\%c", c == '\n' ? 'n' : c == '\r' ? 'r' : 't');
        else
            snprintf(esc, 16, "\\x%02X", c);
        return 1;
    }
    uint32_t cp;
    size_t n = utf8_seq(s, len, &cp);
    if (!n) {
        snprintf(esc, 16, "\\x%02X", c);
        return 1;
    }
    if (unsafe_cp(cp))
        snprintf(esc, 16, "\\u{%04X}", (unsigned)cp);
    else
        *keep = n;
    return n;
}

/* dsk_escape, also telling how many input bytes it consumed (fewer than len when out was full). */
static size_t escape_into(const char *s, size_t len, int flags, char *out, size_t cap, size_t *consumed)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0, i = 0;
    while (i < len) {
        size_t keep;
        char esc[16];
        size_t used = step(u + i, len - i, flags, &keep, esc);
        const char *src = keep ? s + i : esc;
        size_t n = keep ? keep : strlen(esc);
        if (o + n >= cap)
            break;
        memcpy(out + o, src, n);
        o += n;
        i += used;
    }
    out[o] = 0;
    *consumed = i;
    return o;
}

size_t dsk_escape(const char *s, size_t len, int flags, char *out, size_t cap)
{
    size_t consumed;
    return cap ? escape_into(s, len, flags, out, cap, &consumed) : 0;
}

int dsk_is_printable(const char *s, size_t len, int flags)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t keep;
        char esc[16];
        size_t used = step(u + i, len - i, flags, &keep, esc);
        if (!keep)
            return 0;
        i += used;
    }
    return 1;
}

const char *dsk_esc(const char *s)
{
    static _Thread_local char buf[8][1024];
    static _Thread_local unsigned turn;
    char *b = buf[turn++ % 8];
    size_t len = strlen(s), consumed;
    size_t n = escape_into(s, len, 0, b, sizeof buf[0], &consumed);
    if (consumed < len) { /* cut short: say so, without cutting a UTF-8 sequence */
        size_t at = n < sizeof buf[0] - 4 ? n : sizeof buf[0] - 4;
        while (at && ((unsigned char)b[at] & 0xC0) == 0x80)
            at--;
        memcpy(b + at, "...", 4);
    }
    return b;
}
