/* Id <-> token lookups, decoding, and streaming decoding. */
#include "runtime/common/error.h"
#include "runtime/tokenizer/tok_internal.h"
#include "runtime/tokenizer/utf8.h"

#include <string.h>

int32_t tok_id(const dsk_tokenizer *tok, const char *token_string)
{
    return tok_lookup(tok, token_string, strlen(token_string));
}

const char *tok_str(const dsk_tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_ids || tok->str_off[id] == UINT32_MAX)
        return NULL;
    return tok->strs + tok->str_off[id];
}

const uint8_t *tok_bytes(const dsk_tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || id >= tok->n_ids || tok->str_off[id] == UINT32_MAX)
        return NULL;
    *len = tok->byte_off[id + 1] - tok->byte_off[id];
    return tok->bytes + tok->byte_off[id];
}

int tok_vocab_size(const dsk_tokenizer *tok)
{
    return tok->n_ids;
}

int tok_is_special(const dsk_tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->n_ids && (tok->special[id] & TOK_FLAG_SPECIAL);
}

int tok_is_added(const dsk_tokenizer *tok, int32_t id)
{
    return id >= 0 && id < tok->n_ids && (tok->special[id] & TOK_FLAG_ADDED);
}

int32_t tok_bos(const dsk_tokenizer *tok)
{
    return tok->bos;
}

int32_t tok_eos(const dsk_tokenizer *tok)
{
    return tok->eos;
}

/* ---- decoding ---- */

int tok_decode(const dsk_tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len)
{
    dsk_buf out = {0};
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const uint8_t *b = tok_bytes(tok, ids[i], &l);
        if (!b) {
            dsk_buf_free(&out);
            return dsk_err("token id %d (at %zu) is not in the vocabulary (size %d)", ids[i], i,
                           tok->n_ids);
        }
        if (dsk_buf_append(&out, b, l)) {
            dsk_buf_free(&out);
            return -1;
        }
    }
    if (dsk_buf_append(&out, "", 1)) {
        dsk_buf_free(&out);
        return -1;
    }
    *text = out.data;
    *len = out.len - 1;
    return 0;
}

void tok_stream_init(tok_stream *st, const dsk_tokenizer *tok)
{
    st->tok = tok;
    st->npending = 0;
}

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Emit the complete characters of pending + b[0..n) and keep an incomplete tail pending. */
static int stream_bytes(tok_stream *st, const uint8_t *b, size_t n, dsk_buf *out)
{
    /* finish the pending character first, one byte at a time */
    while (st->npending && n) {
        st->pending[st->npending++] = *b++;
        n--;
        size_t l;
        int r = utf8_next(st->pending, (size_t)st->npending, &l);
        if (r == UTF8_SHORT)
            continue;
        if (r == UTF8_OK) {
            if (dsk_buf_append(out, st->pending, l))
                return -1;
            st->npending = 0;
            break;
        }
        /* ill-formed: the maximal subpart becomes U+FFFD; what follows it is looked at again */
        if (dsk_buf_append(out, replacement, 3))
            return -1;
        int rest = st->npending - (int)l;
        uint8_t tail[4];
        memcpy(tail, st->pending + l, (size_t)rest);
        st->npending = 0;
        if (rest && stream_bytes(st, tail, (size_t)rest, out))
            return -1;
    }
    size_t i = 0, start = 0, l;
    while (i < n) {
        if (b[i] < 0x80) {
            i++;
            continue;
        }
        int r = utf8_next(b + i, n - i, &l);
        if (r == UTF8_OK) {
            i += l;
            continue;
        }
        if (dsk_buf_append(out, b + start, i - start))
            return -1;
        if (r == UTF8_SHORT) {
            memcpy(st->pending, b + i, l);
            st->npending = (int)l;
            return 0;
        }
        if (dsk_buf_append(out, replacement, 3))
            return -1;
        i += l;
        start = i;
    }
    return dsk_buf_append(out, b + start, n - start);
}

int tok_stream_push(tok_stream *st, int32_t id, dsk_buf *out)
{
    size_t l;
    const uint8_t *b = tok_bytes(st->tok, id, &l);
    if (!b)
        return dsk_err("token id %d is not in the vocabulary (size %d)", id, st->tok->n_ids);
    return stream_bytes(st, b, l, out);
}

int tok_stream_flush(tok_stream *st, dsk_buf *out)
{
    int had = st->npending;
    st->npending = 0;
    return had ? dsk_buf_append(out, replacement, 3) : 0;
}
