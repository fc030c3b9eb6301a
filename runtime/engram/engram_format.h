/* The packed Engram row file (docs/engram.md "File format"), shared by the packer, the verifier and the
 * store. One file per (Engram layer, rank): a 4096-byte header, then fixed-size blocks of records. A
 * record is one table row: its width e4m3 values, then its width/32 e8m0 scales (256 + 8 = 264 B for
 * the release). A block holds block_rows records from offset 0, zero padding, and in its last 16 bytes
 * the xxh3-128 of everything before them, seeded by the block's place (engram_block_seed), so a block
 * read from disk checks itself and a block copied to the wrong place fails. block_bytes is a multiple
 * of 4096, so every block read is one aligned O_DIRECT read and no record straddles a block.
 * All integers are little-endian. */
#ifndef DSK_ENGRAM_FORMAT_H
#define DSK_ENGRAM_FORMAT_H

#include "runtime/engram/engram_store.h"

#include <stddef.h>
#include <stdint.h>

#define ENGRAM_MAGIC "DSENGRAM"
#define ENGRAM_FORMAT_VERSION 1u
#define ENGRAM_HEADER_BYTES 4096u /* the header is one aligned page */
#define ENGRAM_ALIGN 4096u        /* O_DIRECT alignment of offsets, lengths and buffers */
#define ENGRAM_HASH_BYTES 16u     /* xxh3-128 at the end of every block and of the header */
#define ENGRAM_MAX_BLOCK_BYTES (1u << 20)
#define ENGRAM_MANIFEST "engram-pack.json"
#define ENGRAM_MANIFEST_MAX_BYTES (1u << 20) /* a manifest lists at most ENGRAM_MAX_LAYERS layers: ~1 KB */
#define ENGRAM_MAX_TP 8
/* Rows a table may have (2^40 rows of 264 bytes: 290 TB), so that no header's or manifest's figures
 * overflow the file size or the rank split formed from them */
#define ENGRAM_MAX_TABLE_ROWS (UINT64_C(1) << 40)

/* The decoded header. The byte offsets of each field are in engram_format.c and docs/engram.md. */
typedef struct {
    uint32_t version;
    uint32_t header_bytes;   /* 4096 */
    uint32_t block_bytes;    /* multiple of 4096 */
    uint32_t block_rows;     /* records per block */
    uint32_t record_bytes;   /* width + width/32 */
    uint32_t width;          /* e4m3 values per row */
    uint32_t slot;           /* the layer's position in engram_layer_ids */
    uint32_t layer_id;       /* the backbone layer Engram runs before */
    uint32_t tp;             /* ranks the table's rows are split over */
    uint32_t rank;           /* this file's rank */
    uint64_t table_rows;     /* rows of the whole table */
    uint64_t row_first;      /* first table row in this file: rank · ceil(table_rows / tp) */
    uint64_t row_count;      /* rows in this file */
    uint64_t block_count;    /* ceil(row_count / block_rows) */
    uint64_t data_offset;    /* first block: header_bytes */
    uint8_t source_id[16];   /* identity of the checkpoint tensors (engram_source_id) */
    engram_tensor_ref weight, scale;
} engram_header;

/* Set t->source_id from t->weight and t->scale: xxh3-128 over "dskit-engram-source-1", then for each ref
 * its name with its NUL, offset and nbytes (u64 LE), shard_header and sample. */
void engram_table_identify(engram_table *t);

/* Encode into 4096 bytes (sets the header hash); decode checks magic, version, header hash and that
 * the fields are consistent with one another, naming path in the message. */
void engram_header_encode(const engram_header *h, uint8_t out[ENGRAM_HEADER_BYTES]);
int engram_header_decode(const uint8_t in[ENGRAM_HEADER_BYTES], const char *path, engram_header *h);

/* Expected file size: data_offset + block_count · block_bytes. */
uint64_t engram_file_bytes(const engram_header *h);

/* Seed of a block's hash: the low 64 bits of the source id XOR the table row of the block's first
 * record (the layer is in the source id: its tensor names differ). */
uint64_t engram_block_seed(const uint8_t source_id[16], uint64_t first_row);
/* Write the block's hash into its last 16 bytes. */
void engram_block_seal(uint8_t *block, uint32_t block_bytes, uint64_t seed);
/* 1 if the block's stored hash matches its contents. */
int engram_block_ok(const uint8_t *block, uint32_t block_bytes, uint64_t seed);

/* Records per block when the caller asks for block_rows (0: as many as fit one 4096-byte page), and
 * the block size that holds them and the hash: round_up(rows · record + 16, 4096). Fails when a block
 * would exceed ENGRAM_MAX_BLOCK_BYTES or a record does not fit a page. */
int engram_block_geometry(uint32_t record_bytes, long block_rows, uint32_t *rows_out, uint32_t *bytes_out);

/* Rows of rank r when table_rows are split over tp ranks: [r·c, min(rows, (r+1)·c)), c = ceil(rows/tp). */
void engram_rank_rows(uint64_t table_rows, uint32_t tp, uint32_t rank, uint64_t *first, uint64_t *count);

/* "layer{layer_id}.rank{rank}of{tp}.engram". */
void engram_file_name(char *buf, size_t cap, uint32_t layer_id, uint32_t rank, uint32_t tp);

/* xxh3-128 as 32 hex digits (high 64 bits first), and back. */
void engram_hex128(const uint8_t id[16], char out[33]);
int engram_parse_hex128(const char *s, uint8_t id[16]);

/* The manifest engram-pack.json: what the folder holds, so that a missing file is named. */
typedef struct {
    uint32_t tp, block_rows, block_bytes;
    int n_layers;
    struct {
        uint32_t slot, layer_id, width;
        uint64_t rows;
        uint8_t source_id[16];
    } layer[ENGRAM_MAX_LAYERS];
} engram_manifest;

int engram_manifest_write(const char *dir, const engram_manifest *m);
int engram_manifest_read(const char *dir, engram_manifest *m);
/* Check that a file's header belongs where the manifest puts it (layer i, rank r). */
int engram_header_matches(const engram_header *h, const engram_manifest *m, int i, uint32_t rank, const char *path);
/* Check that a file's header was made from the table src (same rows, width and source identity). */
int engram_header_matches_source(const engram_header *h, const engram_table *src, const char *path);

#endif
