/* The synthetic checkpoint's tokenizer.json and tokenizer_config.json: the committed DeepSeek-V3 files
 * with the DeepSeek-V4 chat-format tokens they lack (model.md §5). See docs/mkmodel.md "Tokenizer". */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/model/mkmodel.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ids are those public V4-family tokenizers give these strings (two independent ports agree); none is
 * taken in the V3 file, whose added tokens stop at 128814. `<｜System｜>` sits at 128799 in V4, where V3
 * has a placeholder (and DSpark its noise token), so it takes the first free id instead. "｜DSML｜" has no
 * angle bracket: it is the piece shared by the opening `<｜DSML｜ calls>` and closing `</｜DSML｜ calls>`
 * tags. */
const mkmodel_token mkmodel_added_tokens[] = {
    {128815, "<｜System｜>"},  {128821, "<think>"},      {128822, "</think>"},
    {128825, "｜DSML｜"},      {128828, "<｜latest_reminder｜>"}, {128829, "<｜action｜>"},
    {128830, "<｜query｜>"},   {128831, "<｜authority｜>"}, {128832, "<｜domain｜>"},
    {128836, "<｜title｜>"},   {128845, "<｜read_url｜>"},
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

static int id_taken(const json_t *added, json_int_t id)
{
    size_t i;
    const json_t *e;
    json_array_foreach(added, i, e)
    {
        if (json_integer_value(json_object_get(e, "id")) == id)
            return 1;
    }
    return 0;
}

/* Insert {id, content} keeping the array in id order; flags as the V3 file gives `<｜User｜>`. */
static int insert_token(json_t *added, json_int_t id, const char *content)
{
    json_t *e = json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", 0,
                          "lstrip", 0, "rstrip", 0, "normalized", 1, "special", 0);
    if (!e)
        return dsk_err("tokenizer: cannot build the entry for %s", content);
    size_t at = json_array_size(added);
    while (at > 0 && json_integer_value(json_object_get(json_array_get(added, at - 1), "id")) > id)
        at--;
    if (json_array_insert_new(added, at, e))
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
    json_error_t je;
    json_t *root = json_load_file(src, 0, &je);
    if (!root)
        return dsk_err("tokenizer %s: not valid JSON (line %d: %s)", src, je.line, je.text);
    int rc = -1;
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_array(added)) {
        dsk_err("tokenizer %s: no 'added_tokens' list; pass a Hugging Face tokenizer.json with --tokenizer", src);
        goto done;
    }
    *n_added = 0;
    for (int i = 0; i < mkmodel_n_added_tokens; i++) {
        const mkmodel_token *t = &mkmodel_added_tokens[i];
        if (added_id(added, t->content) >= 0)
            continue;
        if (t->id >= vocab_size) {
            dsk_err("tokenizer: id %d for %s is outside the vocabulary (%d)", t->id, t->content, vocab_size);
            goto done;
        }
        if (id_taken(added, t->id)) {
            dsk_err("tokenizer %s: id %d, wanted for %s, already holds another token; this file is not the "
                    "DeepSeek-V3 tokenizer the generator expects",
                    src, t->id, t->content);
            goto done;
        }
        if (insert_token(added, t->id, t->content))
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
        root = json_load_file(cfg, 0, &je);
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
