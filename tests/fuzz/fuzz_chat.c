/* Encode any JSON text as a chat request: a bad request is an error, never a crash; a good one
 * starts with BOS and decodes back to its rendered text. */
#include "runtime/tokenizer/chat.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const dsk_tokenizer *tok = fuzz_tokenizer();
    json_t *req = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
    if (!req)
        return 0;
    chat_prompt out;
    dsml_prompt p;
    if (chat_encode(tok, req, 0, &out) == 0) {
        FUZZ_CHECK(out.ids.len > 0 && out.ids.data[0] == tok_bos(tok));
        FUZZ_CHECK(chat_render(req, &p, NULL) == 0);
        char *text;
        size_t len;
        FUZZ_CHECK(tok_decode(tok, out.ids.data, out.ids.len, &text, &len) == 0);
        FUZZ_CHECK(len == p.text.len && !memcmp(text, p.text.data, len));
        free(text);
        dsml_prompt_free(&p);
        chat_prompt_free(&out);
    }
    json_decref(req);
    return 0;
}
