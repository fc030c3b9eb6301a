/* The packer: each (layer, rank) file is written sequentially in 4 MiB pieces, synced, and dropped from the
 * page cache (a 100 GB table would otherwise evict everything else); the folder is renamed into place
 * only when every file and the manifest are on disk. */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/engram/engram_format.h"
#include "runtime/engram/engram_pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define WRITE_CHUNK (4u << 20)

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int remove_tree(const char *path)
{
    if (nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return dsk_err_errno("cannot remove %s", path);
    return 0;
}

static int write_full(int fd, const void *buf, size_t n, uint64_t off, const char *path)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return dsk_err_errno("%s: write at offset %llu", path, (unsigned long long)(off + done));
        done += (size_t)w;
    }
    return 0;
}

static int fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return dsk_err_errno("cannot open %s to sync it", path);
    int rc = fsync(fd) ? dsk_err_errno("fsync %s", path) : 0;
    close(fd);
    return rc;
}

/* Rows straight from the mapped checkpoint tensors. */
static int mapped_rows(void *ctx, const engram_table *t, int64_t row0, int64_t n, uint8_t *rec)
{
    (void)ctx;
    if (!t->values || !t->scales)
        return dsk_err("layer %d: the table is not mapped and no row source was given", t->layer_id);
    size_t w = (size_t)t->width, ns = w / 32;
    for (int64_t i = 0; i < n; i++, rec += w + ns) {
        memcpy(rec, t->values + (size_t)(row0 + i) * w, w);
        memcpy(rec + w, t->scales + (size_t)(row0 + i) * ns, ns);
    }
    return 0;
}

static void header_for(const engram_table *t, uint32_t tp, uint32_t rank, uint32_t block_rows, uint32_t block_bytes,
                       engram_header *h)
{
    memset(h, 0, sizeof *h);
    h->version = ENGRAM_FORMAT_VERSION;
    h->header_bytes = ENGRAM_HEADER_BYTES;
    h->block_bytes = block_bytes;
    h->block_rows = block_rows;
    h->width = (uint32_t)t->width;
    h->record_bytes = (uint32_t)engram_record_bytes(t->width);
    h->slot = (uint32_t)t->slot;
    h->layer_id = (uint32_t)t->layer_id;
    h->tp = tp;
    h->rank = rank;
    h->table_rows = (uint64_t)t->rows;
    engram_rank_rows(h->table_rows, tp, rank, &h->row_first, &h->row_count);
    h->block_count = (h->row_count + block_rows - 1) / block_rows;
    h->data_offset = ENGRAM_HEADER_BYTES;
    memcpy(h->source_id, t->source_id, 16);
    h->weight = t->weight;
    h->scale = t->scale;
}

static int geometry(const engram_source *src, const engram_pack_opts *o, uint32_t *rows, uint32_t *bytes)
{
    if (src->n_layers < 1 || src->n_layers > ENGRAM_MAX_LAYERS)
        return dsk_err("%d Engram layers; between 1 and %d can be packed", src->n_layers, ENGRAM_MAX_LAYERS);
    if (o->tp < 1 || o->tp > ENGRAM_MAX_TP)
        return dsk_err("--tp %d: between 1 and %d", o->tp, ENGRAM_MAX_TP);
    /* One block geometry for the whole pack: every layer has the release's width. */
    for (int i = 1; i < src->n_layers; i++)
        if (src->table[i].width != src->table[0].width)
            return dsk_err("Engram layers %d and %d have widths %d and %d; one width per pack", src->table[0].layer_id,
                           src->table[i].layer_id, src->table[0].width, src->table[i].width);
    if (engram_block_geometry((uint32_t)engram_record_bytes(src->table[0].width), o->block_rows, rows, bytes))
        return -1;
    return 0;
}

int engram_pack_bytes(const engram_source *src, const engram_pack_opts *o, uint64_t *bytes)
{
    uint32_t brows, bbytes;
    if (geometry(src, o, &brows, &bbytes))
        return -1;
    uint64_t total = 0;
    for (int i = 0; i < src->n_layers; i++)
        for (int r = 0; r < o->tp; r++) {
            engram_header h;
            header_for(&src->table[i], (uint32_t)o->tp, (uint32_t)r, brows, bbytes, &h);
            total += engram_file_bytes(&h);
        }
    *bytes = total;
    return 0;
}

typedef struct {
    int on;
    double t0, last;
    uint64_t done, total;
} progress;

static void progress_show(progress *p, const char *what, int final)
{
    if (!p->on)
        return;
    double now = dsk_now();
    if (!final && now - p->last < 0.2)
        return;
    p->last = now;
    double el = now - p->t0;
    fprintf(stderr, "\r\033[Kdskit engram pack: %s  %5.1f %%  %.2f of %.2f GB  %.0f MB/s", what,
            p->total ? 100.0 * (double)p->done / (double)p->total : 100.0, p->done / 1e9, p->total / 1e9,
            el > 0 ? p->done / el / 1e6 : 0.0);
    if (final)
        fputc('\n', stderr);
}

/* One (layer, rank) file. */
static int write_file(const char *dir, const engram_table *t, const engram_header *h, uint8_t *buf, uint8_t *rec,
                      engram_rows_fn fn, void *ctx, progress *pg)
{
    char path[4096], what[96];
    engram_file_name(what, sizeof what, h->layer_id, h->rank, h->tp);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, what) >= sizeof path)
        return dsk_err("path %s/%s is too long", dir, what);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return dsk_err_errno("cannot create %s", path);
    int rc = -1;
    engram_header_encode(h, buf);
    if (write_full(fd, buf, ENGRAM_HEADER_BYTES, 0, path))
        goto done;
    pg->done += ENGRAM_HEADER_BYTES;
    uint32_t per = WRITE_CHUNK / h->block_bytes;
    for (uint64_t b = 0; b < h->block_count; b += per) {
        uint32_t nb = (uint32_t)(h->block_count - b < per ? h->block_count - b : per);
        uint64_t row0 = h->row_first + b * h->block_rows;
        uint64_t nrows = (uint64_t)nb * h->block_rows;
        if (nrows > h->row_first + h->row_count - row0)
            nrows = h->row_first + h->row_count - row0;
        if (fn(ctx, t, (int64_t)row0, (int64_t)nrows, rec))
            goto done;
        memset(buf, 0, (size_t)nb * h->block_bytes);
        for (uint32_t k = 0; k < nb; k++) {
            uint8_t *blk = buf + (size_t)k * h->block_bytes;
            uint64_t first = (uint64_t)k * h->block_rows, n = h->block_rows;
            if (first + n > nrows)
                n = nrows - first;
            memcpy(blk, rec + first * h->record_bytes, n * h->record_bytes);
            engram_block_seal(blk, h->block_bytes, engram_block_seed(h->source_id, row0 + first));
        }
        if (write_full(fd, buf, (size_t)nb * h->block_bytes, h->data_offset + b * h->block_bytes, path))
            goto done;
        pg->done += (uint64_t)nb * h->block_bytes;
        progress_show(pg, what, 0);
    }
    if (fsync(fd)) {
        dsk_err_errno("fsync %s", path);
        goto done;
    }
    /* Written and synced: the pages need not stay cached (the store reads with O_DIRECT anyway). */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    rc = 0;
done:
    if (close(fd) && !rc)
        rc = dsk_err_errno("close %s", path);
    return rc;
}

/* out_dir may be written: absent, an empty folder, or (force) a pack folder. *exists says it is there. */
static int check_out(const char *out, int force, int *exists)
{
    struct stat st;
    *exists = 0;
    if (stat(out, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        return dsk_err_errno("cannot check --out %s", out);
    }
    if (!S_ISDIR(st.st_mode))
        return dsk_err("--out %s exists and is not a folder", out);
    *exists = 1;
    DIR *d = opendir(out);
    if (!d)
        return dsk_err_errno("cannot list --out %s", out);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    if (!entries)
        return 0;
    char man[4096];
    snprintf(man, sizeof man, "%s/%s", out, ENGRAM_MANIFEST);
    if (!dsk_file_exists(man))
        return dsk_err("--out %s is not empty and is not an Engram pack; refusing to replace it", out);
    if (!force)
        return dsk_err("--out %s already holds a pack; pass --force to replace it", out);
    return 0;
}

static void parent_of(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = 0;
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else
        slash[slash == out ? 1 : 0] = 0;
}

int engram_pack(const engram_source *src, const char *out_dir, const engram_pack_opts *o, engram_rows_fn fn,
                void *ctx)
{
    uint32_t brows, bbytes;
    uint64_t total;
    int exists;
    if (geometry(src, o, &brows, &bbytes) || engram_pack_bytes(src, o, &total) || check_out(out_dir, o->force, &exists))
        return -1;
    char parent[4096], tmp[4096], old[4096];
    parent_of(out_dir, parent, sizeof parent);
    if (dsk_mkdirs(parent))
        return -1;
    struct statvfs vfs;
    if (statvfs(parent, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < total + (64u << 20))
        return dsk_err("--out %s: the pack needs %.2f GB but only %.2f GB are free", out_dir, total / 1e9,
                       (double)vfs.f_bavail * vfs.f_frsize / 1e9);
    snprintf(tmp, sizeof tmp, "%s.engram-tmp-%ld", out_dir, (long)getpid());
    if (mkdir(tmp, 0755) != 0)
        return dsk_err_errno("cannot create the temporary folder %s", tmp);
    uint8_t *buf = NULL, *rec = NULL;
    int rc = -1;
    progress pg = {.on = o->progress && isatty(STDERR_FILENO), .t0 = dsk_now(), .total = total};
    uint32_t per = WRITE_CHUNK / bbytes;
    if (posix_memalign((void **)&buf, ENGRAM_ALIGN, (size_t)per * bbytes) ||
        !(rec = dsk_malloc((size_t)per * brows * engram_record_bytes(src->table[0].width)))) {
        dsk_err("out of memory for the pack buffers");
        goto done;
    }
    engram_manifest man = {.tp = (uint32_t)o->tp, .block_rows = brows, .block_bytes = bbytes, .n_layers = src->n_layers};
    for (int i = 0; i < src->n_layers; i++) {
        const engram_table *t = &src->table[i];
        if (t->slot != i) {
            dsk_err("layer %d: slot %d where %d was expected", t->layer_id, t->slot, i);
            goto done;
        }
        man.layer[i].slot = (uint32_t)i;
        man.layer[i].layer_id = (uint32_t)t->layer_id;
        man.layer[i].rows = (uint64_t)t->rows;
        man.layer[i].width = (uint32_t)t->width;
        memcpy(man.layer[i].source_id, t->source_id, 16);
        for (int r = 0; r < o->tp; r++) {
            engram_header h;
            header_for(t, (uint32_t)o->tp, (uint32_t)r, brows, bbytes, &h);
            if (write_file(tmp, t, &h, buf, rec, fn ? fn : mapped_rows, ctx, &pg))
                goto done;
        }
    }
    if (engram_manifest_write(tmp, &man) || fsync_path(tmp))
        goto done;
    if (exists) {
        snprintf(old, sizeof old, "%s.engram-old-%ld", out_dir, (long)getpid());
        if (rename(out_dir, old) != 0) {
            dsk_err_errno("cannot move the old %s aside", out_dir);
            goto done;
        }
    }
    if (rename(tmp, out_dir) != 0) {
        int e = errno;
        if (exists && rename(old, out_dir) != 0)
            fprintf(stderr, "dskit engram pack: the old %s is left at %s\n", out_dir, old);
        errno = e;
        dsk_err_errno("cannot rename %s to %s", tmp, out_dir);
        goto done;
    }
    if (fsync_path(parent))
        goto done_published;
    if (exists && remove_tree(old))
        fprintf(stderr, "dskit engram pack: warning: %s\n", dsk_err_msg());
    progress_show(&pg, "done", 1);
    rc = 0;
    goto done_published;
done:
    if (pg.on)
        fputc('\n', stderr);
    {
        char why[1024]; /* the cleanup must not replace the message saying what failed */
        snprintf(why, sizeof why, "%s", dsk_err_msg());
        if (remove_tree(tmp))
            fprintf(stderr, "dskit engram pack: could not clean up: %s\n", dsk_err_msg());
        dsk_err("%s", why);
    }
done_published:
    free(buf);
    free(rec);
    return rc;
}
