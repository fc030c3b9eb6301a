#include "runtime/server/detok.h"
#include "runtime/common/error.h"

#include <string.h>

void srv_detok_init(srv_detok *d, const dsk_tokenizer *tok, char *const *stops, int n_stops)
{
    *d = (srv_detok){.stops = stops, .n_stops = n_stops};
    tok_stream_init(&d->ts, tok);
}

void srv_detok_free(srv_detok *d)
{
    dsk_buf_free(&d->held);
    dsk_buf_free(&d->scratch);
}

/* The longest suffix of s[0..n) that is a proper prefix of some stop string. */
static size_t partial_stop(const srv_detok *d, const char *s, size_t n)
{
    size_t best = 0;
    for (int i = 0; i < d->n_stops; i++) {
        size_t l = strlen(d->stops[i]);
        for (size_t k = (l - 1 < n ? l - 1 : n); k > best; k--)
            if (!memcmp(s + n - k, d->stops[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

int srv_detok_push(srv_detok *d, int32_t id, dsk_buf *out, int *stopped)
{
    *stopped = 0;
    if (!d->n_stops)
        return tok_stream_push(&d->ts, id, out);
    d->scratch.len = 0;
    if (tok_stream_push(&d->ts, id, &d->scratch) || dsk_buf_append(&d->held, d->scratch.data, d->scratch.len))
        return -1;
    const char *h = d->held.data;
    size_t n = d->held.len, cut = n;
    for (int i = 0; i < d->n_stops; i++) {
        const char *at = n ? memmem(h, n, d->stops[i], strlen(d->stops[i])) : NULL;
        if (at && (size_t)(at - h) < cut)
            cut = (size_t)(at - h);
    }
    if (cut < n) {
        *stopped = 1;
        int rc = dsk_buf_append(out, h, cut);
        d->held.len = 0;
        return rc;
    }
    size_t keep = partial_stop(d, h, n);
    if (dsk_buf_append(out, h, n - keep))
        return -1;
    memmove(d->held.data, h + n - keep, keep);
    d->held.len = keep;
    return 0;
}

int srv_detok_finish(srv_detok *d, dsk_buf *out)
{
    int rc = dsk_buf_append(out, d->held.data, d->held.len);
    d->held.len = 0;
    return rc || tok_stream_flush(&d->ts, out);
}
