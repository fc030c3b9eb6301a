/* The Engram row store (docs/engram.md): serves the table rows a round needs, from the mapped checkpoint
 * (`host`) or from packed files on a local disk read with Linux AIO and O_DIRECT (`nvme:DIR`), through a
 * hot-row cache. The CPU and GPU backends both use it: a round submits every row it needs as soon as its
 * tokens are known and waits per Engram layer just before the layer runs. Rows come back as records
 * (width e4m3 values, then width/32 e8m0 scales: 264 B for the release) in the order asked; the caller
 * dequantises.
 *
 * Thread-safety: one thread drives a store (open, fetches, drop_cache, close); several fetches may be
 * open at once on it (a verify round's rows and the drafted tokens' rows). engram_store_counters may be
 * called from any thread at any time (the server's /metrics). Two stores share nothing. */
#ifndef DSK_ENGRAM_STORE_H
#define DSK_ENGRAM_STORE_H

#include "runtime/model/engram_layout.h" /* ENGRAM_MAX_LAYERS */
#include "runtime/weights/safetensors.h"

#include <stddef.h>
#include <stdint.h>

/* ---- Where the rows come from: the checkpoint's Engram tables ---- */

/* One checkpoint tensor as far as its identity goes. */
typedef struct {
    char name[128];            /* "layers.1.engram.embed.weight" */
    uint64_t offset, nbytes;   /* its data's byte range in its shard file */
    uint8_t shard_header[16];  /* xxh3-128 of the shard's 8-byte length and JSON header */
    uint8_t sample[16];        /* xxh3-128 of 64 pieces of 4 KiB spread over its data (first, last, between) */
} engram_tensor_ref;

typedef struct {
    int slot;                  /* position in engram_layer_ids (the `layer` of engram_hash) */
    int layer_id;              /* backbone layer Engram runs before */
    int64_t rows;              /* table rows */
    int width;                 /* e4m3 values per row (256); a record is width + width/32 bytes */
    const uint8_t *values;     /* [rows][width] e4m3 in the mapping; NULL when not mapped (a synthetic pack) */
    const uint8_t *scales;     /* [rows][width/32] e8m0 */
    engram_tensor_ref weight, scale;
    uint8_t source_id[16];     /* xxh3-128 over both refs: what a pack's header must carry */
} engram_table;

typedef struct {
    int n_layers;
    engram_table table[ENGRAM_MAX_LAYERS]; /* [slot] */
} engram_source;

/* The Engram tables of an open checkpoint: layers.{id}.engram.embed.weight F8_E4M3 [rows, width] and
 * .scale F8_E8M0 [rows, width/32] for each backbone id in layer_ids (config order). Reads each shard's
 * header and samples the tensor data for the identity (a few MB at most). The tables point into ckpt,
 * which must stay open while they are used. */
int engram_source_from_checkpoint(const st_set *ckpt, const int *layer_ids, int n_layers, engram_source *out);
/* The same from a model folder's config.json engram_layer_ids (checked against config rows and width). */
int engram_source_from_model(const st_set *ckpt, const char *model_dir, engram_source *out);

/* Bytes of one record of a table of this width. */
static inline int engram_record_bytes(int width)
{
    return width + width / 32;
}

/* ---- The store ---- */

typedef struct engram_store engram_store;

typedef struct {
    size_t cache_bytes;  /* hot-row cache capacity in bytes (whole records; 0: no cache). CLOCK, keyed by
                          * (layer slot, row); `nvme` only: `host` rows are already in memory */
    int tp, rank;        /* tp 0: serve every row (each rank gathers all its rows itself, model.md §6.2).
                          * tp >= 1: serve only rank `rank`'s rows of a tp-way split and answer the others
                          * with the pad row (values 0, scales 1.0), as REF's TP split does before its
                          * all-reduce; `nvme` then opens only that rank's files (tp must be the pack's) */
    int slow_read_ms;    /* a disk read slower than this is counted and logged (0: 50 ms) */
    int queue_depth;     /* reads in flight at most (0: 512); a larger round is read in waves */
    void *io_mem;        /* optional caller memory for the O_DIRECT reads (e.g. pinned host memory): 4096-
                          * aligned, io_mem_bytes >= queue_depth · block bytes (4096 by default). NULL: the
                          * store allocates it. The caller keeps it alive until engram_store_close. */
    size_t io_mem_bytes;
    int verify_blocks;   /* 1: read every block and check its hash at open (slow: the whole table). 0: each
                          * block is checked when it is read, before any of its rows is used or cached */
} engram_store_opts;

/* placement: "host" (rows from src's mapped tensors; src required) or "nvme:DIR" (the packed files in
 * DIR; src optional: when given, every layer of src must be in the pack, made from exactly these tensors).
 * Every file's header is read and checked: a missing, truncated or foreign file (another checkpoint,
 * another layer, a damaged header) is refused naming the file. A filesystem refusing O_DIRECT (tmpfs)
 * is read through the page cache on the same AIO path, said once on stderr. The test-only environment
 * variable DSKIT_ENGRAM_FAULT (docs/engram.md "Faults") is read here. */
int engram_store_open(const char *placement, const engram_source *src, const engram_store_opts *opts,
                      engram_store **out);
/* Ends every fetch still open (their handles become invalid), waits (bounded, 10 s) for reads still in
 * flight, then frees everything. NULL is fine. */
void engram_store_close(engram_store *s);

int engram_store_layers(const engram_store *s);                 /* Engram layers (slots) */
int64_t engram_store_rows(const engram_store *s, int slot);      /* table rows of a layer */
int engram_store_record_bytes(const engram_store *s, int slot);  /* bytes of one record */
const char *engram_store_placement(const engram_store *s);       /* "host" or "nvme:DIR" */

/* Forget the hot-row cache and drop the pack files from the page cache (posix_fadvise DONTNEED):
 * the next reads are cold. */
int engram_store_drop_cache(engram_store *s);

typedef struct {
    uint64_t rows;          /* rows served (all fetches, all sources) */
    uint64_t reads;         /* block reads completed from disk */
    uint64_t read_bytes;    /* bytes read from disk */
    uint64_t cache_hits;    /* rows served from the hot-row cache */
    uint64_t cache_misses;  /* rows that needed a disk read */
    uint64_t slow_reads;    /* reads over slow_read_ms */
    uint64_t errors;        /* failed reads: I/O error, short read, bad block hash */
    uint64_t timeouts;      /* fetch waits that ran out of time */
} engram_counters;

/* A consistent-enough snapshot (each counter is read atomically); any thread. */
void engram_store_counters(const engram_store *s, engram_counters *out);

/* ---- One round's fetch ---- */

typedef struct engram_fetch engram_fetch;

/* What one layer of a round needs: n absolute table rows (for n positions × 24 columns, position-major,
 * as engram_hash writes them) and n · record_bytes bytes of caller memory for the records (pinned host
 * memory for the GPU backend). n = 0 (rows and dst NULL): the layer is not fetched. */
typedef struct {
    const int64_t *rows;
    int64_t n;
    uint8_t *dst;
} engram_fetch_layer;

#define ENGRAM_MAX_FETCH_ROWS (1 << 22) /* rows per layer per fetch */

/* Start a round: layers[slot] for every slot of the store. Cached rows are copied at once; every other
 * row's block read is submitted now (up to queue_depth in flight; the rest as reads complete). A row out
 * of range fails here and nothing is started. rows and dst must stay valid until engram_fetch_end. */
int engram_fetch_begin(engram_store *s, const engram_fetch_layer *layers, engram_fetch **out);
/* Wait until every row of layer `slot` is in its dst, at most timeout_ms (>= 0; 0 only checks). Fails
 * when the time runs out (the fetch stays valid: wait again or end it), or when a read of the layer
 * failed (I/O error, short read, bad block hash: the message names the file, block, row and errno; the
 * failed rows' records are zeros; later waits give the same error; other layers and later fetches are
 * unaffected). `host` copies the layer's rows here. */
int engram_fetch_wait(engram_fetch *f, int slot, int timeout_ms);
/* Submit and reap without blocking; returns the number of layers still pending. */
int engram_fetch_poll(engram_fetch *f);
/* Finish the fetch (waited or not): reads still in flight are abandoned to the store, which reaps them
 * later. NULL is fine. */
void engram_fetch_end(engram_fetch *f);

#endif
