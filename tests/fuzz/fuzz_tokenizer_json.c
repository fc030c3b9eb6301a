/* tokenizer.json on any bytes (tok_load_json, what tok_load runs on a file): a refusal, or a tokenizer
 * within the limits of tok_internal.h whose encodings hold only its ids and decode; without added tokens
 * (whose contents decode as written, not byte-level, as in Hugging Face) text round-trips exactly: byte-
 * level BPE has a token for every byte, which loading checks. The seeds are the synthetic tokenizer and edits of it; inputs stay small
 * (the real tokenizer's 7.8 MB is loaded by the other targets), so runs reach the checks rather than
 * the parser's bulk. */
#include "runtime/tokenizer/tok_internal.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dsk_tokenizer *tok;
    if (tok_load_json((const char *)data, size, &tok))
        return 0;
    FUZZ_CHECK(tok->n_ids <= TOK_MAX_IDS);
    static const char text[] = "Hello, world! 12345 \xe4\xbd\xa0\xe5\xa5\xbd\n\t  <tag> \xf0\x9f\x98\x80 \xff\x80";
    for (unsigned flags = 0; flags <= TOK_SPECIAL; flags += TOK_SPECIAL) {
        tok_ids ids = {0};
        FUZZ_CHECK(tok_encode_append(tok, text, sizeof text - 1, flags, &ids) == 0);
        for (size_t i = 0; i < ids.len; i++)
            FUZZ_CHECK(ids.data[i] >= 0 && ids.data[i] < tok->n_ids);
        char *back;
        size_t len;
        FUZZ_CHECK(tok_decode(tok, ids.data, ids.len, &back, &len) == 0);
        FUZZ_CHECK(tok->n_added || (len == sizeof text - 1 && !memcmp(back, text, len)));
        free(back);
        tok_ids_free(&ids);
    }
    tok_free(tok);
    return 0;
}
