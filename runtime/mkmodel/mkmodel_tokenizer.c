/* The synthetic checkpoint's tokenizer.json and tokenizer_config.json: the committed DeepSeek-V3 files
 * with the DeepSeek-V4 chat-format tokens they lack (model.md §5). See docs/mkmodel.md "Tokenizer". */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/mkmodel/mkmodel.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens of the V4.1 chat format (model.md §5) that the V3 file lacks. Each missing one gets the next
 * id after the file's highest, in this order: with the committed file, 128815..128825. They must be
 * consecutive: Hugging Face's tokenizers library ignores the "id" of an added token that is not in the
 * BPE vocabulary and numbers such tokens one after the other, so a gap would shift every later id.
 * (Public V4-family tokenizers fill 128000..129279 with placeholders and put these tokens at other ids;
 * a synthetic model has no reason to mirror those.) "｜DSML｜" carries no angle bracket: it is the piece
 * shared by the opening `<｜DSML｜ calls>` and the closing `</｜DSML｜ calls>` tags. */
const char *const mkmodel_added_tokens[] = {
    "<｜System｜>", "<think>", "</think>", "｜DSML｜", "<｜latest_reminder｜>", "<｜action｜>",
    "<｜query｜>", "<｜authority｜>", "<｜domain｜>", "<｜title｜>", "<｜read_url｜>",
};
const int mkmodel_n_added_tokens = sizeof mkmodel_added_tokens / sizeof mkmodel_added_tokens[0];

/* The content → id of an added token of the parsed file, or -1. */
static json_int_t added_id(const json_t *added, const char *content)
{
    size_t i;
    const json_t *e;
    json_array_foreach(added, i, e)
    {
        const char *c = json_string_value(json_object_get(e, "content"));
        if (c && !strcmp(c, content))
            return json_integer_value(json_object_get(e, "id"));
    }
    return -1;
}

static json_int_t max_id(const json_t *added)
{
    json_int_t m = -1;
    size_t i;
    const json_t *e;
    json_array_foreach(added, i, e)
    {
        json_int_t id = json_integer_value(json_object_get(e, "id"));
        m = id > m ? id : m;
    }
    return m;
}

/* Append {id, content} (id above every other); flags as the V3 file gives `<｜User｜>`. */
static int append_token(json_t *added, json_int_t id, const char *content)
{
    json_t *e = json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", 0,
                          "lstrip", 0, "rstrip", 0, "normalized", 1, "special", 0);
    if (!e)
        return dsk_err("tokenizer: cannot build the entry for %s", content);
    if (json_array_append_new(added, e))
        return dsk_err("tokenizer: cannot insert %s", content);
    return 0;
}

static int dump_to(const json_t *root, const char *path)
{
    char *text = json_dumps(root, JSON_INDENT(2));
    if (!text)
        return dsk_err("cannot serialize %s", path);
    size_t n = strlen(text);
    char *withnl = dsk_malloc(n + 2);
    if (!withnl) {
        free(text);
        return -1;
    }
    memcpy(withnl, text, n);
    withnl[n] = '\n';
    free(text);
    int rc = dsk_write_file_atomic(path, withnl, n + 1);
    free(withnl);
    return rc;
}

static int write_tokenizer_json(const char *src, const char *out_dir, int vocab_size, int *n_added)
{
    char *text;
    size_t len;
    if (dsk_read_file(src, &text, &len))
        return -1;
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    free(text);
    if (!root)
        return dsk_err("tokenizer %s: not valid JSON (line %d: %s)", src, je.line, je.text);
    int rc = -1;
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_array(added)) {
        dsk_err("tokenizer %s: no 'added_tokens' list; pass a Hugging Face tokenizer.json with --tokenizer", src);
        goto done;
    }
    *n_added = 0;
    json_int_t next = max_id(added) + 1;
    for (int i = 0; i < mkmodel_n_added_tokens; i++) {
        const char *t = mkmodel_added_tokens[i];
        if (added_id(added, t) >= 0)
            continue;
        if (next >= vocab_size) {
            dsk_err("tokenizer %s: no free id below vocab_size %d for %s", src, vocab_size, t);
            goto done;
        }
        if (append_token(added, next++, t))
            goto done;
        (*n_added)++;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", out_dir);
    rc = dump_to(root, path);
done:
    json_decref(root);
    return rc;
}

/* tokenizer_config.json: the source's (when present beside it) without its V3 chat template, which
 * renders the wrong format for V4.1 (the chat encoder is runtime/tokenizer's), and with the context
 * length of the config. */
static int write_tokenizer_config(const char *src, const char *out_dir, int64_t max_len)
{
    char cfg[4096];
    size_t n = strlen(src);
    if (n > 5 && !strcmp(src + n - 5, ".json"))
        snprintf(cfg, sizeof cfg, "%.*s_config.json", (int)(n - 5), src);
    else
        snprintf(cfg, sizeof cfg, "%s_config.json", src);
    json_t *root;
    if (dsk_file_exists(cfg)) {
        json_error_t je;
        char *text;
        size_t len;
        if (dsk_read_file_max(cfg, 16 << 20, "tokenizer config", &text, &len)) /* never blocks on a FIFO */
            return -1;
        root = json_loadb(text, len, 0, &je);
        free(text);
        if (!root || !json_is_object(root)) {
            json_decref(root);
            return dsk_err("tokenizer config %s: not a JSON object (line %d: %s)", cfg, je.line, je.text);
        }
        json_object_del(root, "chat_template");
    } else {
        root = json_pack("{s:b, s:b, s:s, s:s, s:b, s:s}", "add_bos_token", 1, "add_eos_token", 0, "bos_token",
                         "<｜begin▁of▁sentence｜>", "eos_token", "<｜end▁of▁sentence｜>",
                         "clean_up_tokenization_spaces", 0, "tokenizer_class", "LlamaTokenizerFast");
        if (!root)
            return dsk_err("cannot build tokenizer_config.json");
    }
    int rc = json_object_set_new(root, "model_max_length", json_integer(max_len));
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", out_dir);
    rc = rc ? dsk_err("cannot set model_max_length") : dump_to(root, path);
    json_decref(root);
    return rc;
}

int mkmodel_tokenizer(const char *src, const char *out_dir, int vocab_size, int64_t max_len, int *n_added)
{
    if (write_tokenizer_json(src, out_dir, vocab_size, n_added) ||
        write_tokenizer_config(src, out_dir, max_len))
        return dsk_err_ctx("writing the tokenizer from %s", src);
    return 0;
}
