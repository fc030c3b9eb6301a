/* Opening a store: `host` points at the checkpoint's mapped tables; `nvme:DIR` checks every pack file's
 * header against the manifest and the checkpoint, then sets up one AIO context, the O_DIRECT read slots
 * and the hot-row cache. The reads themselves are in engram_fetch.c. */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/engram/engram_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_SLOW_MS 50
#define DEFAULT_QUEUE_DEPTH 512
#define MAX_QUEUE_DEPTH 65536

int engram_parse_faults(const char *spec, fault *out, int *n_out)
{
    *n_out = 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof item)
            return dsk_err("DSKIT_ENGRAM_FAULT: empty or overlong item in '%s'", spec);
        memcpy(item, p, len);
        item[len] = 0;
        if (*n_out == ENGRAM_MAX_FAULTS)
            return dsk_err("DSKIT_ENGRAM_FAULT: more than %d items", ENGRAM_MAX_FAULTS);
        fault *f = &out[*n_out];
        unsigned long long at = 0;
        int ms = 0, used = 0;
        if (sscanf(item, "eio@%llu%n", &at, &used) == 1 && item[used] == 0)
            f->kind = FAULT_EIO;
        else if (sscanf(item, "short@%llu%n", &at, &used) == 1 && item[used] == 0)
            f->kind = FAULT_SHORT;
        else if (sscanf(item, "slow@%llu:%d%n", &at, &ms, &used) == 2 && item[used] == 0 && ms > 0)
            f->kind = FAULT_SLOW;
        else if (!strcmp(item, "nodirect"))
            f->kind = FAULT_NODIRECT, at = UINT64_MAX;
        else
            return dsk_err("DSKIT_ENGRAM_FAULT: '%s' is not eio@N, short@N, slow@N:MS or nodirect", item);
        if (at == 0)
            return dsk_err("DSKIT_ENGRAM_FAULT: '%s': reads are numbered from 1", item);
        f->at = at;
        f->ms = ms;
        (*n_out)++;
        p += len + (end ? 1 : 0);
    }
    return 0;
}

static int read_header(int fd, uint8_t *buf, const char *path)
{
    ssize_t r;
    do
        r = pread(fd, buf, ENGRAM_HEADER_BYTES, 0);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1; /* errno tells the caller whether O_DIRECT was refused */
    if (r < (ssize_t)ENGRAM_HEADER_BYTES) {
        errno = 0;
        return dsk_err("%s: truncated: %zd bytes, shorter than its %u-byte header", path, r, ENGRAM_HEADER_BYTES);
    }
    return 0;
}

/* Every block of a file, read in 1 MiB pieces through the file's own descriptor (O_DIRECT or not). */
static int verify_file_blocks(const pack_file *pf, uint8_t *buf, size_t cap)
{
    const engram_header *h = &pf->h;
    uint32_t per = (uint32_t)(cap / h->block_bytes);
    for (uint64_t b = 0; b < h->block_count; b += per) {
        uint32_t nb = (uint32_t)(h->block_count - b < per ? h->block_count - b : per);
        size_t n = (size_t)nb * h->block_bytes;
        uint64_t off = h->data_offset + b * h->block_bytes;
        ssize_t r;
        do
            r = pread(pf->fd, buf, n, (off_t)off);
        while (r < 0 && errno == EINTR);
        if (r < 0)
            return dsk_err_errno("%s: reading blocks at offset %llu", pf->path, (unsigned long long)off);
        if ((size_t)r != n)
            return dsk_err("%s: short read at offset %llu (%zd of %zu bytes)", pf->path, (unsigned long long)off, r, n);
        for (uint32_t k = 0; k < nb; k++) {
            uint64_t first = h->row_first + (b + k) * h->block_rows;
            if (!engram_block_ok(buf + (size_t)k * h->block_bytes, h->block_bytes, engram_block_seed(h->source_id, first)))
                return dsk_err("%s: block %llu (rows from %llu, offset %llu): its xxh3-128 does not match: the block is "
                               "damaged", pf->path, (unsigned long long)(b + k), (unsigned long long)first,
                               (unsigned long long)(off + (uint64_t)k * h->block_bytes));
        }
    }
    return 0;
}

/* Whether the kernel reports direct I/O alignments (statx STATX_DIOALIGN, Linux 6.1+) that our 4096-byte
 * offsets, lengths and buffers do not meet; why goes to the message. Unknown (older kernel): 0, and the
 * first read's EINVAL decides. */
static int dio_unfit(int fd, char *why, size_t cap)
{
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) || !(sx.stx_mask & STATX_DIOALIGN))
        return 0;
    if (!sx.stx_dio_offset_align)
        snprintf(why, cap, "the filesystem does not support O_DIRECT");
    else if (sx.stx_dio_offset_align > ENGRAM_ALIGN || sx.stx_dio_mem_align > ENGRAM_ALIGN)
        snprintf(why, cap, "O_DIRECT needs %u-byte offsets and %u-byte buffers here, more than %u", sx.stx_dio_offset_align,
                 sx.stx_dio_mem_align, ENGRAM_ALIGN);
    else
        return 0;
    return 1;
}

/* Open path for reading, with O_DIRECT when direct, never blocking on a FIFO: dsk_open_regular opens it
 * non-blocking and refuses anything but a regular file (a FIFO in the pack folder hung the store's
 * open), then O_DIRECT is asked of the open file; errno is EINVAL when the filesystem refuses it, 0
 * when the path is not a regular file (the message says so). */
static int open_regular(const char *path, int direct)
{
    struct stat st;
    errno = 0;
    int fd = dsk_open_regular(path, &st);
    if (fd < 0 || !direct)
        return fd;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* Open one pack file, falling back to buffered reads where the filesystem refuses O_DIRECT. */
static int open_pack_file(pack_file *pf, const engram_manifest *m, int i, uint32_t rank, const engram_source *src,
                          uint8_t *buf, int no_direct, int *said_buffered)
{
    char why[160] = "the filesystem refuses O_DIRECT (EINVAL)";
    int direct = 1;
    if (no_direct) { /* DSKIT_ENGRAM_FAULT=nodirect: as if the filesystem said EINVAL */
        pf->fd = -1;
        errno = EINVAL;
    } else {
        pf->fd = open_regular(pf->path, 1);
        if (pf->fd >= 0 && dio_unfit(pf->fd, why, sizeof why)) {
            close(pf->fd);
            pf->fd = -1;
            errno = EINVAL;
        }
    }
    if (pf->fd < 0 && errno == EINVAL) {
        direct = 0;
        pf->fd = open_regular(pf->path, 0);
    }
    if (pf->fd < 0) {
        if (errno == ENOENT)
            return dsk_err("%s: missing (the manifest lists it)", pf->path);
        return errno ? dsk_err_errno("cannot open %s", pf->path) : -1;
    }
    if (read_header(pf->fd, buf, pf->path)) {
        if (errno != EINVAL || !direct)
            return errno ? dsk_err_errno("%s: reading the header", pf->path) : -1;
        /* Opened with O_DIRECT but the read was refused: reopen buffered. */
        close(pf->fd);
        direct = 0;
        if ((pf->fd = open_regular(pf->path, 0)) < 0)
            return -1;
        if (read_header(pf->fd, buf, pf->path))
            return errno ? dsk_err_errno("%s: reading the header", pf->path) : -1;
    }
    if (!direct && !*said_buffered) {
        fprintf(stderr, "dskit: engram: %s: %s; reading through the page cache on the same AIO path\n",
                pf->path, why);
        *said_buffered = 1;
    }
    if (engram_header_decode(buf, pf->path, &pf->h) || engram_header_matches(&pf->h, m, i, rank, pf->path) ||
        (src && engram_header_matches_source(&pf->h, &src->table[i], pf->path)))
        return -1;
    struct stat st;
    if (fstat(pf->fd, &st))
        return dsk_err_errno("cannot stat %s", pf->path);
    if ((uint64_t)st.st_size != engram_file_bytes(&pf->h))
        return dsk_err("%s: %s: %lld bytes, its header says %llu", pf->path,
                       (uint64_t)st.st_size < engram_file_bytes(&pf->h) ? "truncated" : "trailing bytes",
                       (long long)st.st_size, (unsigned long long)engram_file_bytes(&pf->h));
    return 0;
}

/* The pack's layers against the checkpoint's, before any file is opened. */
static int check_source(const char *dir, const engram_manifest *m, const engram_source *src)
{
    if (src->n_layers != m->n_layers)
        return dsk_err("%s: the pack has %d Engram layers but the checkpoint %d", dir, m->n_layers, src->n_layers);
    for (int i = 0; i < m->n_layers; i++)
        if (m->layer[i].layer_id != (uint32_t)src->table[i].layer_id)
            return dsk_err("%s: slot %d is layer %u in the pack but layer %d in the checkpoint", dir, i,
                           m->layer[i].layer_id, src->table[i].layer_id);
    return 0;
}

static int open_nvme(engram_store *s, const char *dir, const engram_source *src, const engram_store_opts *o)
{
    const char *env = getenv("DSKIT_ENGRAM_FAULT");
    int no_direct = 0;
    if (env && *env) {
        if (engram_parse_faults(env, s->faults, &s->n_faults))
            return -1;
        fprintf(stderr, "dskit: engram: DSKIT_ENGRAM_FAULT=%s: test-only fault injection is on\n", env);
        for (int k = 0; k < s->n_faults; k++)
            no_direct |= s->faults[k].kind == FAULT_NODIRECT;
    }
    engram_manifest m;
    if (engram_manifest_read(dir, &m) || (src && check_source(dir, &m, src)))
        return -1;
    if (o->tp && (uint32_t)o->tp != m.tp)
        return dsk_err("%s: packed for tp %u; the store was asked for rank %d of %d", dir, m.tp, o->rank, o->tp);
    for (int i = 1; i < m.n_layers; i++)
        if (m.layer[i].width != m.layer[0].width)
            return dsk_err("%s: layers of widths %u and %u; a pack has one width", dir, m.layer[0].width,
                           m.layer[i].width);
    s->block_bytes = m.block_bytes;
    s->block_rows = m.block_rows;
    s->n_layers = m.n_layers;
    uint8_t *buf;
    size_t cap = o->verify_blocks ? (1u << 20) + ENGRAM_MAX_BLOCK_BYTES : ENGRAM_HEADER_BYTES;
    if (posix_memalign((void **)&buf, ENGRAM_ALIGN, cap))
        return dsk_err("out of memory");
    int said_buffered = 0, rc = 0;
    for (int i = 0; i < m.n_layers && !rc; i++) {
        store_layer *L = &s->layer[i];
        L->layer_id = (int)m.layer[i].layer_id;
        L->rows = (int64_t)m.layer[i].rows;
        L->width = (int)m.layer[i].width;
        L->rec_bytes = engram_record_bytes(L->width);
        L->tp = m.tp;
        L->chunk = (m.layer[i].rows + m.tp - 1) / m.tp;
        for (uint32_t r = 0; r < m.tp && !rc; r++) {
            pack_file *pf = &L->files[r];
            char name[64];
            engram_file_name(name, sizeof name, m.layer[i].layer_id, r, m.tp);
            snprintf(pf->path, sizeof pf->path, "%s/%s", dir, name);
            if (o->tp && (uint32_t)o->rank != r)
                continue;
            rc = open_pack_file(pf, &m, i, r, src, buf, no_direct, &said_buffered);
            if (!rc && o->verify_blocks)
                rc = verify_file_blocks(pf, buf, cap);
        }
    }
    free(buf);
    if (rc)
        return -1;

    int depth = o->queue_depth ? o->queue_depth : DEFAULT_QUEUE_DEPTH;
    if (depth < 1 || depth > MAX_QUEUE_DEPTH)
        return dsk_err("queue depth %d: between 1 and %d", depth, MAX_QUEUE_DEPTH);
    size_t need = (size_t)depth * s->block_bytes;
    if (o->io_mem) {
        if ((uintptr_t)o->io_mem % ENGRAM_ALIGN || o->io_mem_bytes < need)
            return dsk_err("the caller's read memory (%zu bytes at %p) must be %u-aligned and hold %d blocks of %u "
                           "bytes (%zu)", o->io_mem_bytes, o->io_mem, ENGRAM_ALIGN, depth, s->block_bytes, need);
        s->io_mem = o->io_mem;
    } else {
        if (posix_memalign((void **)&s->io_mem, ENGRAM_ALIGN, need))
            return dsk_err("out of memory for %d read buffers of %u bytes", depth, s->block_bytes);
        s->own_io_mem = 1;
    }
    s->slots = dsk_calloc((size_t)depth, sizeof *s->slots);
    s->free_slots = dsk_malloc(sizeof(int) * (size_t)depth);
    if (!s->slots || !s->free_slots)
        return -1;
    s->n_slots = depth;
    for (int k = 0; k < depth; k++) {
        s->slots[k].buf = s->io_mem + (size_t)k * s->block_bytes;
        s->free_slots[s->n_free++] = depth - 1 - k;
    }
    int e = io_setup(depth, &s->ctx);
    if (e < 0)
        return dsk_err("io_setup(%d) for %s: %s%s", depth, dir, strerror(-e),
                       e == -EAGAIN ? " (the system's AIO limit, /proc/sys/fs/aio-max-nr, is reached: lower the "
                                      "queue depth or raise the limit)" : "");
    s->have_ctx = 1;
    int rec = 0;
    for (int i = 0; i < s->n_layers; i++)
        if (s->layer[i].rec_bytes > rec)
            rec = s->layer[i].rec_bytes;
    return row_cache_init(&s->cache, o->cache_bytes, (size_t)rec);
}

static int open_host(engram_store *s, const engram_source *src)
{
    if (!src)
        return dsk_err("placement host needs the checkpoint's tables");
    s->n_layers = src->n_layers;
    for (int i = 0; i < src->n_layers; i++) {
        const engram_table *t = &src->table[i];
        if (!t->values || !t->scales)
            return dsk_err("placement host: layer %d's table is not mapped", t->layer_id);
        store_layer *L = &s->layer[i];
        L->layer_id = t->layer_id;
        L->rows = t->rows;
        L->width = t->width;
        L->rec_bytes = engram_record_bytes(t->width);
        L->values = t->values;
        L->scales = t->scales;
        for (int r = 0; r < ENGRAM_MAX_TP; r++)
            L->files[r].fd = -1;
    }
    return 0;
}

int engram_store_open(const char *placement, const engram_source *src, const engram_store_opts *opts,
                      engram_store **out)
{
    engram_store_opts none = {0};
    const engram_store_opts *o = opts ? opts : &none;
    *out = NULL;
    if (o->tp < 0 || o->tp > ENGRAM_MAX_TP || (o->tp && (o->rank < 0 || o->rank >= o->tp)))
        return dsk_err("engram store: rank %d of %d is not a rank", o->rank, o->tp);
    if (src && (src->n_layers < 1 || src->n_layers > ENGRAM_MAX_LAYERS))
        return dsk_err("engram store: %d Engram layers", src->n_layers);
    engram_store *s = dsk_calloc(1, sizeof *s);
    if (!s)
        return -1;
    snprintf(s->placement, sizeof s->placement, "%s", placement);
    s->slow_ms = o->slow_read_ms > 0 ? o->slow_read_ms : DEFAULT_SLOW_MS;
    for (int i = 0; i < ENGRAM_MAX_LAYERS; i++)
        for (int r = 0; r < ENGRAM_MAX_TP; r++)
            s->layer[i].files[r].fd = -1;
    int rc;
    if (!strcmp(placement, "host")) {
        s->host = 1;
        rc = open_host(s, src);
    } else if (!strncmp(placement, "nvme:", 5) && placement[5]) {
        rc = open_nvme(s, placement + 5, src, o);
    } else {
        rc = dsk_err("engram placement '%s': expected host or nvme:DIR", placement);
    }
    if (!rc) {
        /* rows this store answers; the pad row elsewhere */
        for (int i = 0; i < s->n_layers; i++) {
            store_layer *L = &s->layer[i];
            if (o->tp)
                engram_rank_rows((uint64_t)L->rows, (uint32_t)o->tp, (uint32_t)o->rank, &L->own_first, &L->own_count);
            else
                L->own_first = 0, L->own_count = (uint64_t)L->rows;
        }
    }
    if (rc) {
        dsk_err_ctx("opening the Engram store (%s)", placement);
        engram_store_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

void engram_store_close(engram_store *s)
{
    if (!s)
        return;
    while (s->fetches)
        engram_fetch_end(s->fetches);
    if (s->have_ctx) {
        engram_drain(s, ENGRAM_CLOSE_WAIT_MS);
        if (s->n_busy)
            fprintf(stderr, "dskit: engram: %d reads still in flight after %d ms; waiting for the kernel to finish "
                            "them\n", s->n_busy, ENGRAM_CLOSE_WAIT_MS);
        io_destroy(s->ctx); /* blocks until the kernel is done with the buffers, which are freed next */
    }
    for (int i = 0; i < ENGRAM_MAX_LAYERS; i++)
        for (int r = 0; r < ENGRAM_MAX_TP; r++)
            if (s->layer[i].files[r].fd >= 0)
                close(s->layer[i].files[r].fd);
    if (s->own_io_mem)
        free(s->io_mem);
    free(s->slots);
    free(s->free_slots);
    row_cache_free(&s->cache);
    free(s);
}

int engram_store_layers(const engram_store *s)
{
    return s->n_layers;
}

int64_t engram_store_rows(const engram_store *s, int slot)
{
    return slot >= 0 && slot < s->n_layers ? s->layer[slot].rows : -1;
}

int engram_store_record_bytes(const engram_store *s, int slot)
{
    return slot >= 0 && slot < s->n_layers ? s->layer[slot].rec_bytes : -1;
}

const char *engram_store_placement(const engram_store *s)
{
    return s->placement;
}

int engram_store_drop_cache(engram_store *s)
{
    row_cache_clear(&s->cache);
    for (int i = 0; i < s->n_layers; i++)
        for (int r = 0; r < ENGRAM_MAX_TP; r++) {
            pack_file *pf = &s->layer[i].files[r];
            if (pf->fd < 0)
                continue;
            int e = posix_fadvise(pf->fd, 0, 0, POSIX_FADV_DONTNEED);
            if (e)
                return dsk_err("posix_fadvise(DONTNEED) %s: %s", pf->path, strerror(e));
        }
    return 0;
}

void engram_store_counters(const engram_store *s, engram_counters *out)
{
    store_counters *c = (store_counters *)&s->c; /* atomic loads take a non-const pointer in C11 */
    out->rows = atomic_load_explicit(&c->rows, memory_order_relaxed);
    out->reads = atomic_load_explicit(&c->reads, memory_order_relaxed);
    out->read_bytes = atomic_load_explicit(&c->read_bytes, memory_order_relaxed);
    out->cache_hits = atomic_load_explicit(&c->cache_hits, memory_order_relaxed);
    out->cache_misses = atomic_load_explicit(&c->cache_misses, memory_order_relaxed);
    out->slow_reads = atomic_load_explicit(&c->slow_reads, memory_order_relaxed);
    out->errors = atomic_load_explicit(&c->errors, memory_order_relaxed);
    out->timeouts = atomic_load_explicit(&c->timeouts, memory_order_relaxed);
}
