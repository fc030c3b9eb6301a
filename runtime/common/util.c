#include "runtime/common/util.h"
#include "runtime/common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

int dsk_open_regular(const char *path, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return dsk_err_errno("cannot open %s", path);
    if (fstat(fd, st) != 0) {
        dsk_err_errno("cannot stat %s", path);
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return dsk_err("%s is not a regular file", path);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        dsk_err_errno("cannot clear O_NONBLOCK on %s", path);
        close(fd);
        return -1;
    }
    return fd;
}

int dsk_read_file_max(const char *path, size_t max, const char *what, char **data, size_t *len)
{
    struct stat st;
    int fd = dsk_open_regular(path, &st);
    if (fd < 0)
        return -1;
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return dsk_err("%s %s is %lld bytes, more than the %zu a %s may have", what, path, (long long)st.st_size,
                       max, what);
    }
    size_t n = (size_t)st.st_size;
    char *buf = dsk_malloc(n + 1);
    if (!buf) {
        close(fd);
        return dsk_err_ctx("reading %s", path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            free(buf);
            close(fd);
            errno = e;
            return dsk_err_errno("cannot read %s", path);
        }
        got += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

int dsk_read_file(const char *path, char **data, size_t *len)
{
    return dsk_read_file_max(path, SIZE_MAX - 1, "file", data, len);
}

int dsk_write_file_atomic(const char *path, const void *data, size_t len)
{
    size_t pl = strlen(path);
    char *tmp = dsk_malloc(pl + 32);
    if (!tmp)
        return -1;
    snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        dsk_err_errno("cannot create %s", tmp);
        free(tmp);
        return -1;
    }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            dsk_err_errno("cannot write %s", tmp);
            goto fail;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        dsk_err_errno("cannot sync %s", tmp);
        goto fail;
    }
    if (close(fd) != 0) {
        fd = -1;
        dsk_err_errno("cannot close %s", tmp);
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        dsk_err_errno("cannot rename %s to %s", tmp, path);
        goto fail;
    }
    free(tmp);
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    free(tmp);
    return -1;
}

int dsk_mkdirs(const char *path)
{
    char *p = dsk_strdup(path);
    if (!p)
        return -1;
    for (char *s = p + 1;; s++) {
        char c = *s;
        if (c == '/' || c == 0) {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                dsk_err_errno("cannot create folder %s", p);
                free(p);
                return -1;
            }
            *s = c;
            if (!c)
                break;
        }
    }
    free(p);
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return dsk_err("%s exists and is not a folder", path);
    return 0;
}

int dsk_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

double dsk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void dsk_xxh128_hex(const void *data, size_t len, char out[33])
{
    XXH128_hash_t h = XXH3_128bits(data, len);
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
}

uint64_t dsk_xxh64(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

int dsk_buf_append(dsk_buf *b, const void *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = dsk_realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    if (n) /* data may be NULL when n is 0 */
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = 0;
    return 0;
}

int dsk_buf_printf(dsk_buf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return dsk_err("formatting failed");
    if ((size_t)n < sizeof small)
        return dsk_buf_append(b, small, (size_t)n);
    char *big = dsk_malloc((size_t)n + 1);
    if (!big)
        return -1;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int rc = dsk_buf_append(b, big, (size_t)n);
    free(big);
    return rc;
}

void dsk_buf_free(dsk_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
