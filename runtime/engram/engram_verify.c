/* `dskit engram verify`: every file of a pack, every block hash, and with a checkpoint every row. Files
 * are read sequentially in 4 MiB pieces through the page cache (with a sequential hint, and dropped
 * afterwards: verifying 200 GB must not evict the machine's cache). */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/engram/engram_format.h"
#include "runtime/engram/engram_pack.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VERIFY_CHUNK (4u << 20)

enum { GOOD = 0, BAD = 1, IO = 2 };

/* Read exactly n bytes at off; returns GOOD, BAD (the file ends first) or IO. */
static int read_at(int fd, uint8_t *buf, size_t n, uint64_t off, const char *path)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            dsk_err_errno("%s: read at offset %llu", path, (unsigned long long)(off + done));
            return IO;
        }
        if (r == 0) {
            dsk_err("%s: truncated: it ends at %llu bytes", path, (unsigned long long)(off + done));
            return BAD;
        }
        done += (size_t)r;
    }
    return GOOD;
}

/* The blocks of one file: hashes, and with t (mapped) the rows themselves. */
static int verify_blocks(int fd, const engram_header *h, const engram_table *t, const char *path, uint8_t *buf)
{
    uint32_t per = VERIFY_CHUNK / h->block_bytes;
    for (uint64_t b = 0; b < h->block_count; b += per) {
        uint32_t nb = (uint32_t)(h->block_count - b < per ? h->block_count - b : per);
        int rc = read_at(fd, buf, (size_t)nb * h->block_bytes, h->data_offset + b * h->block_bytes, path);
        if (rc)
            return rc;
        for (uint32_t k = 0; k < nb; k++) {
            const uint8_t *blk = buf + (size_t)k * h->block_bytes;
            uint64_t first = h->row_first + (b + k) * h->block_rows, n = h->block_rows;
            if (first + n > h->row_first + h->row_count)
                n = h->row_first + h->row_count - first;
            if (!engram_block_ok(blk, h->block_bytes, engram_block_seed(h->source_id, first))) {
                dsk_err("%s: block %llu (rows %llu..%llu, offset %llu): its xxh3-128 does not match: the block is "
                        "damaged", path, (unsigned long long)(b + k), (unsigned long long)first,
                        (unsigned long long)(first + n - 1), (unsigned long long)(h->data_offset + (b + k) * h->block_bytes));
                return BAD;
            }
            if (!t)
                continue;
            size_t w = h->width, ns = w / 32;
            for (uint64_t i = 0; i < n; i++) {
                const uint8_t *rec = blk + i * h->record_bytes;
                if (memcmp(rec, t->values + (first + i) * w, w) || memcmp(rec + w, t->scales + (first + i) * ns, ns)) {
                    dsk_err("%s: block %llu: row %llu differs from the checkpoint's %s", path,
                            (unsigned long long)(b + k), (unsigned long long)(first + i), t->weight.name);
                    return BAD;
                }
            }
        }
    }
    return GOOD;
}

static int verify_file(const char *dir, const engram_manifest *m, int i, uint32_t rank, const engram_table *t,
                       uint8_t *buf, FILE *report)
{
    char name[64], path[4096];
    engram_file_name(name, sizeof name, m->layer[i].layer_id, rank, m->tp);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    errno = 0;
    int fd = dsk_open_regular(path, &st); /* never blocks on a FIFO; anything but a regular file is refused */
    if (fd < 0) {
        int missing = errno == ENOENT;
        if (missing)
            dsk_err("%s: missing (the manifest lists it)", path);
        return missing ? BAD : IO;
    }
    engram_header h;
    memset(&h, 0, sizeof h);
    int rc = read_at(fd, buf, ENGRAM_HEADER_BYTES, 0, path);
    if (rc)
        goto done;
    rc = BAD;
    if (engram_header_decode(buf, path, &h) || engram_header_matches(&h, m, i, rank, path) ||
        (t && engram_header_matches_source(&h, t, path)))
        goto done;
    if (fstat(fd, &st)) {
        dsk_err_errno("cannot stat %s", path);
        rc = IO;
        goto done;
    }
    if ((uint64_t)st.st_size != engram_file_bytes(&h)) {
        dsk_err("%s: %s: %llu bytes, its header says %llu", path, (uint64_t)st.st_size < engram_file_bytes(&h) ?
                "truncated" : "trailing bytes", (unsigned long long)st.st_size, (unsigned long long)engram_file_bytes(&h));
        goto done;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); /* hints: a refusal changes nothing but speed */
    rc = verify_blocks(fd, &h, t, path, buf);
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
done:
    close(fd);
    if (report) {
        if (rc == GOOD)
            fprintf(report, "ok   %s: layer %u rank %u of %u, rows [%llu, +%llu), %llu blocks%s\n", name, h.layer_id,
                    h.rank, h.tp, (unsigned long long)h.row_first, (unsigned long long)h.row_count,
                    (unsigned long long)h.block_count, t ? ", rows equal the checkpoint's" : "");
        else
            fprintf(report, "%s  %s\n", rc == BAD ? "BAD" : "ERR", dsk_err_msg());
    }
    return rc;
}

/* The manifest against the checkpoint: the same layers, rows and widths (identities are checked per file,
 * so that the message names the file). */
static int check_layers(const char *dir, const engram_manifest *m, const engram_source *src)
{
    if (m->n_layers != src->n_layers)
        return dsk_err("%s: the pack has %d Engram layers, the checkpoint %d", dir, m->n_layers, src->n_layers);
    for (int i = 0; i < m->n_layers; i++) {
        const engram_table *t = &src->table[i];
        if (m->layer[i].layer_id != (uint32_t)t->layer_id || m->layer[i].rows != (uint64_t)t->rows ||
            m->layer[i].width != (uint32_t)t->width)
            return dsk_err("%s: slot %d is layer %u with %llu rows of width %u; the checkpoint's is layer %d with %lld "
                           "rows of width %d", dir, i, m->layer[i].layer_id, (unsigned long long)m->layer[i].rows,
                           m->layer[i].width, t->layer_id, (long long)t->rows, t->width);
    }
    return 0;
}

int engram_verify(const char *dir, const engram_source *src, FILE *report)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        dsk_err_errno("cannot open the pack folder %s", dir);
        return IO;
    }
    if (!S_ISDIR(st.st_mode)) {
        dsk_err("%s: not a folder", dir);
        return IO;
    }
    for (int i = 0; src && i < src->n_layers; i++)
        if (!src->table[i].values || !src->table[i].scales) {
            dsk_err("verify: layer %d's checkpoint table is not mapped; its rows cannot be compared",
                    src->table[i].layer_id);
            return IO;
        }
    engram_manifest m;
    if (engram_manifest_read(dir, &m))
        return BAD;
    if (src && check_layers(dir, &m, src))
        return BAD;
    uint8_t *buf;
    if (posix_memalign((void **)&buf, ENGRAM_ALIGN, VERIFY_CHUNK + ENGRAM_MAX_BLOCK_BYTES)) {
        dsk_err("out of memory for the verify buffer");
        return IO;
    }
    int worst = GOOD;
    char first[2048] = "";
    for (int i = 0; i < m.n_layers; i++)
        for (uint32_t r = 0; r < m.tp; r++) {
            int rc = verify_file(dir, &m, i, r, src ? &src->table[i] : NULL, buf, report);
            if (rc != GOOD && !first[0])
                snprintf(first, sizeof first, "%s", dsk_err_msg());
            if (rc > worst)
                worst = rc;
        }
    free(buf);
    if (worst)
        dsk_err("%s", first);
    return worst;
}
