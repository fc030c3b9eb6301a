/* Compiling one kernel variant to a cubin with NVRTC, through an on-disk cache keyed by the xxh3-128 of
 * everything that affects the bytes: the family source, every header in kit/src, the options (arch,
 * defines, flags) and the NVRTC version. */
#ifndef DSK_COMPILE_H
#define DSK_COMPILE_H

#include <stddef.h>

typedef struct {
    char *name; /* path relative to kit/src */
    char *data;
    size_t len;
} src_file;

/* Every file of kit/src, sorted by name, loaded once per build. */
typedef struct {
    src_file *files;
    int n;
} src_tree;

int src_tree_load(const char *dir, src_tree *t);
const src_file *src_tree_find(const src_tree *t, const char *name);
void src_tree_free(src_tree *t);
/* xxh3-128 over the tree (names and bytes, length-prefixed) and extra bytes (the variant spec). */
void src_tree_hash(const src_tree *t, const char *extra, size_t extra_len, char out[33]);

int nvrtc_version_string(char *out, size_t cap);

typedef struct {
    const src_tree *tree;
    const char *source;     /* family source file name */
    const char *const *opts; /* NVRTC options (arch, defines, flags) */
    int nopts;
    const char *cache_dir;  /* NULL: no cache */
} compile_job;

/* Compile (or fetch from the cache). *cached tells which. On a compile error the message holds the
 * NVRTC log. */
int compile_variant(const compile_job *job, unsigned char **cubin, size_t *len, int *cached);

#endif
