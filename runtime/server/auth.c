#include "runtime/server/auth.h"
#include "runtime/common/error.h"
#include "runtime/server/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define KEY_FILE_MAX (1 << 20)

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One line (trimmed, not empty, not a comment) into a digest. */
static int parse_line(const char *s, size_t n, int lineno, uint8_t out[32])
{
    if (n > 7 && !strncmp(s, "sha256:", 7)) {
        s += 7;
        n -= 7;
        if (n != 64)
            return dsk_err("line %d: sha256: needs 64 hex digits, %zu given", lineno, n);
        for (int i = 0; i < 32; i++) {
            int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
            if (hi < 0 || lo < 0)
                return dsk_err("line %d: sha256: '%.64s' is not hex", lineno, s);
            out[i] = (uint8_t)(hi << 4 | lo);
        }
        return 0;
    }
    sha256(s, n, out);
    return 0;
}

int srv_keys_load(const char *path, srv_keys *out)
{
    *out = (srv_keys){0};
    /* O_NOFOLLOW: the checks below must be about the file itself, not a link that may change */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return dsk_err_errno("--api-key-file %s", path);
    struct stat st;
    char *data = NULL;
    int rc = -1;
    if (fstat(fd, &st)) {
        dsk_err_errno("--api-key-file %s", path);
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        dsk_err("--api-key-file %s: not a regular file", path);
        goto done;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        dsk_err("--api-key-file %s: readable or writable by group or others (mode %03o); chmod 600 it", path,
                (unsigned)(st.st_mode & 0777));
        goto done;
    }
    if (st.st_size > KEY_FILE_MAX) {
        dsk_err("--api-key-file %s: %lld bytes, at most %d", path, (long long)st.st_size, KEY_FILE_MAX);
        goto done;
    }
    size_t len = (size_t)st.st_size, got = 0;
    if (!(data = dsk_malloc(len + 1)))
        goto done;
    while (got < len) {
        ssize_t r = read(fd, data + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            dsk_err_errno("--api-key-file %s: reading", path);
            goto done;
        }
        got += (size_t)r;
    }
    data[len] = 0;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += data[i] == '\n';
    if (!(out->digests = dsk_calloc(lines, sizeof *out->digests)))
        goto done;
    int lineno = 0;
    for (char *s = data; s < data + len; ) {
        char *e = memchr(s, '\n', (size_t)(data + len - s));
        if (!e)
            e = data + len;
        lineno++;
        char *a = s, *b = e;
        while (a < b && (*a == ' ' || *a == '\t' || *a == '\r'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r'))
            b--;
        s = e + 1;
        if (a == b || *a == '#')
            continue;
        if (parse_line(a, (size_t)(b - a), lineno, out->digests[out->n])) {
            dsk_err_ctx("--api-key-file %s", path);
            goto done;
        }
        out->n++;
    }
    if (!out->n) {
        dsk_err("--api-key-file %s: no key in it", path);
        goto done;
    }
    rc = 0;
done:
    if (data) {
        memset(data, 0, len); /* the raw keys do not outlive the load */
        free(data);
    }
    close(fd);
    if (rc)
        srv_keys_free(out);
    return rc;
}

void srv_keys_free(srv_keys *k)
{
    free(k->digests);
    *k = (srv_keys){0};
}

int srv_keys_check(const srv_keys *k, const char *authorization)
{
    if (!k->n)
        return 1;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7))
        return 0;
    const char *key = authorization + 7;
    while (*key == ' ')
        key++;
    size_t n = strlen(key);
    while (n && (key[n - 1] == ' ' || key[n - 1] == '\t'))
        n--;
    uint8_t d[32];
    sha256(key, n, d);
    /* every digest is compared, so the time says nothing about which key (or none) matched */
    int ok = 0;
    for (size_t i = 0; i < k->n; i++)
        ok |= sha256_equal_ct(d, k->digests[i], 32);
    return ok;
}
