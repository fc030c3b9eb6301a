/* The checkpoint's Engram tables and their identity. The identity ties a pack to the checkpoint it was
 * made from without reading 200 GB: the shard header's hash covers every tensor's name, dtype, shape and
 * offsets; 64 sampled pieces of the data tell apart two checkpoints of the same shapes (two mkmodel
 * seeds, a re-quantised release). It is an identity, not an integrity check: the block hashes guard the
 * packed bytes, and `dskit engram verify --model` compares every row. */
#include "runtime/common/error.h"
#include "runtime/engram/engram_format.h"
#include "runtime/model/config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define SAMPLE_PIECES 64
#define SAMPLE_BYTES 4096

static void canon(XXH128_hash_t h, uint8_t out[16])
{
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(out, c.digest, 16);
}

static int read_full(int fd, void *buf, size_t n, off_t off, const char *path)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, off + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return dsk_err_errno("%s: read at offset %lld", path, (long long)(off + (off_t)done));
        if (r == 0)
            return dsk_err("%s: ends at %lld bytes, inside its header", path, (long long)(off + (off_t)done));
        done += (size_t)r;
    }
    return 0;
}

/* Hash the shard's 8-byte length and JSON header, and find name's data offset in the file. */
static int shard_ref(const char *file, const char *name, engram_tensor_ref *r)
{
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return dsk_err_errno("cannot open %s", file);
    uint8_t len8[8];
    char *hdr = NULL;
    json_t *root = NULL;
    int rc = -1;
    if (read_full(fd, len8, 8, 0, file))
        goto done;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++)
        hlen |= (uint64_t)len8[i] << (8 * i);
    if (hlen == 0 || hlen > (100u << 20)) { /* st_open accepted this file, so this is a changed file */
        dsk_err("%s: header length %llu is out of range", file, (unsigned long long)hlen);
        goto done;
    }
    if (!(hdr = dsk_malloc(8 + hlen)))
        goto done;
    memcpy(hdr, len8, 8);
    if (read_full(fd, hdr + 8, hlen, 8, file))
        goto done;
    canon(XXH3_128bits(hdr, 8 + hlen), r->shard_header);
    json_error_t jerr;
    root = json_loadb(hdr + 8, hlen, 0, &jerr);
    json_t *t = root ? json_object_get(root, name) : NULL;
    json_t *offs = t ? json_object_get(t, "data_offsets") : NULL;
    if (!offs || !json_is_integer(json_array_get(offs, 0))) {
        dsk_err("%s: no data_offsets for %s in its header", file, name);
        goto done;
    }
    r->offset = 8 + hlen + (uint64_t)json_integer_value(json_array_get(offs, 0));
    rc = 0;
done:
    json_decref(root);
    free(hdr);
    close(fd);
    return rc;
}

/* 64 pieces spread evenly over the data, the first at 0 and the last at the end: the xxh3-128 of the 64
 * pieces' own xxh3-128s. */
static void sample_hash(const uint8_t *data, uint64_t n, uint8_t out[16])
{
    uint8_t sums[SAMPLE_PIECES][16];
    uint64_t piece = n < SAMPLE_BYTES ? n : SAMPLE_BYTES;
    for (uint64_t i = 0; i < SAMPLE_PIECES; i++) {
        uint64_t off = i == SAMPLE_PIECES - 1 ? n - piece : (n - piece) / (SAMPLE_PIECES - 1) * i;
        canon(XXH3_128bits(data + off, piece), sums[i]);
    }
    canon(XXH3_128bits(sums, sizeof sums), out);
}

static int tensor_ref(const st_tensor *t, engram_tensor_ref *r)
{
    memset(r, 0, sizeof *r);
    if (strlen(t->name) >= sizeof r->name)
        return dsk_err("tensor name %s is too long for a pack header", t->name);
    snprintf(r->name, sizeof r->name, "%s", t->name);
    r->nbytes = t->nbytes;
    if (shard_ref(t->file, t->name, r))
        return -1;
    sample_hash(t->data, t->nbytes, r->sample);
    return 0;
}

/* A ref's bytes for the identity: name with its NUL, offset and nbytes (u64 LE), shard_header, sample. */
static size_t ref_bytes(const engram_tensor_ref *r, uint8_t *p)
{
    size_t n = strlen(r->name) + 1;
    memcpy(p, r->name, n);
    for (int i = 0; i < 8; i++) {
        p[n + i] = (uint8_t)(r->offset >> (8 * i));
        p[n + 8 + i] = (uint8_t)(r->nbytes >> (8 * i));
    }
    memcpy(p + n + 16, r->shard_header, 16);
    memcpy(p + n + 32, r->sample, 16);
    return n + 48;
}

void engram_table_identify(engram_table *t)
{
    static const char tag[] = "dskit-engram-source-1";
    uint8_t buf[sizeof tag + 2 * (sizeof t->weight.name + 48)];
    size_t n = sizeof tag;
    memcpy(buf, tag, n);
    n += ref_bytes(&t->weight, buf + n);
    n += ref_bytes(&t->scale, buf + n);
    canon(XXH3_128bits(buf, n), t->source_id);
}

int engram_source_from_checkpoint(const st_set *ckpt, const int *layer_ids, int n_layers, engram_source *out)
{
    memset(out, 0, sizeof *out);
    if (n_layers < 1 || n_layers > ENGRAM_MAX_LAYERS)
        return dsk_err("%d Engram layers; between 1 and %d are supported", n_layers, ENGRAM_MAX_LAYERS);
    for (int i = 0; i < n_layers; i++) {
        char wname[96], sname[96];
        snprintf(wname, sizeof wname, "layers.%d.engram.embed.weight", layer_ids[i]);
        snprintf(sname, sizeof sname, "layers.%d.engram.embed.scale", layer_ids[i]);
        const st_tensor *w, *sc;
        int64_t wshape[2] = {-1, -1};
        if (st_require(ckpt, wname, ST_F8_E4M3, 2, wshape, &w))
            return dsk_err_ctx("Engram table of layer %d", layer_ids[i]);
        int64_t rows = w->shape[0], width = w->shape[1];
        if (rows < 1 || width < 32 || width % 32 || engram_record_bytes((int)width) + ENGRAM_HASH_BYTES > ENGRAM_ALIGN)
            return dsk_err("tensor %s: shape [%lld, %lld]: rows must be positive and the width a multiple of 32 "
                           "up to 3936", wname, (long long)rows, (long long)width);
        int64_t sshape[2] = {rows, width / 32};
        if (st_require(ckpt, sname, ST_F8_E8M0, 2, sshape, &sc))
            return dsk_err_ctx("Engram scales of layer %d", layer_ids[i]);
        engram_table *t = &out->table[i];
        t->slot = i;
        t->layer_id = layer_ids[i];
        t->rows = rows;
        t->width = (int)width;
        t->values = w->data;
        t->scales = sc->data;
        if (tensor_ref(w, &t->weight) || tensor_ref(sc, &t->scale))
            return -1;
        engram_table_identify(t);
    }
    out->n_layers = n_layers;
    return 0;
}

int engram_source_from_model(const st_set *ckpt, const char *model_dir, engram_source *out)
{
    model_config cfg;
    if (model_config_load(model_dir, &cfg))
        return -1;
    if (cfg.n_engram_layers < 1)
        return dsk_err("%s: config.json has no Engram layers (engram_layer_ids is empty)", model_dir);
    if (engram_source_from_checkpoint(ckpt, cfg.engram_layer_ids, cfg.n_engram_layers, out))
        return dsk_err_ctx("%s", model_dir);
    for (int i = 0; i < out->n_layers; i++)
        if (out->table[i].rows != cfg.engram_num_embeddings[i] || out->table[i].width != cfg.engram_head_dim)
            return dsk_err("%s: %s is [%lld, %d] but config.json says engram_num_embeddings[%d] = %lld and "
                           "engram_head_dim = %d", model_dir, out->table[i].weight.name, (long long)out->table[i].rows,
                           out->table[i].width, i, (long long)cfg.engram_num_embeddings[i], cfg.engram_head_dim);
    return 0;
}
