/* `dskit engram pack` / `verify`: write a checkpoint's Engram tables as packed row files made for direct
 * reads, and check such a folder (format: docs/engram.md). */
#ifndef DSK_ENGRAM_PACK_H
#define DSK_ENGRAM_PACK_H

#include "runtime/engram/engram_store.h"

#include <stdio.h>

/* Fill n records (width values then width/32 scales each) of table t starting at table row row0. */
typedef int (*engram_rows_fn)(void *ctx, const engram_table *t, int64_t row0, int64_t n, uint8_t *records);

typedef struct {
    int tp;          /* ranks the rows are split over (1..8): rank r gets rows [r·ceil(rows/tp), ...) */
    long block_rows; /* records per hash block (0: as many as fit 4096 bytes: 15 for 264-byte records) */
    int progress;    /* 1: a progress line on stderr when it is a terminal */
    int force;       /* 1: replace an existing pack folder */
} engram_pack_opts;

/* Pack every table of src into out_dir. Rows come from fn, or (fn NULL) from src's mapped tensors. The
 * folder appears whole or not at all: files are written into a temporary sibling, synced and renamed
 * into place; any failure removes it. An existing out_dir must be empty, or be a pack and o->force set. */
int engram_pack(const engram_source *src, const char *out_dir, const engram_pack_opts *o, engram_rows_fn fn,
                void *ctx);

/* Check a pack folder: the manifest, every file's header and size, every block's hash; with src also
 * that the pack holds exactly src's layers, made from these tensors, with byte-identical rows (src's
 * tables must be mapped). A line per file goes to report (NULL: none). Returns 0 good, 1 bad (the error
 * message names the first bad file and block), 2 an I/O error. */
int engram_verify(const char *dir, const engram_source *src, FILE *report);

/* Total bytes engram_pack writes for src (for space checks and the benchmark). */
int engram_pack_bytes(const engram_source *src, const engram_pack_opts *o, uint64_t *bytes);

#endif
