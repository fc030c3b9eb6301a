/* Text from a file someone else wrote (a kit's entry names, a manifest's strings, tensor and token
 * names) made safe to print: terminal control characters, invalid UTF-8 and characters that reorder or
 * break lines never reach a terminal or a JSON document as they are (issue 15: a newline in a tar entry
 * name forged an "OK" line in `dskit verify`'s output, ESC sequences passed through).
 *
 * Printable ASCII and well-formed UTF-8 stay as they are. A C0 control or DEL becomes \n, \r, \t or
 * \xNN; a byte that is not part of well-formed UTF-8 becomes \xNN; a C1 control (U+0080..U+009F), a
 * line or paragraph separator (U+2028, U+2029) or a bidirectional override or isolate (U+202A..U+202E,
 * U+2066..U+2069) becomes \u{XXXX}. A backslash stays as it is, so escaping is idempotent: a message
 * built from escaped parts can be escaped again unchanged. */
#ifndef DSK_ESCAPE_H
#define DSK_ESCAPE_H

#include <stddef.h>

enum { DSK_ESC_KEEP_NEWLINES = 1 }; /* flags: keep '\n' (messages of several lines) */

/* Escape len bytes of s into out (always NUL-terminated when cap > 0; an escape that does not fit is
 * left out whole, never cut). Returns the length written. */
size_t dsk_escape(const char *s, size_t len, int flags, char *out, size_t cap);
/* 1 when dsk_escape would change nothing. */
int dsk_is_printable(const char *s, size_t len, int flags);
/* s escaped into one of eight thread-local buffers of 1024 bytes used in turn, for a format's
 * arguments: dsk_err("entry '%s' ...", dsk_esc(name)). A longer result ends in "...". */
const char *dsk_esc(const char *s);

#endif
