#include "runtime/common/error.h"
#include "runtime/common/escape.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ERR_CAP = 4096 };
static _Thread_local char err_buf[ERR_CAP];

/* Messages often carry names from files others wrote: escaped here, so no terminal control character
 * or invalid UTF-8 reaches stderr or a JSON field (escape.h); lines stay lines. */
static void vset(const char *fmt, va_list ap)
{
    char raw[ERR_CAP];
    int n = vsnprintf(raw, sizeof raw, fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof raw ? (size_t)n : sizeof raw - 1;
    dsk_escape(raw, len, DSK_ESC_KEEP_NEWLINES, err_buf, sizeof err_buf);
}

int dsk_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(fmt, ap);
    va_end(ap);
    return -1;
}

int dsk_err_errno(const char *fmt, ...)
{
    int e = errno;
    va_list ap;
    va_start(ap, fmt);
    vset(fmt, ap);
    va_end(ap);
    size_t n = strlen(err_buf);
    snprintf(err_buf + n, sizeof err_buf - n, ": %s", strerror(e));
    return -1;
}

int dsk_err_ctx(const char *fmt, ...)
{
    char raw[1024], ctx[1024], old[ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    dsk_escape(raw, len < 0 ? 0 : (size_t)len < sizeof raw ? (size_t)len : sizeof raw - 1, DSK_ESC_KEEP_NEWLINES,
               ctx, sizeof ctx);
    memcpy(old, err_buf, sizeof old);
    /* "ctx: old", truncated to the buffer (the outermost context matters most) */
    size_t n = strlen(ctx);
    memcpy(err_buf, ctx, n + 1);
    if (old[0] && n + 2 < sizeof err_buf) {
        memcpy(err_buf + n, ": ", 3);
        n += 2;
        size_t m = strlen(old);
        if (m > sizeof err_buf - 1 - n)
            m = sizeof err_buf - 1 - n;
        memcpy(err_buf + n, old, m);
        err_buf[n + m] = 0;
    }
    return -1;
}

const char *dsk_err_msg(void)
{
    return err_buf;
}

void dsk_err_clear(void)
{
    err_buf[0] = 0;
}

void *dsk_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        dsk_err("out of memory allocating %zu bytes", n);
    return p;
}

void *dsk_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        dsk_err("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *dsk_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        dsk_err("out of memory reallocating to %zu bytes", n);
    return q;
}

char *dsk_strdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        dsk_err("out of memory copying a string of %zu bytes", strlen(s));
    return d;
}
