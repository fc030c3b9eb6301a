/* Decode any id sequence (pairs of input bytes, taken modulo a little more than the vocabulary so
 * that bad ids occur too): bad ids are errors, not crashes; the streaming decoder's output is
 * always valid UTF-8 and equals the whole decode with ill-formed sequences replaced by U+FFFD. */
#include "runtime/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const dsk_tokenizer *tok = fuzz_tokenizer();
    int32_t n_ids = tok_vocab_size(tok);
    size_t n = size / 3;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    FUZZ_CHECK(ids);
    int all_valid = 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)data[3 * i] | (uint32_t)data[3 * i + 1] << 8 | (uint32_t)data[3 * i + 2] << 16;
        /* mostly byte-sized tokens (ids below 300) so that characters get cut between tokens */
        ids[i] = (int32_t)(v & 0x800000 ? v % 300 : v % (uint32_t)(n_ids + 16));
        all_valid &= tok_str(tok, ids[i]) != NULL;
    }
    char *text;
    size_t len;
    int rc = tok_decode(tok, ids, n, &text, &len);
    FUZZ_CHECK((rc == 0) == all_valid);
    tok_stream st;
    dsk_buf out = {0};
    tok_stream_init(&st, tok);
    size_t pushed = 0;
    for (; pushed < n; pushed++) {
        if (tok_stream_push(&st, ids[pushed], &out))
            break;
        FUZZ_CHECK(utf8_valid((const uint8_t *)out.data, out.len));
    }
    FUZZ_CHECK(tok_stream_flush(&st, &out) == 0);
    FUZZ_CHECK(utf8_valid((const uint8_t *)out.data, out.len));
    if (rc == 0) {
        dsk_buf want = {0};
        size_t i = 0, l;
        while (i < len) {
            int r = utf8_next((const uint8_t *)text + i, len - i, &l);
            FUZZ_CHECK(dsk_buf_append(&want, r == UTF8_OK ? text + i : "\xEF\xBF\xBD", r == UTF8_OK ? l : 3) == 0);
            i += l;
        }
        FUZZ_CHECK(want.len == out.len && (!out.len || !memcmp(want.data, out.data, out.len)));
        dsk_buf_free(&want);
        free(text);
    }
    dsk_buf_free(&out);
    free(ids);
    return 0;
}
