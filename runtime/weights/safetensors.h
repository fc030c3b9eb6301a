/* Safetensors checkpoints: a checked, mmap'd reader over all shards of a checkpoint, and a streaming,
 * deterministic, atomic writer (the synthetic-checkpoint generator uses it). Format and checks:
 * docs/weights.md. Weights are mapped read-only and pointed into, never copied. */
#ifndef DSK_SAFETENSORS_H
#define DSK_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    ST_BOOL,
    ST_U8,
    ST_I8,
    ST_I16,
    ST_U16,
    ST_I32,
    ST_U32,
    ST_I64,
    ST_U64,
    ST_F16,
    ST_BF16,
    ST_F32,
    ST_F64,
    ST_F8_E4M3,
    ST_F8_E5M2,
    ST_F8_E8M0,
} st_dtype;

/* ST_MAX_HEADER_BYTES bounds a shard's JSON header and the shard index (docs/weights.md): parsing
 * costs about 20 bytes of memory per header byte, and the largest real header is a few MB. */
enum { ST_DTYPE_COUNT = ST_F8_E8M0 + 1, ST_MAX_DIMS = 8, ST_MAX_HEADER_BYTES = 32 << 20 };

/* Bytes per element. */
size_t st_dtype_size(st_dtype dtype);
/* The safetensors spelling ("F16", "F8_E4M3", ...); "?" for a value outside the enum. */
const char *st_dtype_name(st_dtype dtype);
/* Parse a safetensors spelling; -1 (no error set) if unknown. */
int st_dtype_parse(const char *name, st_dtype *out);

typedef struct {
    const char *name;        /* owned by the set; inference-style (st_name_canonical) */
    const char *stored_name; /* as the file spells it: differs from name for an HF-style vision name */
    st_dtype dtype;
    int ndim;                /* 0 for a scalar */
    int64_t shape[ST_MAX_DIMS];
    const void *data;        /* inside the read-only mapping; alignment is whatever the file gives */
    size_t nbytes;           /* = product(shape) * st_dtype_size(dtype) */
    const char *file;        /* path of the shard holding it */
} st_tensor;

/* The inference-style name of a stored name (vision.md §4): the HF-style vision names `model.vision.*`,
 * `model.aligner.*`, `model.image_start`, `model.image_end` and `model.image_newline` lose their `model.`
 * prefix; every other name is its own. Returns a suffix of stored (nothing is allocated). */
const char *st_name_canonical(const char *stored);

/* "[a, b, c]" into buf (for messages); a negative extent (a wildcard) prints as "*". */
const char *st_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

typedef struct st_set st_set;

/* Open a checkpoint. path is a .safetensors file, or a folder holding model.safetensors.index.json
 * (then exactly the shards it names, and index and shards must list the same tensors), or a folder
 * without index holding model.safetensors or several *.safetensors (all of them, in name order).
 * Every header is checked (docs/weights.md); a tensor name appearing twice is an error. */
int st_open(const char *path, st_set **out);
/* A checkpoint of one shard held in memory (name is used in messages): the same checks as st_open.
 * The bytes are the caller's and must outlive the set. */
int st_open_memory(const void *data, size_t len, const char *name, st_set **out);
void st_close(st_set *set);

/* The tensor called name, or NULL (no error set). O(1). */
const st_tensor *st_get(const st_set *set, const char *name);
/* Look up name and check it: dtype, ndim and shape must match. ndim < 0 skips the shape check; a
 * negative entry in shape matches any extent. The error names the tensor and what differs. */
int st_require(const st_set *set, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
               const st_tensor **out);
/* Tensors in shard order, and within a shard in file (data offset) order. */
int st_count(const st_set *set);
const st_tensor *st_at(const st_set *set, int i);

/* Writer: tensors go to dir/model-0000i-of-0000N.safetensors in the order added, a new shard starting
 * when the current one's data would exceed shard_bytes (0 = no limit; a tensor larger than the limit
 * gets a shard of its own), plus dir/model.safetensors.index.json. Data is streamed to temporary files
 * as it is added; close assembles the shards, syncs and renames them into place; any failure (or
 * abort) removes everything written. Same calls give the same bytes. After a failed call only
 * st_writer_close (which then fails and cleans up) or st_writer_abort remain valid. */
typedef struct st_writer st_writer;

int st_writer_open(const char *dir, uint64_t shard_bytes, st_writer **out);
/* Add one tensor: nbytes must equal product(shape) * st_dtype_size(dtype); ndim 0 is a scalar. */
int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
                  const void *data, size_t nbytes);
/* Add one tensor in pieces: begin, then write calls whose sizes sum to product(shape) * dtype size,
 * then end. For tensors too large to hold in memory at once. */
int st_writer_begin(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape);
int st_writer_write(st_writer *w, const void *data, size_t nbytes);
int st_writer_end(st_writer *w);
/* Finish: write the shards and the index into place, free w (also on failure). */
int st_writer_close(st_writer *w);
/* Discard everything written so far and free w. */
void st_writer_abort(st_writer *w);

#endif
