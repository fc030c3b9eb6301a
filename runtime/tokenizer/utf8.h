/* UTF-8 well-formedness as Unicode defines it (Table 3-7: no overlongs, no surrogates, nothing above
 * U+10FFFF), with the "maximal subpart" rule for where an ill-formed sequence ends. */
#ifndef DSK_UTF8_H
#define DSK_UTF8_H

#include <stddef.h>
#include <stdint.h>

enum { UTF8_OK, UTF8_BAD, UTF8_SHORT };

/* Classify the bytes at s[0..n), n >= 1. UTF8_OK: a character of *len bytes. UTF8_BAD: an
 * ill-formed sequence whose maximal subpart is *len bytes (1 to 3). UTF8_SHORT: all n bytes are a
 * valid start of a character that needs more bytes (*len = n). */
static inline int utf8_next(const uint8_t *s, size_t n, size_t *len)
{
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* the range allowed for the second byte */
    if (c < 0x80) {
        *len = 1;
        return UTF8_OK;
    }
    if (c < 0xC2 || c > 0xF4) {
        *len = 1;
        return UTF8_BAD;
    }
    if (c < 0xE0) {
        need = 2;
    } else if (c < 0xF0) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return UTF8_SHORT;
        }
        uint8_t b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) {
            *len = i;
            return UTF8_BAD;
        }
    }
    *len = need;
    return UTF8_OK;
}

/* The code point of a well-formed sequence of len bytes. */
static inline uint32_t utf8_decode(const uint8_t *s, size_t len)
{
    switch (len) {
    case 1:
        return s[0];
    case 2:
        return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
    case 3:
        return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
    default:
        return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
               (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
    }
}

/* Write code point c as UTF-8 into o (room for 4); returns the byte count. */
static inline int utf8_encode(uint32_t c, uint8_t *o)
{
    if (c < 0x80) {
        o[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        o[0] = (uint8_t)(0xC0 | c >> 6);
        o[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | c >> 12);
        o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        o[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | c >> 18);
    o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    o[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* Whether s[0..n) is entirely well-formed UTF-8. */
static inline int utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0, l;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (utf8_next(s + i, n - i, &l) != UTF8_OK)
            return 0;
        i += l;
    }
    return 1;
}

#endif
