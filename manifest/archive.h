/* The kit archive as a list of in-memory files (libarchive, tar + zstd). Writing is reproducible:
 * entries sorted by path, ustar headers with mtime 0, uid/gid 0, mode 0644, no owner names, a fixed
 * zstd level; the file is written to a temporary name and renamed, so a failure leaves nothing.
 *
 * Reading is bounded (docs/kit-format.md "Limits"): a kit is exactly one zstd-compressed tar of at most
 * KIT_MAX_ENTRIES regular files, each at most KIT_MAX_ENTRY_BYTES, all together at most
 * KIT_MAX_TOTAL_BYTES; the reader stops at the first entry past a limit, naming it. */
#ifndef DSK_ARCHIVE_H
#define DSK_ARCHIVE_H

#include "runtime/weights/name_table.h"

#include <stddef.h>

#define KIT_MAX_ENTRIES 8192
#define KIT_MAX_ENTRY_BYTES (64u << 20)
#define KIT_MAX_TOTAL_BYTES (256u << 20)
#define KIT_MAX_PATH 1024 /* bytes of an entry's path */

typedef struct {
    char *path;
    unsigned char *data;
    size_t size;
} kit_entry;

/* Entries are added only through kit_entries_add or the readers: the index points at their paths. */
typedef struct {
    kit_entry *e;
    int n;
    name_table index; /* path -> position in e */
} kit_entries;

/* kit_archive_read_file's result when the file itself cannot be read (missing, not a regular file, an
 * I/O error), as opposed to -1, a file that is not a good archive. */
#define KIT_READ_IO_ERROR (-2)

/* Read every regular file of a tar.zst held in memory. `name` names the archive in messages. A
 * truncated or corrupt archive, anything but one zstd layer over a tar, a duplicate path, a
 * non-regular entry or an entry past the limits is an error. */
int kit_archive_read_memory(const void *data, size_t len, const char *name, kit_entries *out);
/* The same, streamed from a file (the compressed bytes are never held whole). Returns 0, -1 (not a
 * good archive) or KIT_READ_IO_ERROR. */
int kit_archive_read_file(const char *path, kit_entries *out);
/* Write entries (their order does not matter) to path, reproducibly and atomically. Entries past the
 * reading limits are refused, so a kit that is written can be read. */
int kit_archive_write(const char *path, const kit_entries *in);
/* The entry with this path, or NULL. O(1). */
const kit_entry *kit_entries_find(const kit_entries *a, const char *path);
/* Append a copy of (path, data); a path already present is an error. */
int kit_entries_add(kit_entries *a, const char *path, const void *data, size_t size);
void kit_entries_free(kit_entries *a);

#endif
