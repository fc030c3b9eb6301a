/* image_url values (vision.md §1.1): only `data:` URLs are read. The header is everything before the first
 * ','; it must name ";base64". The payload is standard base64 (RFC 4648 §4) with '=' padding; whitespace is
 * skipped, and every other character outside the alphabet is an error (Python's lenient decoder, which
 * REF uses, would drop it silently, and would corrupt the URL-safe alphabet without a word). The MIME type
 * is not used: the decoder reads the format from the bytes. */
#include "runtime/common/error.h"
#include "runtime/vision/vision.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Value of a base64 character, -1 for whitespace, -2 for anything else. */
static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v')
        return -1;
    return -2;
}

/* Decode s[0..n) into out (room for 3·⌈n/4⌉ bytes); *len gets the byte count. */
static int b64_decode(const char *s, size_t n, uint8_t *out, size_t *len)
{
    uint32_t acc = 0;
    int have = 0, pad = 0;
    size_t o = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '=') {
            pad++;
            at = i;
            continue;
        }
        int v = b64_value(c);
        if (v == -1)
            continue;
        if (v == -2) {
            if (c == '-' || c == '_')
                return dsk_err("the base64 payload has '%c' at offset %zu: the URL-safe alphabet is not accepted "
                               "(data URLs use standard base64, with '+' and '/')",
                               c, i);
            return dsk_err("the base64 payload has a character outside the alphabet (byte 0x%02x) at offset %zu", c,
                           i);
        }
        if (pad)
            return dsk_err("the base64 payload continues after its '=' padding (offset %zu)", at);
        acc = acc << 6 | (uint32_t)v;
        if (++have == 4) {
            out[o++] = (uint8_t)(acc >> 16);
            out[o++] = (uint8_t)(acc >> 8);
            out[o++] = (uint8_t)acc;
            acc = 0;
            have = 0;
        }
    }
    /* a final group of 2 or 3 characters carries 1 or 2 bytes and must be padded to 4 */
    if (have == 1 || (have == 0 && pad) || (have > 0 && have + pad != 4))
        return dsk_err("the base64 payload's length or '=' padding is wrong (%d characters in the last group, %d "
                       "'=')",
                       have, pad);
    /* bits past the last byte are dropped unchecked, as Python does */
    if (have == 2) {
        out[o++] = (uint8_t)(acc >> 4);
    } else if (have == 3) {
        out[o++] = (uint8_t)(acc >> 10);
        out[o++] = (uint8_t)(acc >> 2);
    }
    *len = o;
    return 0;
}

int vision_data_url(const char *url, size_t len, uint8_t **bytes, size_t *n)
{
    *bytes = NULL;
    *n = 0;
    size_t lead = 0;
    while (lead < len && (url[lead] == ' ' || url[lead] == '\t' || url[lead] == '\n' || url[lead] == '\r'))
        lead++;
    url += lead;
    len -= lead;
    if (len >= 7 && !strncasecmp(url, "http://", 7))
        return dsk_err("http URLs are not fetched: the server reads nothing but the request (send the image as a "
                       "data: URL)");
    if (len >= 8 && !strncasecmp(url, "https://", 8))
        return dsk_err("https URLs are not fetched: the server reads nothing but the request (send the image as a "
                       "data: URL)");
    if (len < 5 || strncasecmp(url, "data:", 5))
        return dsk_err("the image URL is not a data: URL (file paths and other schemes are refused; send "
                       "\"data:image/png;base64,...\")");
    const char *comma = memchr(url, ',', len);
    if (!comma)
        return dsk_err("the data: URL has no ',' before its payload");
    size_t hlen = (size_t)(comma - url);
    /* ";base64" as one of the header's parameters, where REF only looks for the substring */
    int b64 = 0;
    for (size_t i = 5; i + 7 <= hlen; i++)
        if (!strncasecmp(url + i, ";base64", 7) && (i + 7 == hlen || url[i + 7] == ';'))
            b64 = 1;
    if (!b64)
        return dsk_err("the data: URL is not base64 (its header '%.*s' lacks \";base64\")",
                       (int)(hlen < 64 ? hlen : 64), url);
    const char *p = comma + 1;
    size_t plen = len - hlen - 1;
    uint8_t *out = dsk_malloc(plen / 4 * 3 + 3);
    if (!out)
        return dsk_err_ctx("decoding a data: URL of %zu bytes", len);
    size_t got = 0;
    if (b64_decode(p, plen, out, &got)) {
        free(out);
        return -1;
    }
    if (!got) {
        free(out);
        return dsk_err("the data: URL's payload is empty");
    }
    *bytes = out;
    *n = got;
    return 0;
}
