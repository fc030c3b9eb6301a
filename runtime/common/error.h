/* Error reporting: a function that fails returns -1 (or NULL) and leaves one message in a thread-local
 * buffer. Each layer on the way up may prepend its context ("loading kit x.tar.zst: "), so the message
 * the user finally reads names the file, tensor, variant or rank, and the operation that failed. */
#ifndef DSK_ERROR_H
#define DSK_ERROR_H

#define DSK_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Set the message (replacing any earlier one). Always returns -1 so callers can `return dsk_err(...)`. */
int dsk_err(const char *fmt, ...) DSK_PRINTF(1, 2);
/* Set the message with ": <strerror(errno)>" appended. Returns -1. */
int dsk_err_errno(const char *fmt, ...) DSK_PRINTF(1, 2);
/* Prepend "<context>: " to the current message. Returns -1. */
int dsk_err_ctx(const char *fmt, ...) DSK_PRINTF(1, 2);
/* The current message ("" when none). */
const char *dsk_err_msg(void);
void dsk_err_clear(void);

/* Allocation that reports failure through dsk_err (never aborts). */
#include <stddef.h>
void *dsk_malloc(size_t n);
void *dsk_calloc(size_t n, size_t size);
void *dsk_realloc(void *p, size_t n);
char *dsk_strdup(const char *s);

#endif
