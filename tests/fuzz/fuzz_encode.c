/* Encode any bytes (with and without added-token matching): never fails, and decoding gives the
 * bytes back exactly; for valid UTF-8 the streaming decoder gives them back too. */
#include "runtime/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const dsk_tokenizer *tok = fuzz_tokenizer();
    for (unsigned flags = 0; flags <= TOK_SPECIAL; flags += TOK_SPECIAL) {
        tok_ids ids = {0};
        FUZZ_CHECK(tok_encode_append(tok, (const char *)data, size, flags, &ids) == 0);
        char *back;
        size_t len;
        FUZZ_CHECK(tok_decode(tok, ids.data, ids.len, &back, &len) == 0);
        FUZZ_CHECK(len == size && !memcmp(back, data, size));
        free(back);
        if (utf8_valid(data, size)) {
            tok_stream st;
            dsk_buf out = {0};
            tok_stream_init(&st, tok);
            for (size_t i = 0; i < ids.len; i++)
                FUZZ_CHECK(tok_stream_push(&st, ids.data[i], &out) == 0);
            FUZZ_CHECK(tok_stream_flush(&st, &out) == 0);
            FUZZ_CHECK(out.len == size && (!size || !memcmp(out.data, data, size)));
            dsk_buf_free(&out);
        }
        tok_ids_free(&ids);
    }
    return 0;
}
