/* The reference tokenizer's Unicode classes (Oniguruma in Hugging Face tokenizers), as sorted
 * inclusive code point ranges. PCRE2's tables can lag behind; see pretok.c for how they are patched. */
#ifndef DSK_UNICODE_TABLES_H
#define DSK_UNICODE_TABLES_H

#include <stddef.h>
#include <stdint.h>

enum { UNI_N, UNI_L, UNI_P, UNI_S, UNI_M, UNI_SPACE, UNI_NCLASSES };

typedef struct {
    const char *pattern;        /* the regex spelling: "\\p{L}", ..., "\\s" */
    const uint32_t (*ranges)[2]; /* [n][2] inclusive, ascending, disjoint */
    size_t n;
} uni_class;

extern const uni_class uni_classes[UNI_NCLASSES];

#endif
