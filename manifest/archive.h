/* The kit archive as a list of in-memory files (libarchive, tar + zstd). Writing is reproducible:
 * entries sorted by path, ustar headers with mtime 0, uid/gid 0, mode 0644, no owner names, a fixed
 * zstd level; the file is written to a temporary name and renamed, so a failure leaves nothing. */
#ifndef DSK_ARCHIVE_H
#define DSK_ARCHIVE_H

#include <stddef.h>

typedef struct {
    char *path;
    unsigned char *data;
    size_t size;
} kit_entry;

typedef struct {
    kit_entry *e;
    int n;
} kit_entries;

/* Read every regular file of a tar.zst held in memory. `name` names the archive in messages. A
 * truncated or corrupt archive, a duplicate path or a non-regular entry is an error. */
int kit_archive_read_memory(const void *data, size_t len, const char *name, kit_entries *out);
/* Read a whole archive file, then the above. */
int kit_archive_read_file(const char *path, kit_entries *out);
/* Write entries (their order does not matter) to path, reproducibly and atomically. */
int kit_archive_write(const char *path, const kit_entries *in);
const kit_entry *kit_entries_find(const kit_entries *a, const char *path);
/* Append a copy of (path, data). */
int kit_entries_add(kit_entries *a, const char *path, const void *data, size_t size);
void kit_entries_free(kit_entries *a);

#endif
