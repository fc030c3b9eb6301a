/* The read engine. A fetch turns a round's rows into block reads: rows found in the hot-row cache are
 * copied at once, the others are grouped by the block that holds them (two positions reading one row,
 * or rows sharing a block, cost one read). Reads go to the kernel with io_submit as read slots are free,
 * in fetch and layer order, so the first Engram layer's rows arrive first; completions are reaped by
 * whichever wait or poll runs, for any open fetch. There is no thread: once submitted, the kernel and the
 * disk do the work while the caller computes. A completed block is checked against its hash before any
 * of its rows is copied out or cached. */
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/engram/engram_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SUBMIT_BATCH 64
#define REAP_BATCH 256
#define SLOW_LOG_FIRST 8      /* slow reads logged one by one; after that one line per SLOW_LOG_EVERY */
#define SLOW_LOG_EVERY 1000

enum { BLK_PENDING, BLK_INFLIGHT, BLK_DONE };

typedef struct {
    uint8_t *dst;    /* where the record goes */
    int64_t row;     /* the row asked for (for messages) */
    int32_t next;    /* next target of the same block; -1 ends the list */
    uint32_t within; /* record index in the block */
} target;

typedef struct {
    uint8_t slot, rank, state;
    uint64_t block;       /* block index in the rank's file */
    int32_t first_target;
} block_req;

struct engram_fetch {
    engram_store *s;
    struct engram_fetch *next;                   /* the store's open fetches */
    engram_fetch_layer req[ENGRAM_MAX_LAYERS];
    int64_t pending[ENGRAM_MAX_LAYERS];          /* blocks of the layer not completed */
    int64_t inflight[ENGRAM_MAX_LAYERS];         /* of those, submitted and not yet reaped */
    int host_done[ENGRAM_MAX_LAYERS];
    int failed[ENGRAM_MAX_LAYERS];
    char err[ENGRAM_MAX_LAYERS][1024];           /* the layer's first error */
    block_req *blocks;                           /* layer by layer, in the order the rows asked for them */
    int32_t n_blocks, next_submit;
    target *targets;
};

static void release_slot(engram_store *s, io_slot *sl)
{
    sl->state = SLOT_FREE;
    sl->f = NULL;
    s->free_slots[s->n_free++] = (int)(sl - s->slots);
}

static void layer_fail(engram_fetch *f, int slot, const char *fmt, ...) DSK_PRINTF(3, 4);
static void layer_fail(engram_fetch *f, int slot, const char *fmt, ...)
{
    if (f->failed[slot]++)
        return; /* the first error is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err[slot], sizeof f->err[slot], fmt, ap);
    va_end(ap);
}

/* A block read that failed: its rows get zeros (never stale bytes) and the layer its error. */
static void block_failed(engram_store *s, engram_fetch *f, block_req *b, uint64_t offset, const char *why)
{
    store_layer *L = &s->layer[b->slot];
    int64_t row = b->first_target >= 0 ? f->targets[b->first_target].row : -1;
    for (int32_t t = b->first_target; t >= 0; t = f->targets[t].next)
        memset(f->targets[t].dst, 0, (size_t)L->rec_bytes);
    layer_fail(f, b->slot, "engram layer %d: row %lld: %s: block %llu (offset %llu, %u bytes): %s", L->layer_id,
               (long long)row, L->files[b->rank].path, (unsigned long long)b->block, (unsigned long long)offset,
               s->block_bytes, why);
    b->state = BLK_DONE;
    f->pending[b->slot]--;
}

static void log_slow(engram_store *s, const io_slot *sl, double ms)
{
    uint64_t n = atomic_fetch_add_explicit(&s->c.slow_reads, 1, memory_order_relaxed) + 1;
    if (n <= SLOW_LOG_FIRST || n % SLOW_LOG_EVERY == 0)
        fprintf(stderr, "dskit: engram: slow read: %s at offset %llu took %.1f ms (bound %d ms; %llu slow reads so "
                        "far)\n", sl->pf->path, (unsigned long long)sl->offset, ms, s->slow_ms, (unsigned long long)n);
}

/* A read is back from the kernel with result res (bytes, or -errno). */
static void complete(engram_store *s, io_slot *sl, long long res)
{
    double ms = (dsk_now() - sl->t_submit) * 1e3;
    if (ms > s->slow_ms)
        log_slow(s, sl, ms);
    engram_fetch *f = sl->f;
    if (!f) { /* its fetch ended while it was in flight */
        release_slot(s, sl);
        return;
    }
    block_req *b = &f->blocks[sl->blk];
    store_layer *L = &s->layer[b->slot];
    const pack_file *pf = &L->files[b->rank];
    char why[256];
    if (res < 0) {
        COUNT(s, errors, 1);
        snprintf(why, sizeof why, "read failed: %s (errno %lld)", strerror((int)-res), -res);
        block_failed(s, f, b, sl->offset, why);
    } else if (res != (long long)s->block_bytes) {
        COUNT(s, errors, 1);
        snprintf(why, sizeof why, "short read: %lld of %u bytes", res, s->block_bytes);
        block_failed(s, f, b, sl->offset, why);
    } else if (!engram_block_ok(sl->buf, s->block_bytes,
                                engram_block_seed(pf->h.source_id, pf->h.row_first + b->block * s->block_rows))) {
        COUNT(s, errors, 1);
        block_failed(s, f, b, sl->offset, "its xxh3-128 does not match: the block on disk is damaged (dskit engram "
                                          "verify checks the whole pack)");
    } else {
        COUNT(s, reads, 1);
        COUNT(s, read_bytes, res);
        int64_t n = 0;
        for (int32_t t = b->first_target; t >= 0; t = f->targets[t].next, n++) {
            const uint8_t *rec = sl->buf + (size_t)f->targets[t].within * (size_t)L->rec_bytes;
            memcpy(f->targets[t].dst, rec, (size_t)L->rec_bytes);
            row_cache_put(&s->cache, row_cache_key(b->slot, f->targets[t].row), rec);
        }
        COUNT(s, rows, n);
        b->state = BLK_DONE;
        f->pending[b->slot]--;
    }
    release_slot(s, sl);
}

/* The injected fault for read number n, if any (DSKIT_ENGRAM_FAULT). */
static const fault *fault_for(const engram_store *s, uint64_t n)
{
    for (int i = 0; i < s->n_faults; i++)
        if (s->faults[i].at == n)
            return &s->faults[i];
    return NULL;
}

/* Reap up to REAP_BATCH completions, waiting at most wait_s for the first min_nr. Returns the count or
 * -errno. */
static int reap(engram_store *s, int min_nr, double wait_s)
{
    struct io_event ev[REAP_BATCH];
    if (wait_s < 0)
        wait_s = 0;
    struct timespec ts = {.tv_sec = (time_t)wait_s, .tv_nsec = (long)((wait_s - (double)(time_t)wait_s) * 1e9)};
    int n = io_getevents(s->ctx, min_nr, REAP_BATCH, ev, &ts);
    if (n < 0)
        return n == -EINTR ? 0 : n;
    for (int i = 0; i < n; i++) {
        io_slot *sl = ev[i].data;
        long long res = (long long)(long)ev[i].res; /* the kernel's long: bytes or -errno */
        s->n_busy--;
        if (sl->f)
            sl->f->inflight[sl->f->blocks[sl->blk].slot]--;
        const fault *ft = s->n_faults ? fault_for(s, sl->read_no) : NULL;
        if (ft && ft->kind == FAULT_EIO)
            res = -EIO;
        else if (ft && ft->kind == FAULT_SHORT && res > 0)
            res /= 2;
        else if (ft && ft->kind == FAULT_SLOW) {
            sl->state = SLOT_DELAYED;
            sl->res = res;
            sl->release_at = sl->t_submit + ft->ms / 1e3;
            s->n_delayed++;
            continue;
        }
        complete(s, sl, res);
    }
    return n;
}

/* Deliver the held-back (injected slow) reads whose time has come; all of them when force. Returns the
 * time until the next one is due (a large number when none). */
static double release_delayed(engram_store *s, int force)
{
    double next = 1e9;
    if (!s->n_delayed)
        return next;
    double now = dsk_now();
    for (int k = 0; k < s->n_slots && s->n_delayed; k++) {
        io_slot *sl = &s->slots[k];
        if (sl->state != SLOT_DELAYED)
            continue;
        if (force || sl->release_at <= now) {
            s->n_delayed--;
            complete(s, sl, sl->res);
        } else if (sl->release_at - now < next) {
            next = sl->release_at - now;
        }
    }
    return next;
}

/* Hand the kernel as many pending block reads as there are free slots, oldest fetch first. A batch holds
 * consecutive blocks of one fetch, so a partly refused batch is rolled back by moving next_submit. */
static void submit_more(engram_store *s)
{
    for (engram_fetch *f = s->fetches; f && s->n_free; f = f->next) {
        while (f->next_submit < f->n_blocks && s->n_free) {
            struct iocb *batch[SUBMIT_BATCH];
            io_slot *sls[SUBMIT_BATCH];
            int32_t first = f->next_submit;
            int nb = 0;
            double now = dsk_now();
            while (nb < SUBMIT_BATCH && f->next_submit < f->n_blocks && s->n_free) {
                int32_t bi = f->next_submit++;
                block_req *b = &f->blocks[bi];
                io_slot *sl = &s->slots[s->free_slots[--s->n_free]];
                const pack_file *pf = &s->layer[b->slot].files[b->rank];
                sl->pf = pf;
                sl->offset = pf->h.data_offset + b->block * s->block_bytes;
                io_prep_pread(&sl->cb, pf->fd, sl->buf, s->block_bytes, (long long)sl->offset);
                sl->cb.data = sl;
                sl->f = f;
                sl->blk = bi;
                sl->state = SLOT_BUSY;
                sl->t_submit = now;
                batch[nb] = &sl->cb;
                sls[nb++] = sl;
            }
            int r = io_submit(s->ctx, nb, batch);
            int ok = r > 0 ? r : 0;
            for (int i = 0; i < ok; i++) {
                sls[i]->read_no = ++s->reads_submitted;
                f->blocks[sls[i]->blk].state = BLK_INFLIGHT;
                f->inflight[f->blocks[sls[i]->blk].slot]++;
            }
            s->n_busy += ok;
            if (ok == nb)
                continue;
            /* r < 0 other than EAGAIN: the first iocb itself is refused; fail it so the rest can go */
            int refused = r < 0 && r != -EAGAIN;
            if (refused) {
                char why[160];
                snprintf(why, sizeof why, "io_submit refused the read: %s (errno %d)", strerror(-r), -r);
                COUNT(s, errors, 1);
                block_failed(s, f, &f->blocks[sls[0]->blk], sls[0]->offset, why);
                release_slot(s, sls[0]);
            }
            for (int i = ok + refused; i < nb; i++)
                release_slot(s, sls[i]);
            f->next_submit = first + ok + refused;
            if (!refused)
                return; /* the kernel's queue is full: retry when reads complete */
        }
    }
}

int engram_fetch_begin(engram_store *s, const engram_fetch_layer *layers, engram_fetch **out)
{
    *out = NULL;
    int64_t total = 0;
    for (int l = 0; l < s->n_layers; l++) {
        const engram_fetch_layer *q = &layers[l];
        const store_layer *L = &s->layer[l];
        if (q->n < 0 || q->n > ENGRAM_MAX_FETCH_ROWS || (q->n && (!q->rows || !q->dst)))
            return dsk_err("engram layer %d: %lld rows (at most %d, with rows and dst given)", L->layer_id,
                           (long long)q->n, ENGRAM_MAX_FETCH_ROWS);
        for (int64_t i = 0; i < q->n; i++)
            if (q->rows[i] < 0 || q->rows[i] >= L->rows)
                return dsk_err("engram layer %d: row %lld (entry %lld) is outside its %lld rows", L->layer_id,
                               (long long)q->rows[i], (long long)i, (long long)L->rows);
        total += q->n;
    }
    engram_fetch *f = dsk_calloc(1, sizeof *f);
    if (!f)
        return -1;
    f->s = s;
    memcpy(f->req, layers, sizeof(engram_fetch_layer) * (size_t)s->n_layers);
    if (!s->host && total) {
        size_t hsize = 2;
        while (hsize < 2 * (size_t)total)
            hsize <<= 1;
        int32_t *index = dsk_malloc(sizeof(int32_t) * hsize);
        f->blocks = dsk_malloc(sizeof(block_req) * (size_t)total);
        f->targets = dsk_malloc(sizeof(target) * (size_t)total);
        if (!index || !f->blocks || !f->targets) {
            free(index);
            free(f->blocks);
            free(f->targets);
            free(f);
            return dsk_err_ctx("engram fetch of %lld rows", (long long)total);
        }
        memset(index, 0xff, sizeof(int32_t) * hsize);
        int32_t nt = 0;
        for (int l = 0; l < s->n_layers; l++) {
            const engram_fetch_layer *q = &layers[l];
            const store_layer *L = &s->layer[l];
            int64_t hits = 0, pads = 0;
            for (int64_t i = 0; i < q->n; i++) {
                int64_t row = q->rows[i];
                uint8_t *dst = q->dst + i * L->rec_bytes;
                if ((uint64_t)row - L->own_first >= L->own_count) {
                    engram_pad_record(dst, L->width);
                    pads++;
                    continue;
                }
                const uint8_t *hit = row_cache_get(&s->cache, row_cache_key(l, row));
                if (hit) {
                    memcpy(dst, hit, (size_t)L->rec_bytes);
                    hits++;
                    continue;
                }
                uint32_t rank = (uint32_t)((uint64_t)row / L->chunk);
                uint64_t local = (uint64_t)row - L->files[rank].h.row_first;
                uint64_t blk = local / s->block_rows;
                uint64_t key = ((uint64_t)l << 60) | ((uint64_t)rank << 56) | blk;
                size_t h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (hsize - 1);
                int32_t bi;
                for (;;) { /* linear probing; the blocks array holds the keys */
                    bi = index[h];
                    if (bi < 0) {
                        bi = index[h] = f->n_blocks++;
                        f->blocks[bi] = (block_req){.slot = (uint8_t)l, .rank = (uint8_t)rank, .state = BLK_PENDING,
                                                    .block = blk, .first_target = -1};
                        f->pending[l]++;
                        break;
                    }
                    const block_req *b = &f->blocks[bi];
                    if (b->slot == l && b->rank == rank && b->block == blk)
                        break;
                    h = (h + 1) & (hsize - 1);
                }
                f->targets[nt] = (target){.dst = dst, .row = row, .next = f->blocks[bi].first_target,
                                          .within = (uint32_t)(local % s->block_rows)};
                f->blocks[bi].first_target = nt++;
            }
            COUNT(s, cache_hits, hits);
            COUNT(s, cache_misses, q->n - hits - pads);
            COUNT(s, rows, hits + pads);
        }
        free(index);
    }
    engram_fetch **tail = &s->fetches;
    while (*tail)
        tail = &(*tail)->next;
    *tail = f;
    if (!s->host)
        submit_more(s);
    *out = f;
    return 0;
}

static void host_copy(engram_fetch *f, int slot)
{
    if (f->host_done[slot])
        return;
    const engram_fetch_layer *q = &f->req[slot];
    int rec = f->s->layer[slot].rec_bytes;
    for (int64_t i = 0; i < q->n; i++)
        engram_host_record(f->s, slot, q->rows[i], q->dst + i * rec);
    COUNT(f->s, rows, q->n);
    f->host_done[slot] = 1;
}

int engram_fetch_wait(engram_fetch *f, int slot, int timeout_ms)
{
    engram_store *s = f->s;
    if (slot < 0 || slot >= s->n_layers)
        return dsk_err("engram: layer slot %d is not one of the store's %d", slot, s->n_layers);
    if (timeout_ms < 0)
        return dsk_err("engram: a wait needs a timeout (got %d ms)", timeout_ms);
    if (s->host) {
        host_copy(f, slot);
        return 0;
    }
    double deadline = dsk_now() + timeout_ms / 1e3;
    for (;;) {
        submit_more(s);
        double next = release_delayed(s, 0);
        if (!f->pending[slot])
            break;
        double left = deadline - dsk_now();
        if (left <= 0) {
            COUNT(s, timeouts, 1);
            return dsk_err("engram layer %d: %lld block reads still outstanding after %d ms (%d in flight, %d free "
                           "read slots)", s->layer[slot].layer_id, (long long)f->pending[slot], timeout_ms, s->n_busy,
                           s->n_free);
        }
        if (next < left)
            left = next;
        if (!s->n_busy) {
            /* nothing in the kernel: an injected delay is running, or io_submit said EAGAIN */
            double nap = left < 1e-3 ? left : 1e-3;
            struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(nap * 1e9)};
            nanosleep(&ts, NULL);
            continue;
        }
        /* Ask for as many completions as the layer has reads in flight (all of them must come back
         * before it is done, so this never waits longer) to save io_getevents calls. While blocks of
         * the layer still wait for a read slot, ask for a few only, so the freed slots are refilled. */
        int64_t want = f->inflight[slot];
        int64_t cap = f->pending[slot] > f->inflight[slot] ? s->n_slots / 8 + 1 : REAP_BATCH;
        if (want > cap)
            want = cap;
        if (want > REAP_BATCH) /* io_getevents refuses min_nr > nr */
            want = REAP_BATCH;
        if (want < 1)
            want = 1;
        int n = reap(s, (int)want, left);
        if (n < 0)
            return dsk_err("engram layer %d: io_getevents: %s", s->layer[slot].layer_id, strerror(-n));
    }
    return f->failed[slot] ? dsk_err("%s", f->err[slot]) : 0;
}

int engram_fetch_poll(engram_fetch *f)
{
    engram_store *s = f->s;
    int pending = 0;
    if (s->host) {
        for (int l = 0; l < s->n_layers; l++)
            host_copy(f, l);
        return 0;
    }
    submit_more(s);
    int n = s->n_busy ? reap(s, 0, 0) : 0;
    if (n < 0)
        return dsk_err("engram: io_getevents: %s", strerror(-n));
    release_delayed(s, 0);
    submit_more(s);
    for (int l = 0; l < s->n_layers; l++)
        pending += f->pending[l] > 0;
    return pending;
}

void engram_fetch_end(engram_fetch *f)
{
    if (!f)
        return;
    engram_store *s = f->s;
    for (int k = 0; k < s->n_slots; k++)
        if (s->slots[k].f == f)
            s->slots[k].f = NULL; /* reaped later into the free list */
    for (engram_fetch **p = &s->fetches; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            break;
        }
    free(f->blocks);
    free(f->targets);
    free(f);
}

void engram_drain(engram_store *s, int timeout_ms)
{
    release_delayed(s, 1);
    double deadline = dsk_now() + timeout_ms / 1e3;
    while (s->n_busy) {
        double left = deadline - dsk_now();
        if (left <= 0 || reap(s, 1, left) < 0)
            return;
        release_delayed(s, 1);
    }
}

/* A row served from the checkpoint's mapping (host placement): pad records outside this rank's rows. */
void engram_host_record(const engram_store *s, int slot, int64_t row, uint8_t *dst)
{
    const store_layer *L = &s->layer[slot];
    size_t w = (size_t)L->width, ns = w / 32;
    if ((uint64_t)row - L->own_first >= L->own_count) {
        engram_pad_record(dst, L->width);
        return;
    }
    memcpy(dst, L->values + (size_t)row * w, w);
    memcpy(dst + w, L->scales + (size_t)row * ns, ns);
}
