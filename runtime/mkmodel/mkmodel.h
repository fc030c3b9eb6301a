/* `dskit mkmodel`: synthetic DeepSeek-V4.1-Flash checkpoints (docs/mkmodel.md). The pieces below are
 * what cmd_mkmodel strings together; tests call them directly. */
#ifndef DSK_MKMODEL_H
#define DSK_MKMODEL_H

#include "runtime/model/config.h"
#include "runtime/model/schema.h"
#include "runtime/weights/safetensors.h"

#include <stdint.h>

/* The tokens the synthetic tokenizer.json gains when the source file lacks them. */
extern const char *const mkmodel_added_tokens[];
extern const int mkmodel_n_added_tokens;

/* Write out_dir/tokenizer.json (src with each missing mkmodel_added_tokens entry appended at the next
 * free id, in order) and
 * out_dir/tokenizer_config.json (from src's sibling "<stem>_config.json" when it exists). *n_added counts
 * the tokens inserted. Same input, same bytes. */
int mkmodel_tokenizer(const char *src, const char *out_dir, int vocab_size, int64_t max_len, int *n_added);

/* Presets (model.md §7, vision.md §5): the i-th preset's name (NULL past the last), and all of them joined
 * with ", " ("tiny, tiny-vision, layer-a, ..."). */
const char *mkmodel_preset_name(int i);
const char *mkmodel_preset_names(void);
/* One line saying what the preset holds; NULL for an unknown name. */
const char *mkmodel_preset_summary(const char *name);
/* The preset's config.json text (malloc'd, free()); codebook ("mul1", "mcg", "3inst") and seed are
 * recorded in it. Engram row counts come from engram_layout. */
int mkmodel_preset_config(const char *name, const char *codebook, uint64_t seed, char **json_text);

/* What the value rules need besides the tensor itself. */
typedef struct {
    uint64_t seed;
    int codebook;             /* 0 3INST, 1 MCG, 2 MUL1 (exl3.md §2.5) */
    const model_config *cfg;  /* hc_mult, engram_compressed_vocab_size */
} mkmodel_gen;

typedef struct {
    int tensors;      /* schema tensors written */
    int stored;       /* safetensors entries (an EXL3 linear stores 3 or 4) */
    uint64_t bytes;   /* tensor data bytes */
} mkmodel_stats;

/* Generate schema tensor t's values and add every stored part of it to w; counts go to *st. */
int mkmodel_write_tensor(st_writer *w, const mkmodel_gen *g, const schema_tensor *t, mkmodel_stats *st);
/* "3inst" 0, "mcg" 1, "mul1" 2; -1 with a message otherwise. */
int mkmodel_codebook_parse(const char *s);

#endif
