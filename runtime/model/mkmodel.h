/* `dskit mkmodel`: synthetic DeepSeek-V4.1-Flash checkpoints (docs/mkmodel.md). The pieces below are
 * what cmd_mkmodel strings together; tests call them directly. */
#ifndef DSK_MKMODEL_H
#define DSK_MKMODEL_H

#include <stdint.h>

/* A token the synthetic tokenizer.json gains when the source file lacks it. */
typedef struct {
    int id;
    const char *content;
} mkmodel_token;

extern const mkmodel_token mkmodel_added_tokens[];
extern const int mkmodel_n_added_tokens;

/* Write out_dir/tokenizer.json (src with the missing mkmodel_added_tokens inserted in id order) and
 * out_dir/tokenizer_config.json (from src's sibling "<stem>_config.json" when it exists). *n_added counts
 * the tokens inserted. Same input, same bytes. */
int mkmodel_tokenizer(const char *src, const char *out_dir, int vocab_size, int64_t max_len, int *n_added);

/* Presets (model.md §7): "tiny", "layer-a", "layer-b", "layer-c". */
const char *mkmodel_preset_names(void);
/* One line saying what the preset holds; NULL for an unknown name. */
const char *mkmodel_preset_summary(const char *name);
/* The preset's config.json text (malloc'd, free()); codebook ("mul1", "mcg", "3inst") and seed are
 * recorded in it. Engram row counts come from engram_layout. */
int mkmodel_preset_config(const char *name, const char *codebook, uint64_t seed, char **json_text);

#endif
