/* A sequence's generated tokens to released text, on the scheduler thread: streaming decode (only
 * complete UTF-8 characters come out) and stop strings (the text is cut before the first one that
 * completes; text that may still become one is held back until it cannot). */
#ifndef DSK_SERVER_DETOK_H
#define DSK_SERVER_DETOK_H

#include "runtime/tokenizer/tokenizer.h"

typedef struct {
    tok_stream ts;
    char *const *stops;
    int n_stops;
    dsk_buf held;    /* decoded, not released: it may be the start of a stop string */
    dsk_buf scratch;
} srv_detok;

void srv_detok_init(srv_detok *d, const dsk_tokenizer *tok, char *const *stops, int n_stops);
void srv_detok_free(srv_detok *d);
/* Decode id; the text now known not to contain or begin a stop string is appended to out. *stopped is set
 * when a stop string completed: the text before it was released, it and what follows are dropped. */
int srv_detok_push(srv_detok *d, int32_t id, dsk_buf *out, int *stopped);
/* End of generation (not by a stop string): what is held back comes out, a dangling partial character as
 * U+FFFD. */
int srv_detok_finish(srv_detok *d, dsk_buf *out);

#endif
