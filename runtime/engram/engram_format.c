/* Packed Engram file header, block hashes and the manifest (layout: docs/engram.md "File format"). */
#include "runtime/engram/engram_format.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Header field offsets. The layout is the format: change it only with ENGRAM_FORMAT_VERSION. */
enum {
    H_MAGIC = 0,
    H_VERSION = 8,
    H_HEADER_BYTES = 12,
    H_BLOCK_BYTES = 16,
    H_BLOCK_ROWS = 20,
    H_RECORD_BYTES = 24,
    H_WIDTH = 28,
    H_SLOT = 32,
    H_LAYER_ID = 36,
    H_TP = 40,
    H_RANK = 44,
    H_TABLE_ROWS = 48,
    H_ROW_FIRST = 56,
    H_ROW_COUNT = 64,
    H_BLOCK_COUNT = 72,
    H_DATA_OFFSET = 80,
    H_SOURCE_ID = 88,
    H_WEIGHT = 104, /* tensor ref: name[128], offset u64, nbytes u64, shard_header[16], sample[16] */
    H_SCALE = 280,
    H_REF_BYTES = 176,
    H_HASH = ENGRAM_HEADER_BYTES - ENGRAM_HASH_BYTES,
};

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The canonical (big-endian, high half first) bytes of an xxh3-128. */
static void hash128(const void *data, size_t len, uint64_t seed, uint8_t out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_withSeed(data, len, seed));
    memcpy(out, c.digest, 16);
}

static void put_ref(uint8_t *p, const engram_tensor_ref *r)
{
    memset(p, 0, 128);
    memcpy(p, r->name, strnlen(r->name, 127));
    put64(p + 128, r->offset);
    put64(p + 136, r->nbytes);
    memcpy(p + 144, r->shard_header, 16);
    memcpy(p + 160, r->sample, 16);
}

static int get_ref(const uint8_t *p, engram_tensor_ref *r)
{
    if (!memchr(p, 0, 128))
        return -1;
    memcpy(r->name, p, 128);
    r->offset = get64(p + 128);
    r->nbytes = get64(p + 136);
    memcpy(r->shard_header, p + 144, 16);
    memcpy(r->sample, p + 160, 16);
    return 0;
}

void engram_header_encode(const engram_header *h, uint8_t out[ENGRAM_HEADER_BYTES])
{
    memset(out, 0, ENGRAM_HEADER_BYTES);
    memcpy(out + H_MAGIC, ENGRAM_MAGIC, 8);
    put32(out + H_VERSION, h->version);
    put32(out + H_HEADER_BYTES, h->header_bytes);
    put32(out + H_BLOCK_BYTES, h->block_bytes);
    put32(out + H_BLOCK_ROWS, h->block_rows);
    put32(out + H_RECORD_BYTES, h->record_bytes);
    put32(out + H_WIDTH, h->width);
    put32(out + H_SLOT, h->slot);
    put32(out + H_LAYER_ID, h->layer_id);
    put32(out + H_TP, h->tp);
    put32(out + H_RANK, h->rank);
    put64(out + H_TABLE_ROWS, h->table_rows);
    put64(out + H_ROW_FIRST, h->row_first);
    put64(out + H_ROW_COUNT, h->row_count);
    put64(out + H_BLOCK_COUNT, h->block_count);
    put64(out + H_DATA_OFFSET, h->data_offset);
    memcpy(out + H_SOURCE_ID, h->source_id, 16);
    put_ref(out + H_WEIGHT, &h->weight);
    put_ref(out + H_SCALE, &h->scale);
    hash128(out, H_HASH, 0, out + H_HASH);
}

int engram_header_decode(const uint8_t in[ENGRAM_HEADER_BYTES], const char *path, engram_header *h)
{
    if (memcmp(in + H_MAGIC, ENGRAM_MAGIC, 8))
        return dsk_err("%s: not a packed Engram file (no %s magic)", path, ENGRAM_MAGIC);
    h->version = get32(in + H_VERSION);
    if (h->version != ENGRAM_FORMAT_VERSION)
        return dsk_err("%s: format version %u; this dskit reads version %u (re-pack with dskit engram pack)",
                       path, h->version, ENGRAM_FORMAT_VERSION);
    uint8_t sum[16];
    hash128(in, H_HASH, 0, sum);
    if (memcmp(sum, in + H_HASH, 16))
        return dsk_err("%s: the header is damaged (its xxh3-128 does not match)", path);
    h->header_bytes = get32(in + H_HEADER_BYTES);
    h->block_bytes = get32(in + H_BLOCK_BYTES);
    h->block_rows = get32(in + H_BLOCK_ROWS);
    h->record_bytes = get32(in + H_RECORD_BYTES);
    h->width = get32(in + H_WIDTH);
    h->slot = get32(in + H_SLOT);
    h->layer_id = get32(in + H_LAYER_ID);
    h->tp = get32(in + H_TP);
    h->rank = get32(in + H_RANK);
    h->table_rows = get64(in + H_TABLE_ROWS);
    h->row_first = get64(in + H_ROW_FIRST);
    h->row_count = get64(in + H_ROW_COUNT);
    h->block_count = get64(in + H_BLOCK_COUNT);
    h->data_offset = get64(in + H_DATA_OFFSET);
    memcpy(h->source_id, in + H_SOURCE_ID, 16);
    if (get_ref(in + H_WEIGHT, &h->weight) || get_ref(in + H_SCALE, &h->scale))
        return dsk_err("%s: a tensor name in the header is not terminated", path);
    /* The fields must agree with one another; a header that passed its hash but does not was written by
     * a broken packer, and reading by it would go out of the file's bounds. */
    uint64_t first, count;
    if (h->header_bytes != ENGRAM_HEADER_BYTES || h->data_offset != ENGRAM_HEADER_BYTES)
        return dsk_err("%s: header size %u / data offset %llu, expected %u", path, h->header_bytes,
                       (unsigned long long)h->data_offset, ENGRAM_HEADER_BYTES);
    if (h->width == 0 || h->width % 32 || h->record_bytes != h->width + h->width / 32)
        return dsk_err("%s: row width %u with record size %u (expected width a multiple of 32 and record "
                       "width + width/32)", path, h->width, h->record_bytes);
    if (h->block_bytes == 0 || h->block_bytes % ENGRAM_ALIGN || h->block_bytes > ENGRAM_MAX_BLOCK_BYTES ||
        h->block_rows == 0 || (uint64_t)h->block_rows * h->record_bytes + ENGRAM_HASH_BYTES > h->block_bytes)
        return dsk_err("%s: %u records of %u bytes do not fit blocks of %u bytes", path, h->block_rows,
                       h->record_bytes, h->block_bytes);
    if (h->tp == 0 || h->tp > ENGRAM_MAX_TP || h->rank >= h->tp)
        return dsk_err("%s: rank %u of %u", path, h->rank, h->tp);
    if (h->table_rows == 0 || h->table_rows > ENGRAM_MAX_TABLE_ROWS)
        return dsk_err("%s: %llu table rows (at least 1, at most %llu)", path, (unsigned long long)h->table_rows,
                       (unsigned long long)ENGRAM_MAX_TABLE_ROWS);
    engram_rank_rows(h->table_rows, h->tp, h->rank, &first, &count);
    if (h->row_first != first || h->row_count != count)
        return dsk_err("%s: rows [%llu, +%llu) but rank %u of %u of %llu rows has [%llu, +%llu)", path,
                       (unsigned long long)h->row_first, (unsigned long long)h->row_count, h->rank, h->tp,
                       (unsigned long long)h->table_rows, (unsigned long long)first, (unsigned long long)count);
    if (h->block_count != (h->row_count + h->block_rows - 1) / h->block_rows)
        return dsk_err("%s: %llu blocks for %llu rows of %u per block", path, (unsigned long long)h->block_count,
                       (unsigned long long)h->row_count, h->block_rows);
    return 0;
}

uint64_t engram_file_bytes(const engram_header *h)
{
    return h->data_offset + h->block_count * h->block_bytes;
}

uint64_t engram_block_seed(const uint8_t source_id[16], uint64_t first_row)
{
    uint64_t lo = 0;
    for (int i = 8; i < 16; i++) /* canonical bytes: the low half is the second 8, big-endian */
        lo = (lo << 8) | source_id[i];
    return lo ^ first_row;
}

void engram_block_seal(uint8_t *block, uint32_t block_bytes, uint64_t seed)
{
    hash128(block, block_bytes - ENGRAM_HASH_BYTES, seed, block + block_bytes - ENGRAM_HASH_BYTES);
}

int engram_block_ok(const uint8_t *block, uint32_t block_bytes, uint64_t seed)
{
    uint8_t sum[16];
    hash128(block, block_bytes - ENGRAM_HASH_BYTES, seed, sum);
    return !memcmp(sum, block + block_bytes - ENGRAM_HASH_BYTES, 16);
}

int engram_block_geometry(uint32_t record_bytes, long block_rows, uint32_t *rows_out, uint32_t *bytes_out)
{
    if (record_bytes == 0 || record_bytes + ENGRAM_HASH_BYTES > ENGRAM_ALIGN)
        return dsk_err("a record of %u bytes does not fit a %u-byte block with its hash", record_bytes,
                       ENGRAM_ALIGN);
    if (block_rows == 0)
        block_rows = (ENGRAM_ALIGN - ENGRAM_HASH_BYTES) / record_bytes;
    uint64_t need = (uint64_t)block_rows * record_bytes + ENGRAM_HASH_BYTES;
    if (block_rows < 0 || need > ENGRAM_MAX_BLOCK_BYTES)
        return dsk_err("--block-rows %ld: blocks of %ld records of %u bytes exceed %u bytes", block_rows,
                       block_rows, record_bytes, ENGRAM_MAX_BLOCK_BYTES);
    *rows_out = (uint32_t)block_rows;
    *bytes_out = (uint32_t)((need + ENGRAM_ALIGN - 1) / ENGRAM_ALIGN * ENGRAM_ALIGN);
    return 0;
}

void engram_rank_rows(uint64_t table_rows, uint32_t tp, uint32_t rank, uint64_t *first, uint64_t *count)
{
    uint64_t chunk = (table_rows + tp - 1) / tp;
    uint64_t lo = (uint64_t)rank * chunk, hi = lo + chunk;
    if (lo > table_rows)
        lo = table_rows;
    if (hi > table_rows)
        hi = table_rows;
    *first = lo;
    *count = hi - lo;
}

void engram_file_name(char *buf, size_t cap, uint32_t layer_id, uint32_t rank, uint32_t tp)
{
    snprintf(buf, cap, "layer%u.rank%uof%u.engram", layer_id, rank, tp);
}

void engram_hex128(const uint8_t id[16], char out[33])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", id[i]);
}

int engram_parse_hex128(const char *s, uint8_t id[16])
{
    if (strlen(s) != 32)
        return -1;
    for (int i = 0; i < 16; i++) {
        unsigned v;
        char two[3] = {s[2 * i], s[2 * i + 1], 0};
        if (sscanf(two, "%2x", &v) != 1)
            return -1;
        id[i] = (uint8_t)v;
    }
    return 0;
}

int engram_manifest_write(const char *dir, const engram_manifest *m)
{
    json_t *layers = json_array(), *root = NULL;
    int rc = -1;
    if (!layers)
        return dsk_err("%s: out of memory", ENGRAM_MANIFEST);
    for (int i = 0; i < m->n_layers; i++) {
        char hex[33];
        engram_hex128(m->layer[i].source_id, hex);
        json_t *files = json_array();
        for (uint32_t r = 0; files && r < m->tp; r++) {
            char name[64];
            engram_file_name(name, sizeof name, m->layer[i].layer_id, r, m->tp);
            json_array_append_new(files, json_string(name));
        }
        json_t *l = json_pack("{s:i, s:i, s:I, s:i, s:s, s:o}", "slot", (int)m->layer[i].slot, "layer_id",
                              (int)m->layer[i].layer_id, "rows", (json_int_t)m->layer[i].rows, "width",
                              (int)m->layer[i].width, "source_id", hex, "files", files);
        if (!l || json_array_append_new(layers, l)) {
            dsk_err("%s: out of memory", ENGRAM_MANIFEST);
            goto done;
        }
    }
    root = json_pack("{s:s, s:i, s:i, s:i, s:i, s:o}", "format", "dskit-engram-pack", "version",
                     (int)ENGRAM_FORMAT_VERSION, "tp", (int)m->tp, "block_rows", (int)m->block_rows,
                     "block_bytes", (int)m->block_bytes, "layers", layers);
    layers = NULL;
    char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
    dsk_buf b = {0};
    if (!text || dsk_buf_printf(&b, "%s\n", text)) {
        free(text);
        dsk_err("%s: out of memory", ENGRAM_MANIFEST);
        goto done;
    }
    free(text);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, ENGRAM_MANIFEST);
    rc = dsk_write_file_atomic(path, b.data, b.len);
    dsk_buf_free(&b);
done:
    json_decref(layers);
    json_decref(root);
    return rc;
}

int engram_manifest_read(const char *dir, engram_manifest *m)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, ENGRAM_MANIFEST);
    /* read bounded and without blocking on a FIFO (json_load_file did both) */
    if (!dsk_file_exists(path))
        return dsk_err("%s: missing (not a packed Engram folder? make one with dskit engram pack)", path);
    char *text;
    size_t len;
    if (dsk_read_file_max(path, ENGRAM_MANIFEST_MAX_BYTES, "Engram pack manifest", &text, &len))
        return -1;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!root)
        return dsk_err("%s: line %d: %s", path, jerr.line, jerr.text);
    memset(m, 0, sizeof *m);
    const char *format = NULL;
    json_t *layers = NULL;
    int version = 0, tp = 0, rows = 0, bytes = 0, rc = -1;
    if (json_unpack_ex(root, &jerr, 0, "{s:s, s:i, s:i, s:i, s:i, s:o}", "format", &format, "version", &version,
                       "tp", &tp, "block_rows", &rows, "block_bytes", &bytes, "layers", &layers)) {
        dsk_err("%s: %s", path, jerr.text);
        goto done;
    }
    if (strcmp(format, "dskit-engram-pack") || version != (int)ENGRAM_FORMAT_VERSION) {
        dsk_err("%s: format '%s' version %d, expected dskit-engram-pack version %u", path, format, version,
                ENGRAM_FORMAT_VERSION);
        goto done;
    }
    if (tp < 1 || tp > ENGRAM_MAX_TP || rows < 1 || bytes < 1 || !json_is_array(layers) ||
        json_array_size(layers) < 1 || json_array_size(layers) > ENGRAM_MAX_LAYERS) {
        dsk_err("%s: tp %d, block_rows %d, block_bytes %d or %zu layers out of range", path, tp, rows, bytes,
                json_array_size(layers));
        goto done;
    }
    m->tp = (uint32_t)tp;
    m->block_rows = (uint32_t)rows;
    m->block_bytes = (uint32_t)bytes;
    m->n_layers = (int)json_array_size(layers);
    for (int i = 0; i < m->n_layers; i++) {
        int slot, layer_id, width;
        json_int_t n;
        const char *hex;
        if (json_unpack_ex(json_array_get(layers, (size_t)i), &jerr, 0, "{s:i, s:i, s:I, s:i, s:s}", "slot", &slot,
                           "layer_id", &layer_id, "rows", &n, "width", &width, "source_id", &hex)) {
            dsk_err("%s: layers[%d]: %s", path, i, jerr.text);
            goto done;
        }
        if (slot != i || layer_id < 0 || n < 1 || (uint64_t)n > ENGRAM_MAX_TABLE_ROWS || width < 32 ||
            engram_parse_hex128(hex, m->layer[i].source_id)) {
            dsk_err("%s: layers[%d]: slot %d, layer_id %d, rows %lld, width %d or source_id '%s' is invalid",
                    path, i, slot, layer_id, (long long)n, width, hex);
            goto done;
        }
        m->layer[i].slot = (uint32_t)slot;
        m->layer[i].layer_id = (uint32_t)layer_id;
        m->layer[i].rows = (uint64_t)n;
        m->layer[i].width = (uint32_t)width;
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

int engram_header_matches(const engram_header *h, const engram_manifest *m, int i, uint32_t rank, const char *path)
{
    if (h->slot != m->layer[i].slot || h->layer_id != m->layer[i].layer_id || h->tp != m->tp || h->rank != rank)
        return dsk_err("%s: the header says layer %u (slot %u) rank %u of %u; the manifest puts layer %u (slot %u) "
                       "rank %u of %u here", path, h->layer_id, h->slot, h->rank, h->tp, m->layer[i].layer_id,
                       m->layer[i].slot, rank, m->tp);
    if (h->table_rows != m->layer[i].rows || h->width != m->layer[i].width || h->block_rows != m->block_rows ||
        h->block_bytes != m->block_bytes)
        return dsk_err("%s: %llu rows of width %u in blocks of %u rows / %u bytes; the manifest says %llu rows of "
                       "width %u in blocks of %u / %u", path, (unsigned long long)h->table_rows, h->width,
                       h->block_rows, h->block_bytes, (unsigned long long)m->layer[i].rows, m->layer[i].width,
                       m->block_rows, m->block_bytes);
    if (memcmp(h->source_id, m->layer[i].source_id, 16))
        return dsk_err("%s: its source id differs from the manifest's: the folder mixes files of two packs", path);
    return 0;
}

/* Which part of two identities differs, for the message. */
static const char *ref_diff(const engram_tensor_ref *a, const engram_tensor_ref *b)
{
    if (strcmp(a->name, b->name))
        return "tensor name";
    if (a->offset != b->offset || a->nbytes != b->nbytes)
        return "data offset or size";
    if (memcmp(a->shard_header, b->shard_header, 16))
        return "shard header";
    if (memcmp(a->sample, b->sample, 16))
        return "data sample";
    return NULL;
}

int engram_header_matches_source(const engram_header *h, const engram_table *src, const char *path)
{
    if (h->layer_id != (uint32_t)src->layer_id || h->slot != (uint32_t)src->slot ||
        h->table_rows != (uint64_t)src->rows || h->width != (uint32_t)src->width)
        return dsk_err("%s: holds layer %u (slot %u) with %llu rows of width %u; the checkpoint's layer %d (slot %d) "
                       "has %lld rows of width %d", path, h->layer_id, h->slot, (unsigned long long)h->table_rows,
                       h->width, src->layer_id, src->slot, (long long)src->rows, src->width);
    if (memcmp(h->source_id, src->source_id, 16)) {
        const char *w = ref_diff(&h->weight, &src->weight), *s = ref_diff(&h->scale, &src->scale);
        char a[33], b[33];
        engram_hex128(h->source_id, a);
        engram_hex128(src->source_id, b);
        return dsk_err("%s: was packed from another checkpoint (source id %s, this checkpoint's %s; %s %s "
                       "differs); re-pack it with dskit engram pack", path, a, b, w ? src->weight.name : src->scale.name,
                       w ? w : s ? s : "identity");
    }
    return 0;
}
