/* Safetensors writer. A shard's header can only be written once its tensor list is complete, so each
 * shard's data is streamed to a temporary data file first; when the shard is full it is assembled
 * (header, then the data copied in-kernel) into a second temporary file and the data file is
 * removed, so at most one shard's data exists twice. Close renames the assembled shards to their
 * final names (which include the shard count) and writes the index last. */
#include "runtime/weights/safetensors.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/weights/name_table.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *name;   /* as given */
    char *quoted; /* as a JSON string literal, quotes included */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset; /* within its shard's data section */
    int shard;
} wentry;

struct st_writer {
    char *dir;
    uint64_t shard_bytes; /* 0 = no limit */
    int failed;           /* a call failed: only abort/close remain, and close fails */
    wentry *entries;      /* [count] in the order added */
    int count, cap;
    name_table names;
    char **shard_tmp;    /* [n_shards] assembled shards awaiting their final names */
    int n_shards;        /* shards assembled so far */
    int cur_first;       /* first entry of the shard being filled */
    int data_fd;         /* its data file, -1 when none is open */
    char *data_tmp;
    uint64_t data_bytes; /* bytes in the data file */
    int open_entry;      /* entry being written by begin/write/end, or -1 */
    uint64_t written;    /* bytes of it written so far */
};

static int write_all(int fd, const void *data, size_t n, const char *path)
{
    const char *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return dsk_err_errno("cannot write %s", path);
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A new empty file dir/.NAME-XXXXXX.tmp; its path goes to *path. */
static int make_temp(const char *dir, const char *name, char **path)
{
    size_t n = strlen(dir) + strlen(name) + 20;
    char *p = dsk_malloc(n);
    if (!p)
        return -1;
    snprintf(p, n, "%s/.%s-XXXXXX.tmp", dir, name);
    int fd = mkstemps(p, 4);
    if (fd < 0) {
        dsk_err_errno("cannot create a temporary file in %s", dir);
        free(p);
        return -1;
    }
    *path = p;
    return fd;
}

int st_writer_open(const char *dir, uint64_t shard_bytes, st_writer **out)
{
    *out = NULL;
    if (dsk_mkdirs(dir) != 0)
        return -1;
    st_writer *w = dsk_calloc(1, sizeof *w);
    if (!w)
        return -1;
    w->dir = dsk_strdup(dir);
    if (!w->dir) {
        free(w);
        return -1;
    }
    w->shard_bytes = shard_bytes;
    w->data_fd = -1;
    w->open_entry = -1;
    *out = w;
    return 0;
}

/* The shard header: __metadata__ first, then the shard's tensors in the order added, padded with
 * spaces so the data section starts at a multiple of 8. */
static int shard_header(const st_writer *w, int first, int end, dsk_buf *h)
{
    if (dsk_buf_printf(h, "{\"__metadata__\":{\"format\":\"pt\"}") != 0)
        return -1;
    for (int i = first; i < end; i++) {
        const wentry *e = &w->entries[i];
        if (dsk_buf_printf(h, ",%s:{\"dtype\":\"%s\",\"shape\":[", e->quoted, st_dtype_name(e->dtype)))
            return -1;
        for (int d = 0; d < e->ndim; d++)
            if (dsk_buf_printf(h, d ? ",%lld" : "%lld", (long long)e->shape[d]) != 0)
                return -1;
        if (dsk_buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)e->offset,
                           (unsigned long long)(e->offset + e->nbytes)) != 0)
            return -1;
    }
    if (dsk_buf_append(h, "}", 1) != 0)
        return -1;
    while (h->len % 8)
        if (dsk_buf_append(h, " ", 1) != 0)
            return -1;
    return 0;
}

/* Copy the data file (from its start) to the end of out_fd: in-kernel where possible. */
static int copy_data(st_writer *w, int out_fd, const char *out_path)
{
    if (lseek(w->data_fd, 0, SEEK_SET) != 0)
        return dsk_err_errno("cannot rewind %s", w->data_tmp);
    uint64_t left = w->data_bytes;
    int in_kernel = 1;
    char buf[1 << 14];
    while (left) {
        size_t chunk = left > (1u << 30) ? (1u << 30) : (size_t)left;
        ssize_t n;
        if (in_kernel) {
            n = copy_file_range(w->data_fd, NULL, out_fd, NULL, chunk, 0);
            if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
                in_kernel = 0;
                continue;
            }
        } else {
            n = read(w->data_fd, buf, chunk < sizeof buf ? chunk : sizeof buf);
            if (n > 0 && write_all(out_fd, buf, (size_t)n, out_path) != 0)
                return -1;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? dsk_err_errno("cannot copy %s into %s", w->data_tmp, out_path)
                         : dsk_err("%s ended early while copying it into %s", w->data_tmp, out_path);
        left -= (uint64_t)n;
    }
    return 0;
}

/* Assemble the shard being filled (entries cur_first .. count) into a temporary shard file. */
static int finish_shard(st_writer *w)
{
    char **grown = dsk_realloc(w->shard_tmp, ((size_t)w->n_shards + 1) * sizeof *grown);
    if (!grown)
        return -1;
    w->shard_tmp = grown;
    dsk_buf h = {0};
    if (shard_header(w, w->cur_first, w->count, &h) != 0) {
        dsk_buf_free(&h);
        return -1;
    }
    char *path;
    int fd = make_temp(w->dir, "shard", &path);
    if (fd < 0) {
        dsk_buf_free(&h);
        return -1;
    }
    w->shard_tmp[w->n_shards++] = path;
    uint64_t len = htole64((uint64_t)h.len);
    int rc = 0;
    if (fchmod(fd, 0644) != 0) /* mkstemp makes 0600; a checkpoint is meant to be shared */
        rc = dsk_err_errno("cannot set the mode of %s", path);
    if (rc == 0)
        rc = write_all(fd, &len, 8, path);
    if (rc == 0)
        rc = write_all(fd, h.data, h.len, path);
    dsk_buf_free(&h);
    if (rc == 0 && w->data_fd >= 0)
        rc = copy_data(w, fd, path);
    if (rc == 0 && fsync(fd) != 0)
        rc = dsk_err_errno("cannot sync %s", path);
    if (close(fd) != 0 && rc == 0)
        rc = dsk_err_errno("cannot close %s", path);
    if (w->data_fd >= 0) {
        close(w->data_fd);
        unlink(w->data_tmp);
        free(w->data_tmp);
        w->data_fd = -1;
        w->data_tmp = NULL;
    }
    w->data_bytes = 0;
    w->cur_first = w->count;
    return rc;
}

/* Validate and record a new entry, starting a new shard first if it would not fit the current one. */
static int new_entry(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape)
{
    if ((unsigned)dtype >= ST_DTYPE_COUNT)
        return dsk_err("tensor '%s': invalid dtype %d", name, (int)dtype);
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return dsk_err("tensor '%s': %d dimensions (0..%d supported)", name, ndim, ST_MAX_DIMS);
    if (!*name || !strcmp(name, "__metadata__"))
        return dsk_err("tensor name '%s' is not allowed", name);
    uint64_t nbytes = st_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return dsk_err("tensor '%s': negative extent %lld in dimension %d", name,
                           (long long)shape[d], d);
        if (__builtin_mul_overflow(nbytes, (uint64_t)shape[d], &nbytes) || nbytes > (uint64_t)SIZE_MAX)
            return dsk_err("tensor '%s': size overflows", name);
    }
    if (name_table_find(&w->names, name) >= 0)
        return dsk_err("tensor '%s' added twice", name);
    json_t *js = json_string(name);
    char *quoted = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
    json_decref(js);
    if (!quoted)
        return dsk_err("tensor name '%s' is not valid UTF-8", name);
    if (w->count == w->cap) {
        int cap = w->cap ? 2 * w->cap : 256;
        wentry *grown = dsk_realloc(w->entries, (size_t)cap * sizeof *grown);
        if (!grown) {
            free(quoted);
            return -1;
        }
        w->entries = grown;
        w->cap = cap;
    }
    if (w->count > w->cur_first && w->shard_bytes && w->data_bytes + nbytes > w->shard_bytes &&
        finish_shard(w) != 0) {
        free(quoted);
        return -1;
    }
    if (w->data_fd < 0 && (w->data_fd = make_temp(w->dir, "data", &w->data_tmp)) < 0) {
        free(quoted);
        return -1;
    }
    wentry *e = &w->entries[w->count];
    *e = (wentry){.quoted = quoted, .dtype = dtype, .ndim = ndim, .nbytes = nbytes,
                  .offset = w->data_bytes, .shard = w->n_shards};
    if (ndim)
        memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
    int prior;
    if (!(e->name = dsk_strdup(name)) || name_table_insert(&w->names, e->name, w->count, &prior) != 0) {
        free(e->name);
        free(quoted);
        return -1;
    }
    w->open_entry = w->count++;
    w->written = 0;
    return 0;
}

int st_writer_begin(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape)
{
    if (w->failed)
        return dsk_err("safetensors writer for %s: an earlier call failed", w->dir);
    if (w->open_entry >= 0)
        return dsk_err("tensor '%s' begun while '%s' is still open", name, w->entries[w->open_entry].name);
    if (new_entry(w, name, dtype, ndim, shape) != 0) {
        w->failed = 1;
        return dsk_err_ctx("writing %s", w->dir);
    }
    return 0;
}

int st_writer_write(st_writer *w, const void *data, size_t nbytes)
{
    if (w->failed)
        return dsk_err("safetensors writer for %s: an earlier call failed", w->dir);
    if (w->open_entry < 0)
        return dsk_err("safetensors writer for %s: write without begin", w->dir);
    const wentry *e = &w->entries[w->open_entry];
    if (nbytes > e->nbytes - w->written) {
        w->failed = 1;
        return dsk_err("tensor '%s': %llu bytes written, more than its %llu bytes", e->name,
                       (unsigned long long)(w->written + nbytes), (unsigned long long)e->nbytes);
    }
    if (write_all(w->data_fd, data, nbytes, w->data_tmp) != 0) {
        w->failed = 1;
        return dsk_err_ctx("tensor '%s'", e->name);
    }
    w->written += nbytes;
    w->data_bytes += nbytes;
    return 0;
}

int st_writer_end(st_writer *w)
{
    if (w->failed)
        return dsk_err("safetensors writer for %s: an earlier call failed", w->dir);
    if (w->open_entry < 0)
        return dsk_err("safetensors writer for %s: end without begin", w->dir);
    const wentry *e = &w->entries[w->open_entry];
    if (w->written != e->nbytes) {
        w->failed = 1;
        return dsk_err("tensor '%s': %llu bytes written, its shape and dtype need %llu", e->name,
                       (unsigned long long)w->written, (unsigned long long)e->nbytes);
    }
    w->open_entry = -1;
    return 0;
}

int st_writer_add(st_writer *w, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
                  const void *data, size_t nbytes)
{
    if (st_writer_begin(w, name, dtype, ndim, shape) != 0)
        return -1;
    if (nbytes != w->entries[w->open_entry].nbytes) {
        w->failed = 1;
        return dsk_err("tensor '%s': %zu bytes given, its shape and dtype need %llu", name, nbytes,
                       (unsigned long long)w->entries[w->open_entry].nbytes);
    }
    if (st_writer_write(w, data, nbytes) != 0)
        return -1;
    return st_writer_end(w);
}

static char *shard_name(int i, int n)
{
    char buf[64];
    snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, n);
    return dsk_strdup(buf);
}

static char *index_path(const st_writer *w)
{
    size_t n = strlen(w->dir) + 40;
    char *p = dsk_malloc(n);
    if (p)
        snprintf(p, n, "%s/model.safetensors.index.json", w->dir);
    return p;
}

static void unlink_index(const st_writer *w)
{
    char *p = index_path(w);
    if (p)
        unlink(p);
    free(p);
}

/* model.safetensors.index.json: total data bytes and every tensor's shard, in the order added. */
static int write_index(st_writer *w)
{
    uint64_t total = 0;
    for (int i = 0; i < w->count; i++)
        total += w->entries[i].nbytes;
    dsk_buf b = {0};
    int rc = dsk_buf_printf(&b, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
                            (unsigned long long)total);
    for (int i = 0; rc == 0 && i < w->count; i++)
        rc = dsk_buf_printf(&b, "%s\n    %s: \"model-%05d-of-%05d.safetensors\"", i ? "," : "",
                            w->entries[i].quoted, w->entries[i].shard + 1, w->n_shards);
    if (rc == 0)
        rc = dsk_buf_printf(&b, "\n  }\n}\n");
    char *path = rc == 0 ? index_path(w) : NULL;
    if (!path)
        rc = -1;
    if (rc == 0)
        rc = dsk_write_file_atomic(path, b.data, b.len);
    free(path);
    dsk_buf_free(&b);
    return rc;
}

static void free_writer(st_writer *w)
{
    for (int i = 0; i < w->count; i++) {
        free(w->entries[i].name);
        free(w->entries[i].quoted);
    }
    free(w->entries);
    name_table_free(&w->names);
    for (int i = 0; i < w->n_shards; i++)
        free(w->shard_tmp[i]);
    free(w->shard_tmp);
    free(w->data_tmp);
    free(w->dir);
    free(w);
}

void st_writer_abort(st_writer *w)
{
    if (!w)
        return;
    if (w->data_fd >= 0) {
        close(w->data_fd);
        unlink(w->data_tmp);
    }
    for (int i = 0; i < w->n_shards; i++)
        if (w->shard_tmp[i])
            unlink(w->shard_tmp[i]);
    free_writer(w);
}

int st_writer_close(st_writer *w)
{
    if (w->failed) {
        dsk_err("safetensors writer for %s: an earlier call failed; nothing was written", w->dir);
        st_writer_abort(w);
        return -1;
    }
    if (w->open_entry >= 0) {
        dsk_err("tensor '%s' was begun but not ended; nothing was written", w->entries[w->open_entry].name);
        st_writer_abort(w);
        return -1;
    }
    if ((w->count > w->cur_first || w->n_shards == 0) && finish_shard(w) != 0) {
        dsk_err_ctx("writing %s", w->dir);
        st_writer_abort(w);
        return -1;
    }
    /* Rename every shard into place, then write the index; undo the renames on failure. */
    int renamed = 0, rc = 0;
    char **final = dsk_calloc((size_t)w->n_shards, sizeof *final);
    if (!final)
        rc = -1;
    for (int i = 0; rc == 0 && i < w->n_shards; i++) {
        char *base = shard_name(i, w->n_shards);
        size_t n = strlen(w->dir) + 64;
        final[i] = base ? dsk_malloc(n) : NULL;
        if (!final[i]) {
            free(base);
            rc = -1;
            break;
        }
        snprintf(final[i], n, "%s/%s", w->dir, base);
        free(base);
        if (rename(w->shard_tmp[i], final[i]) != 0) {
            rc = dsk_err_errno("cannot rename %s to %s", w->shard_tmp[i], final[i]);
            break;
        }
        free(w->shard_tmp[i]);
        w->shard_tmp[i] = NULL;
        renamed++;
    }
    int indexed = 0;
    if (rc == 0)
        indexed = (rc = write_index(w)) == 0;
    if (rc == 0) {
        int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) != 0)
            rc = dsk_err_errno("cannot sync folder %s", w->dir);
        if (dfd >= 0)
            close(dfd);
    }
    if (rc != 0) {
        dsk_err_ctx("writing %s (nothing was left behind)", w->dir);
        for (int i = 0; i < renamed; i++)
            unlink(final[i]);
        if (indexed)
            unlink_index(w);
    }
    for (int i = 0; final && i < w->n_shards; i++)
        free(final[i]);
    free(final);
    st_writer_abort(w);
    return rc;
}
