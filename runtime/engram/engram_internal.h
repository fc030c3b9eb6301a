/* The store's insides, shared by engram_store.c (open, close, host rows, counters) and engram_fetch.c
 * (the AIO read engine). Not for use outside runtime/engram. */
#ifndef DSK_ENGRAM_INTERNAL_H
#define DSK_ENGRAM_INTERNAL_H

#include "runtime/engram/engram_cache.h"
#include "runtime/engram/engram_format.h"
#include "runtime/engram/engram_store.h"

#include <libaio.h>
#include <stdatomic.h>
#include <string.h>

#define ENGRAM_MAX_FAULTS 16
#define ENGRAM_CLOSE_WAIT_MS 10000 /* close waits this long for reads still in flight */

typedef struct {
    char path[4096];
    int fd;               /* -1: not opened (another rank's file) */
    engram_header h;
} pack_file;

typedef struct {
    int layer_id;
    int64_t rows;
    int width, rec_bytes;
    uint32_t tp;                       /* nvme: the pack's split */
    uint64_t chunk;                    /* nvme: ceil(rows / tp) */
    pack_file files[ENGRAM_MAX_TP];    /* nvme: [rank] */
    uint64_t own_first, own_count;     /* rows served; the rest get the pad row */
    const uint8_t *values, *scales;    /* host */
} store_layer;

enum { SLOT_FREE, SLOT_BUSY, SLOT_DELAYED };

typedef struct {
    struct iocb cb;
    uint8_t *buf;          /* block_bytes of the O_DIRECT memory */
    int state;
    double t_submit;
    double release_at;     /* SLOT_DELAYED: when an injected slow read completes */
    long long res;         /* SLOT_DELAYED: the result held back */
    uint64_t read_no;      /* 1-based count of reads this store submitted */
    const pack_file *pf;   /* what is read: pf, from byte offset */
    uint64_t offset;
    struct engram_fetch *f; /* owner; NULL once the fetch ended (the slot is reaped and freed later) */
    int32_t blk;           /* index into f->blocks */
} io_slot;

typedef enum { FAULT_EIO, FAULT_SHORT, FAULT_SLOW, FAULT_NODIRECT } fault_kind;

typedef struct {
    fault_kind kind;
    uint64_t at; /* read number */
    int ms;      /* FAULT_SLOW */
} fault;

typedef struct {
    atomic_uint_least64_t rows, reads, read_bytes, cache_hits, cache_misses, slow_reads, errors, timeouts;
} store_counters;

struct engram_store {
    char placement[4200];
    int host;
    int n_layers;
    store_layer layer[ENGRAM_MAX_LAYERS];
    uint32_t block_bytes, block_rows;
    int slow_ms;

    /* nvme */
    io_context_t ctx;
    int have_ctx;
    io_slot *slots;
    int n_slots;
    int *free_slots, n_free; /* stack of free slot indices */
    int n_busy, n_delayed;   /* in the kernel / held back by an injected slow read */
    uint8_t *io_mem;
    int own_io_mem;
    row_cache cache;
    fault faults[ENGRAM_MAX_FAULTS];
    int n_faults;
    uint64_t reads_submitted;
    struct engram_fetch *fetches; /* open fetches in begin order: reads are submitted in this order */
    uint64_t slow_logged;

    store_counters c;
};

/* Bump a counter (relaxed: they are statistics, read by other threads). */
#define COUNT(s, field, n) atomic_fetch_add_explicit(&(s)->c.field, (uint64_t)(n), memory_order_relaxed)

/* Parse DSKIT_ENGRAM_FAULT ("eio@N,short@N,slow@N:MS,nodirect"); fails naming the bad item. */
int engram_parse_faults(const char *spec, fault *out, int *n_out);

/* engram_fetch.c: drain every read still in the kernel, at most timeout_ms (close). */
void engram_drain(engram_store *s, int timeout_ms);
/* The pad row REF gives rows outside a rank's half: values 0, scales 1.0 (e8m0 127 = 2^0). */
static inline void engram_pad_record(uint8_t *dst, int width)
{
    memset(dst, 0, (size_t)width);
    memset(dst + width, 127, (size_t)(width / 32));
}

/* Copy the record of (host) row into dst, or the pad row for a row outside own range. */
void engram_host_record(const engram_store *s, int slot, int64_t row, uint8_t *dst);

#endif
