#include "manifest/archive.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* zstd 12: 1.6 MB for the sm_90 kit in 0.5 s; 19 saves 0.5 MB but takes 8 s on every build */
enum { KIT_ZSTD_LEVEL = 12 };

const kit_entry *kit_entries_find(const kit_entries *a, const char *path)
{
    int i = name_table_find(&a->index, path);
    return i < 0 ? NULL : &a->e[i];
}

/* Take ownership of (path, data) as the next entry; on failure both are freed. */
static int entries_push(kit_entries *a, char *path, unsigned char *data, size_t size, const char *archive)
{
    kit_entry *e = dsk_realloc(a->e, sizeof(kit_entry) * (size_t)(a->n + 1));
    if (e)
        a->e = e;
    int prior = -1;
    if (!e || name_table_insert(&a->index, path, a->n, &prior)) {
        free(path);
        free(data);
        return -1;
    }
    if (prior >= 0) {
        dsk_err("%s: entry %s appears twice", archive, path);
        free(path);
        free(data);
        return -1;
    }
    a->e[a->n++] = (kit_entry){path, data, size};
    return 0;
}

int kit_entries_add(kit_entries *a, const char *path, const void *data, size_t size)
{
    char *p = dsk_strdup(path);
    unsigned char *d = dsk_malloc(size ? size : 1);
    if (!p || !d) {
        free(p);
        free(d);
        return -1;
    }
    if (size)
        memcpy(d, data, size);
    return entries_push(a, p, d, size, "kit");
}

void kit_entries_free(kit_entries *a)
{
    for (int i = 0; i < a->n; i++) {
        free(a->e[i].path);
        free(a->e[i].data);
    }
    free(a->e);
    name_table_free(&a->index);
    a->e = NULL;
    a->n = 0;
}

/* Exactly one zstd layer over the data (libarchive counts the raw bytes as a filter of its own): an
 * uncompressed tar or a kit compressed twice is not a kit. */
static int check_filters(struct archive *ar, const char *name)
{
    int n = archive_filter_count(ar);
    if (n == 2 && archive_filter_code(ar, 0) == ARCHIVE_FILTER_ZSTD)
        return 0;
    if (n < 2)
        return dsk_err("%s: not zstd-compressed (a kit is one zstd-compressed tar)", name);
    return dsk_err("%s: compressed %d times (a kit is one zstd-compressed tar)", name, n - 1);
}

/* Read the entries of an opened archive, within the limits of archive.h. */
static int read_entries(struct archive *ar, const char *name, kit_entries *out)
{
    if (check_filters(ar, name))
        return -1;
    size_t total = 0;
    for (;;) {
        struct archive_entry *ent;
        int r = archive_read_next_header(ar, &ent);
        if (r == ARCHIVE_EOF)
            return 0;
        if (r != ARCHIVE_OK)
            return dsk_err("%s: corrupt or truncated archive: %s", name, archive_error_string(ar));
        const char *path = archive_entry_pathname(ent);
        if (!path)
            return dsk_err("%s: an entry has no path", name);
        if (strlen(path) > KIT_MAX_PATH)
            return dsk_err("%s: entry %.64s...: path longer than %d bytes", name, path, KIT_MAX_PATH);
        if (archive_entry_filetype(ent) != AE_IFREG || archive_entry_hardlink(ent))
            return dsk_err("%s: entry %s is not a regular file", name, path);
        if (out->n == KIT_MAX_ENTRIES)
            return dsk_err("%s: entry %s: more than %d entries (the limit of a kit)", name, path, KIT_MAX_ENTRIES);
        int64_t size = archive_entry_size(ent);
        if (size < 0 || (uint64_t)size > KIT_MAX_ENTRY_BYTES)
            return dsk_err("%s: entry %s: size %lld is more than the %u bytes an entry may have", name, path,
                           (long long)size, KIT_MAX_ENTRY_BYTES);
        if ((uint64_t)size > KIT_MAX_TOTAL_BYTES - total)
            return dsk_err("%s: entry %s: the entries so far (%zu bytes) and its %lld bytes are more than the %u "
                           "bytes a kit may hold",
                           name, path, total, (long long)size, KIT_MAX_TOTAL_BYTES);
        total += (size_t)size;
        char *p = dsk_strdup(path);
        unsigned char *buf = dsk_malloc(size ? (size_t)size : 1);
        if (!p || !buf) {
            free(p);
            free(buf);
            return -1;
        }
        la_ssize_t got = size ? archive_read_data(ar, buf, (size_t)size) : 0;
        if (got != size) {
            dsk_err("%s: corrupt or truncated archive: entry %s: %s", name, path,
                    got < 0 ? archive_error_string(ar) : "short read");
            free(p);
            free(buf);
            return -1;
        }
        if (entries_push(out, p, buf, (size_t)size, name))
            return -1;
    }
}

static struct archive *reader_new(const char *name)
{
    struct archive *ar = archive_read_new();
    if (!ar) {
        dsk_err("%s: cannot create an archive reader (out of memory)", name);
        return NULL;
    }
    if (archive_read_support_filter_zstd(ar) != ARCHIVE_OK || archive_read_support_format_tar(ar) != ARCHIVE_OK) {
        dsk_err("%s: libarchive lacks zstd or tar support: %s", name, archive_error_string(ar));
        archive_read_free(ar);
        return NULL;
    }
    return ar;
}

int kit_archive_read_memory(const void *data, size_t len, const char *name, kit_entries *out)
{
    *out = (kit_entries){0};
    struct archive *ar = reader_new(name);
    if (!ar)
        return -1;
    int rc = -1;
    if (archive_read_open_memory(ar, data, len) != ARCHIVE_OK)
        dsk_err("%s: cannot read the archive (corrupt, truncated, or not a tar.zst): %s", name, archive_error_string(ar));
    else
        rc = read_entries(ar, name, out);
    archive_read_free(ar);
    if (rc)
        kit_entries_free(out);
    return rc;
}

int kit_archive_read_file(const char *path, kit_entries *out)
{
    *out = (kit_entries){0};
    struct stat st;
    int fd = dsk_open_regular(path, &st);
    if (fd < 0)
        return KIT_READ_IO_ERROR;
    struct archive *ar = reader_new(path);
    if (!ar) {
        close(fd);
        return -1;
    }
    int rc = -1;
    if (archive_read_open_fd(ar, fd, 1 << 16) != ARCHIVE_OK)
        dsk_err("%s: cannot read the archive (corrupt, truncated, or not a tar.zst): %s", path, archive_error_string(ar));
    else
        rc = read_entries(ar, path, out);
    archive_read_free(ar);
    close(fd);
    if (rc)
        kit_entries_free(out);
    return rc;
}

static la_ssize_t write_cb(struct archive *ar, void *ctx, const void *buf, size_t n)
{
    (void)ar;
    return dsk_buf_append(ctx, buf, n) ? -1 : (la_ssize_t)n;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const kit_entry *)a)->path, ((const kit_entry *)b)->path);
}

int kit_archive_write(const char *path, const kit_entries *in)
{
    size_t total = 0;
    if (in->n > KIT_MAX_ENTRIES)
        return dsk_err("%s: %d entries are more than a kit may have (%d)", path, in->n, KIT_MAX_ENTRIES);
    for (int i = 0; i < in->n; i++) {
        if (in->e[i].size > KIT_MAX_ENTRY_BYTES || in->e[i].size > KIT_MAX_TOTAL_BYTES - total)
            return dsk_err("%s: entry %s (%zu bytes) is past the size limits of a kit (%u per entry, %u in all)",
                           path, in->e[i].path, in->e[i].size, KIT_MAX_ENTRY_BYTES, KIT_MAX_TOTAL_BYTES);
        total += in->e[i].size;
    }
    kit_entry *sorted = dsk_malloc(sizeof(kit_entry) * (size_t)(in->n ? in->n : 1));
    if (!sorted)
        return -1;
    memcpy(sorted, in->e, sizeof(kit_entry) * (size_t)in->n);
    qsort(sorted, (size_t)in->n, sizeof(kit_entry), cmp_entry);

    dsk_buf out = {0};
    struct archive *ar = archive_write_new();
    struct archive_entry *ent = archive_entry_new();
    int rc = -1;
    char level[8];
    snprintf(level, sizeof level, "%d", KIT_ZSTD_LEVEL);
    if (!ar || !ent) {
        dsk_err("cannot create an archive writer (out of memory)");
        goto done;
    }
    if (archive_write_add_filter_zstd(ar) != ARCHIVE_OK ||
        archive_write_set_filter_option(ar, "zstd", "compression-level", level) != ARCHIVE_OK ||
        archive_write_set_format_ustar(ar) != ARCHIVE_OK ||
        archive_write_set_bytes_in_last_block(ar, 1) != ARCHIVE_OK ||
        archive_write_open(ar, &out, NULL, write_cb, NULL) != ARCHIVE_OK) {
        dsk_err("%s: cannot set up the archive writer: %s", path, archive_error_string(ar));
        goto done;
    }
    for (int i = 0; i < in->n; i++) {
        archive_entry_clear(ent);
        archive_entry_set_pathname(ent, sorted[i].path);
        archive_entry_set_filetype(ent, AE_IFREG);
        archive_entry_set_perm(ent, 0644);
        archive_entry_set_size(ent, (la_int64_t)sorted[i].size);
        archive_entry_set_mtime(ent, 0, 0);
        archive_entry_set_uid(ent, 0);
        archive_entry_set_gid(ent, 0);
        if (archive_write_header(ar, ent) != ARCHIVE_OK ||
            archive_write_data(ar, sorted[i].data, sorted[i].size) != (la_ssize_t)sorted[i].size) {
            dsk_err("%s: cannot write entry %s: %s", path, sorted[i].path, archive_error_string(ar));
            goto done;
        }
    }
    if (archive_write_close(ar) != ARCHIVE_OK) {
        dsk_err("%s: cannot finish the archive: %s", path, archive_error_string(ar));
        goto done;
    }
    rc = dsk_write_file_atomic(path, out.data, out.len);
done:
    if (ent)
        archive_entry_free(ent);
    if (ar)
        archive_write_free(ar);
    dsk_buf_free(&out);
    free(sorted);
    return rc;
}
