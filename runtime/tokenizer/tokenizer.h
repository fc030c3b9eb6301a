/* The model's tokenizer: a Hugging Face tokenizer.json with a byte-level BPE model, added tokens,
 * a pre-tokenizer of Split regexes and ByteLevel, and the ByteLevel decoder. Ids equal those of
 * Hugging Face `tokenizers` (encode with add_special_tokens=False) for any valid UTF-8 text.
 * A loaded tokenizer is read-only: every function below may be called from many threads at once. */
#ifndef DSK_TOKENIZER_H
#define DSK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/common/util.h"

typedef struct dsk_tokenizer dsk_tokenizer;

/* Load a tokenizer.json. A feature the file uses that this tokenizer does not implement is an error
 * that names it. */
int tok_load(const char *path, dsk_tokenizer **out);
/* The same from the file's text (len bytes). */
int tok_load_json(const char *json, size_t len, dsk_tokenizer **out);
void tok_free(dsk_tokenizer *tok);

/* A growable id array. */
typedef struct {
    int32_t *data;
    size_t len, cap;
} tok_ids;
int tok_ids_push(tok_ids *ids, int32_t id);
void tok_ids_free(tok_ids *ids);

enum {
    TOK_SPECIAL = 1, /* split out added tokens where their strings occur, as Hugging Face does */
};

/* Append the ids of text[0..len) to out. Without TOK_SPECIAL the text is plain text: a string such
 * as "<｜User｜>" in it is encoded as ordinary characters. Bytes that are not well-formed UTF-8 are
 * each encoded as their own byte token (lossless); the valid stretches around them are encoded as
 * separate texts. */
int tok_encode_append(const dsk_tokenizer *tok, const char *text, size_t len, unsigned flags,
                      tok_ids *out);
/* Encode with added tokens split out (TOK_SPECIAL), BOS first if add_bos. *ids is malloc'd. */
int tok_encode(const dsk_tokenizer *tok, const char *text, size_t len, int add_bos, int32_t **ids,
               size_t *n);

/* The bytes that ids stand for, concatenated (NUL-terminated; *len excludes the NUL). The result
 * can be any bytes, including invalid UTF-8 where a sequence is cut between tokens: it is exactly
 * the inverse of encoding. An id outside the vocabulary is an error. */
int tok_decode(const dsk_tokenizer *tok, const int32_t *ids, size_t n, char **text, size_t *len);

/* Streaming decode: feed ids one at a time; only complete UTF-8 characters come out. A byte
 * sequence that can never become a valid character comes out as U+FFFD (one per maximal
 * ill-formed subsequence, as Unicode recommends), so the output is always valid UTF-8. */
typedef struct {
    const dsk_tokenizer *tok;
    uint8_t pending[4]; /* an incomplete character's first bytes */
    int npending;
} tok_stream;
void tok_stream_init(tok_stream *st, const dsk_tokenizer *tok);
/* Append the complete characters that id finishes to out. */
int tok_stream_push(tok_stream *st, int32_t id, dsk_buf *out);
/* End of stream: an incomplete character left over comes out as U+FFFD. */
int tok_stream_flush(tok_stream *st, dsk_buf *out);

/* The id of a token given its string as the file spells it (an added token's content, or a vocab
 * entry in byte-level form such as "Ġthe"); -1 if absent. */
int32_t tok_id(const dsk_tokenizer *tok, const char *token_string);
/* The string of an id as the file spells it; NULL if the id is not in the vocabulary. */
const char *tok_str(const dsk_tokenizer *tok, int32_t id);
/* The bytes an id decodes to (not NUL-terminated); NULL if the id is not in the vocabulary. */
const uint8_t *tok_bytes(const dsk_tokenizer *tok, int32_t id, size_t *len);
/* One more than the largest id. */
int tok_vocab_size(const dsk_tokenizer *tok);
/* Whether id is an added token marked special (skipped by Hugging Face's skip_special_tokens). */
int tok_is_special(const dsk_tokenizer *tok, int32_t id);
/* Whether id is an added token, special or not (every chat-format control token: <｜User｜>, ｜DSML｜,
 * <think>, ...): text never encodes to it unless added tokens are matched. */
int tok_is_added(const dsk_tokenizer *tok, int32_t id);
/* <｜begin▁of▁sentence｜> and <｜end▁of▁sentence｜> (model.md §5), looked up by string; -1 if absent. */
int32_t tok_bos(const dsk_tokenizer *tok);
int32_t tok_eos(const dsk_tokenizer *tok);

#endif
