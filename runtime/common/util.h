/* Small host helpers: whole-file I/O with atomic replacement, directories, time, hashing. */
#ifndef DSK_UTIL_H
#define DSK_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* Open a user-given file for reading, refusing anything but a regular file without blocking on it: the
 * open is non-blocking (a FIFO would otherwise hang the open itself), then the flag is cleared. On
 * success *st holds its fstat. Returns the descriptor or -1. */
int dsk_open_regular(const char *path, struct stat *st);
/* Read a whole file into a malloc'd buffer (NUL-terminated for convenience; *len excludes the NUL). */
int dsk_read_file(const char *path, char **data, size_t *len);
/* The same, refusing a file of more than max bytes before reading it; what names the file's role in
 * the message ("kit", "shard index"). */
int dsk_read_file_max(const char *path, size_t max, const char *what, char **data, size_t *len);
/* Write a file atomically: a temporary file in the same folder, fsync, then rename over path. */
int dsk_write_file_atomic(const char *path, const void *data, size_t len);
/* mkdir -p. */
int dsk_mkdirs(const char *path);
int dsk_file_exists(const char *path);

/* Monotonic clock in seconds. */
double dsk_now(void);

/* xxh3-128 of a buffer, as the canonical 32 lowercase hex digits (high 64 bits first). */
void dsk_xxh128_hex(const void *data, size_t len, char out[33]);
/* xxh3-64 of a buffer. */
uint64_t dsk_xxh64(const void *data, size_t len);

/* Grow-able byte buffer for building strings and blobs. */
typedef struct {
    char *data;
    size_t len, cap;
} dsk_buf;
int dsk_buf_append(dsk_buf *b, const void *data, size_t n);
int dsk_buf_printf(dsk_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dsk_buf_free(dsk_buf *b);

#endif
