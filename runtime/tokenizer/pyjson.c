/* Python's json.dumps(value, ensure_ascii=False), for jansson values. */
#include "runtime/tokenizer/pyjson.h"
#include "runtime/common/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A string with Python's escapes: \" \\ \n \r \t \b \f, other controls as \u00xx, the rest as is. */
static int dump_string(dsk_buf *out, const char *s, size_t n)
{
    if (dsk_buf_append(out, "\"", 1))
        return -1;
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char buf[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(buf, sizeof buf, "\\u%04x", c);
                esc = buf;
            }
        }
        if (!esc)
            continue;
        if (dsk_buf_append(out, s + start, i - start) || dsk_buf_append(out, esc, strlen(esc)))
            return -1;
        start = i + 1;
    }
    return dsk_buf_append(out, s + start, n - start) || dsk_buf_append(out, "\"", 1) ? -1 : 0;
}

/* Python's repr of a finite double: the shortest digits that round-trip, in fixed notation for
 * decimal exponents -4..15 and scientific ("1e+16", "1.5e-05") otherwise, ".0" on integral values. */
static int dump_real(dsk_buf *out, double v)
{
    if (!isfinite(v))
        return dsk_err("a non-finite number cannot be written as JSON");
    char sci[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, v);
        if (strtod(sci, NULL) == v)
            break;
    }
    /* sci is "-d.ddde+XX": split it into sign, digits and decimal exponent */
    const char *p = sci;
    int neg = *p == '-';
    if (neg)
        p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    int exp10 = atoi(p + 1);
    char text[64];
    int k = 0;
    if (neg)
        text[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            k += snprintf(text + k, sizeof text - (size_t)k, "0.");
            for (int i = -1; i > exp10; i--)
                text[k++] = '0';
            k += snprintf(text + k, sizeof text - (size_t)k, "%s", digits);
        } else {
            for (int i = 0; i <= exp10; i++)
                text[k++] = i < nd ? digits[i] : '0';
            text[k++] = '.';
            if (nd > exp10 + 1)
                k += snprintf(text + k, sizeof text - (size_t)k, "%s", digits + exp10 + 1);
            else
                text[k++] = '0';
        }
    } else {
        text[k++] = digits[0];
        if (nd > 1)
            k += snprintf(text + k, sizeof text - (size_t)k, ".%s", digits + 1);
        k += snprintf(text + k, sizeof text - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+',
                      exp10 < 0 ? -exp10 : exp10);
    }
    return dsk_buf_append(out, text, (size_t)k);
}

int pyjson_dump(dsk_buf *out, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return dsk_buf_append(out, "null", 4);
    case JSON_TRUE:
        return dsk_buf_append(out, "true", 4);
    case JSON_FALSE:
        return dsk_buf_append(out, "false", 5);
    case JSON_INTEGER:
        return dsk_buf_printf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL:
        return dump_real(out, json_real_value(v));
    case JSON_STRING:
        return dump_string(out, json_string_value(v), json_string_length(v));
    case JSON_ARRAY: {
        if (dsk_buf_append(out, "[", 1))
            return -1;
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e) {
            if ((i && dsk_buf_append(out, ", ", 2)) || pyjson_dump(out, e))
                return -1;
        }
        return dsk_buf_append(out, "]", 1);
    }
    case JSON_OBJECT: {
        if (dsk_buf_append(out, "{", 1))
            return -1;
        int first = 1;
        const char *key;
        size_t key_len;
        const json_t *e;
        json_object_keylen_foreach((json_t *)v, key, key_len, e) {
            if ((!first && dsk_buf_append(out, ", ", 2)) || dump_string(out, key, key_len) ||
                dsk_buf_append(out, ": ", 2) || pyjson_dump(out, e))
                return -1;
            first = 0;
        }
        return dsk_buf_append(out, "}", 1);
    }
    }
    return dsk_err("unknown JSON value type");
}
