/* The Engram row store: rows through `nvme` (cold, cached, in waves, into caller memory) and `host` are
 * byte-identical to the checkpoint's, for the tiny preset and real-width tables, from tp 1 and tp 2
 * packs; rank-restricted stores give REF's pad row elsewhere; a damaged block, an I/O error, a short
 * read and a slow read (injected through DSKIT_ENGRAM_FAULT) fail or count exactly the fetch they hit
 * and the store goes on; O_DIRECT refused (tmpfs) falls back once, said on stderr; the CLOCK cache
 * never returns a wrong record. */
#include "runtime/engram/engram_cache.h"
#include "runtime/engram/engram_format.h"
#include "tests/engram/engram_test_util.h"

#include <sys/statfs.h>

#define TMPFS_MAGIC_ 0x01021994

static char root[512], tiny[600], wide[600], tpack1[600], tpack2[600], wpack1[600], wpack2[600];
static st_set *ck_tiny, *ck_wide;
static engram_source src_tiny, src_wide;
static uint64_t seed;

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "%s/engram-store-test-XXXXXX", test_binary_dir());
    if (!mkdtemp(root))
        return -1;
    seed = eng_seed();
    printf("engram store test: seed %" PRIu64 " in %s\n", seed, root);
    snprintf(tiny, sizeof tiny, "%s/tiny", root);
    snprintf(wide, sizeof wide, "%s/wide", root);
    snprintf(tpack1, sizeof tpack1, "%s/tiny-tp1", root);
    snprintf(tpack2, sizeof tpack2, "%s/tiny-tp2", root);
    snprintf(wpack1, sizeof wpack1, "%s/wide-tp1", root);
    snprintf(wpack2, sizeof wpack2, "%s/wide-tp2", root);
    const int ids[2] = {1, 14};
    engram_pack_opts o1 = {.tp = 1}, o2 = {.tp = 2};
    if (eng_make_tiny(tiny, seed) || eng_make_wide(wide, 2001, 1503, seed) || st_open(tiny, &ck_tiny) ||
        engram_source_from_model(ck_tiny, tiny, &src_tiny) || st_open(wide, &ck_wide) ||
        engram_source_from_checkpoint(ck_wide, ids, 2, &src_wide) || engram_pack(&src_tiny, tpack1, &o1, NULL, NULL) ||
        engram_pack(&src_tiny, tpack2, &o2, NULL, NULL) || engram_pack(&src_wide, wpack1, &o1, NULL, NULL) ||
        engram_pack(&src_wide, wpack2, &o2, NULL, NULL)) {
        fprintf(stderr, "setup: %s\n", dsk_err_msg());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    st_close(ck_tiny);
    st_close(ck_wide);
    return eng_rm_tree(root);
}

/* Rows for n positions × 24 columns of each layer: random, plus the table's edges, the rank boundary,
 * and repeats (two positions reading one row, rows sharing a block). */
static int64_t *make_rows(const engram_source *src, int n, dsk_rng *r)
{
    int64_t per = (int64_t)n * 24;
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)(per * src->n_layers));
    assert_non_null(rows);
    for (int l = 0; l < src->n_layers; l++) {
        int64_t R = src->table[l].rows, c = (R + 1) / 2, *q = rows + l * per;
        for (int64_t i = 0; i < per; i++)
            q[i] = (int64_t)dsk_rng_below(r, (uint64_t)R);
        const int64_t edges[] = {0, R - 1, c - 1, c, 1, R - 2};
        for (size_t i = 0; i < sizeof edges / sizeof edges[0] && (int64_t)i < per; i++)
            q[i] = edges[i];
        if (per > 12)
            q[per - 1] = q[7], q[per - 2] = (q[8] + 1) % R;
    }
    return rows;
}

/* One fetch of rows (per layer: n·24) and the check that every record is the checkpoint's (or, outside
 * [own_first, own_first + own_count), the pad row). */
static void fetch_and_check(engram_store *s, const engram_source *src, const int64_t *rows, int n, uint64_t own_tp,
                            uint64_t own_rank)
{
    int64_t per = (int64_t)n * 24;
    int nl = src->n_layers;
    int rec = engram_store_record_bytes(s, 0);
    uint8_t *dst = malloc((size_t)(per * nl * rec) + 64);
    assert_non_null(dst);
    memset(dst, 0xee, (size_t)(per * nl * rec) + 64); /* guard bytes after the last record */
    engram_fetch_layer q[ENGRAM_MAX_LAYERS] = {{0}};
    for (int l = 0; l < nl; l++)
        q[l] = (engram_fetch_layer){.rows = rows + l * per, .n = per, .dst = dst + (size_t)(l * per * rec)};
    engram_fetch *f;
    assert_ok(engram_fetch_begin(s, q, &f));
    for (int l = nl - 1; l >= 0; l--) /* any order */
        assert_ok(engram_fetch_wait(f, l, 5000));
    engram_fetch_end(f);
    uint8_t want[4096];
    for (int l = 0; l < nl; l++) {
        const engram_table *t = &src->table[l];
        uint64_t first = 0, count = (uint64_t)t->rows;
        if (own_tp)
            engram_rank_rows((uint64_t)t->rows, (uint32_t)own_tp, (uint32_t)own_rank, &first, &count);
        for (int64_t i = 0; i < per; i++) {
            int64_t row = q[l].rows[i];
            if ((uint64_t)row - first < count)
                eng_expected(t, row, want);
            else { /* REF's pad row: values 0, scales 1.0 (e8m0 127) */
                memset(want, 0, (size_t)t->width);
                memset(want + t->width, 127, (size_t)t->width / 32);
            }
            if (memcmp(q[l].dst + i * rec, want, (size_t)rec))
                fail_msg("layer %d row %lld (entry %lld) differs (%s)", t->layer_id, (long long)row, (long long)i,
                         engram_store_placement(s));
        }
    }
    for (int i = 0; i < 64; i++)
        assert_int_equal(dst[per * nl * rec + i], 0xee);
    free(dst);
}

static void open_store(const char *placement, const engram_source *src, const engram_store_opts *o,
                       engram_store **s)
{
    if (engram_store_open(placement, src, o, s))
        fail_msg("engram_store_open(%s): %s", placement, dsk_err_msg());
}

/* nvme cold, then the same rows again from the cache, then host: byte-identical to the checkpoint. */
static void exact_for(const char *pack, const engram_source *src, int positions)
{
    dsk_rng r;
    dsk_rng_seed(&r, seed ^ (uint64_t)positions);
    int64_t *rows = make_rows(src, positions, &r);
    char placement[700];
    snprintf(placement, sizeof placement, "nvme:%s", pack);
    engram_store_opts o = {.cache_bytes = 8u << 20};
    engram_store *s;
    open_store(placement, src, &o, &s);
    assert_ok(engram_store_drop_cache(s));
    engram_counters c0, c1, c2;
    engram_store_counters(s, &c0);
    fetch_and_check(s, src, rows, positions, 0, 0);
    engram_store_counters(s, &c1);
    fetch_and_check(s, src, rows, positions, 0, 0);
    engram_store_counters(s, &c2);
    uint64_t total = (uint64_t)positions * 24 * (uint64_t)src->n_layers;
    assert_int_equal(c1.rows - c0.rows, total);
    assert_int_equal(c1.cache_hits - c0.cache_hits, 0);
    assert_true(c1.reads - c0.reads > 0);
    assert_true(c1.reads - c0.reads < total); /* repeats and shared blocks cost one read */
    assert_int_equal(c1.read_bytes - c0.read_bytes, (c1.reads - c0.reads) * 4096);
    assert_int_equal(c2.cache_hits - c1.cache_hits, total); /* warm: every row from the cache, no read */
    assert_int_equal(c2.reads - c1.reads, 0);
    assert_int_equal(c2.errors + c2.timeouts, 0);
    engram_store_close(s);

    open_store("host", src, NULL, &s);
    fetch_and_check(s, src, rows, positions, 0, 0);
    engram_store_close(s);
    free(rows);
}

static void test_exact_tiny(void **state)
{
    (void)state;
    exact_for(tpack1, &src_tiny, 1);
    exact_for(tpack1, &src_tiny, 64);
    exact_for(tpack2, &src_tiny, 16);
    exact_for(tpack2, &src_tiny, 64);
}

static void test_exact_wide(void **state)
{
    (void)state;
    exact_for(wpack1, &src_wide, 16);
    exact_for(wpack2, &src_wide, 64);
    exact_for(wpack2, &src_wide, 1);
}

/* A round bigger than the queue read in waves of 3, into caller-provided read memory; the source-less
 * open (headers only) reads the same bytes. */
static void test_waves_and_caller_memory(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, seed + 7);
    int64_t *rows = make_rows(&src_wide, 40, &r);
    void *mem;
    assert_int_equal(posix_memalign(&mem, 4096, 3 * 4096), 0);
    char placement[700];
    snprintf(placement, sizeof placement, "nvme:%s", wpack2);
    engram_store_opts o = {.queue_depth = 3, .io_mem = mem, .io_mem_bytes = 3 * 4096};
    engram_store *s;
    open_store(placement, NULL, &o, &s);
    fetch_and_check(s, &src_wide, rows, 40, 0, 0);
    engram_store_close(s);
    o.io_mem_bytes = 2 * 4096; /* too small */
    assert_int_not_equal(engram_store_open(placement, NULL, &o, &s), 0);
    assert_non_null(strstr(dsk_err_msg(), "read memory"));
    o.io_mem = (char *)mem + 8;
    o.io_mem_bytes = 3 * 4096;
    assert_int_not_equal(engram_store_open(placement, NULL, &o, &s), 0);
    free(mem);
    free(rows);
}

/* Rank 1 of a tp-2 split: its rows exact, rank 0's rows the pad row; nvme opens rank 1's files only. */
static void test_rank_restricted(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, seed + 11);
    int64_t *rows = make_rows(&src_wide, 16, &r);
    char dir[700], path[800], placement[800];
    snprintf(dir, sizeof dir, "%s/rank1-only", root);
    assert_ok(eng_copy_dir(wpack2, dir));
    snprintf(path, sizeof path, "%s/layer1.rank0of2.engram", dir);
    assert_int_equal(remove(path), 0);
    snprintf(placement, sizeof placement, "nvme:%s", dir);
    engram_store_opts o = {.tp = 2, .rank = 1, .cache_bytes = 1 << 20};
    engram_store *s;
    open_store(placement, &src_wide, &o, &s);
    fetch_and_check(s, &src_wide, rows, 16, 2, 1);
    fetch_and_check(s, &src_wide, rows, 16, 2, 1);
    engram_store_close(s);
    open_store("host", &src_wide, &o, &s);
    fetch_and_check(s, &src_wide, rows, 16, 2, 1);
    engram_store_close(s);
    o.rank = 0; /* rank 0's file is gone */
    assert_int_not_equal(engram_store_open(placement, &src_wide, &o, &s), 0);
    assert_non_null(strstr(dsk_err_msg(), "layer1.rank0of2.engram"));
    o.tp = 4;
    assert_int_not_equal(engram_store_open(placement, &src_wide, &o, &s), 0);
    assert_non_null(strstr(dsk_err_msg(), "tp 2"));
    free(rows);
}

/* Fetch one row of layer slot 0 into rec; returns the wait's status. */
static int fetch_one(engram_store *s, int64_t row, int timeout_ms, uint8_t *rec)
{
    engram_fetch_layer q[ENGRAM_MAX_LAYERS] = {{0}};
    q[0] = (engram_fetch_layer){.rows = &row, .n = 1, .dst = rec};
    engram_fetch *f;
    assert_ok(engram_fetch_begin(s, q, &f));
    int rc = engram_fetch_wait(f, 0, timeout_ms);
    if (rc && strstr(dsk_err_msg(), "outstanding")) /* timed out: a longer wait must still deliver it */
        rc = engram_fetch_wait(f, 0, 5000) == 0 ? 1 : -1;
    engram_fetch_end(f);
    return rc;
}

/* A damaged block found on first read (blocks are checked lazily by default): that fetch fails naming
 * file, block and row, other rows and layers are served, the bad block is never cached. */
static void test_bad_block_lazy(void **state)
{
    (void)state;
    char dir[700], path[800], placement[800];
    snprintf(dir, sizeof dir, "%s/lazy-bad", root);
    assert_ok(eng_copy_dir(wpack1, dir));
    snprintf(path, sizeof path, "%s/layer1.rank0of1.engram", dir);
    assert_ok(eng_flip_byte(path, 4096 + 2 * 4096 + 100)); /* block 2: rows 30..44 */
    snprintf(placement, sizeof placement, "nvme:%s", dir);
    engram_store_opts o = {.cache_bytes = 1 << 20};
    engram_store *s;
    open_store(placement, &src_wide, &o, &s);
    uint8_t rec[264], want[264];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(fetch_one(s, 33, 5000, rec), -1);
        const char *m = dsk_err_msg();
        if (!strstr(m, "layer1.rank0of1.engram") || !strstr(m, "block 2 ") || !strstr(m, "row 33") ||
            !strstr(m, "damaged"))
            fail_msg("unexpected message: %s", m);
    }
    assert_ok(fetch_one(s, 29, 5000, rec));
    eng_expected(&src_wide.table[0], 29, want);
    assert_memory_equal(rec, want, 264);
    engram_counters c;
    engram_store_counters(s, &c);
    assert_int_equal(c.errors, 2);
    engram_store_close(s);
    o.verify_blocks = 1; /* checked at open instead */
    assert_int_not_equal(engram_store_open(placement, &src_wide, &o, &s), 0);
    assert_non_null(strstr(dsk_err_msg(), "block 2 "));
}

/* DSKIT_ENGRAM_FAULT: read 2 fails with EIO, read 4 comes back short, read 6 takes 300 ms. Each hits
 * exactly its fetch; the store serves the next ones; the slow read times out a short wait, is counted and
 * logged, and arrives for a longer wait. */
static void test_injected_faults(void **state)
{
    (void)state;
    char placement[700], errpath[700], log[8192];
    snprintf(placement, sizeof placement, "nvme:%s", wpack1);
    setenv("DSKIT_ENGRAM_FAULT", "eio@2,short@4,slow@6:300", 1);
    engram_store_opts o = {.slow_read_ms = 100}; /* no cache: every fetch reads */
    engram_store *s;
    int saved;
    eng_capture_stderr_begin(&saved, errpath, sizeof errpath);
    int rc = engram_store_open(placement, &src_wide, &o, &s);
    unsetenv("DSKIT_ENGRAM_FAULT");
    if (rc) {
        eng_capture_stderr_end(saved, errpath, log, sizeof log);
        fail_msg("open: %s", dsk_err_msg());
    }
    uint8_t rec[264], want[264];
    const int64_t row[7] = {0, 100, 200, 300, 400, 500, 600};
    int got[7];
    char msg[7][1024];
    for (int k = 0; k < 7; k++) {
        got[k] = fetch_one(s, row[k], k == 5 ? 50 : 5000, rec);
        snprintf(msg[k], sizeof msg[k], "%s", dsk_err_msg());
        eng_expected(&src_wide.table[0], row[k], want);
        if (got[k] >= 0 && memcmp(rec, want, 264))
            got[k] = 99;
    }
    engram_counters c;
    engram_store_counters(s, &c);
    engram_store_close(s);
    eng_capture_stderr_end(saved, errpath, log, sizeof log);
    assert_int_equal(got[0], 0);
    assert_int_equal(got[1], -1);
    if (!strstr(msg[1], "layer1.rank0of1.engram") || !strstr(msg[1], "row 100") || !strstr(msg[1], "errno 5"))
        fail_msg("eio: %s", msg[1]);
    assert_int_equal(got[2], 0);
    assert_int_equal(got[3], -1);
    if (!strstr(msg[3], "short read: 2048 of 4096") || !strstr(msg[3], "row 300"))
        fail_msg("short: %s", msg[3]);
    assert_int_equal(got[4], 0);
    assert_int_equal(got[5], 1); /* timed out at 50 ms, then arrived */
    assert_int_equal(got[6], 0);
    assert_int_equal(c.errors, 2);
    assert_int_equal(c.timeouts, 1);
    assert_int_equal(c.slow_reads, 1);
    assert_int_equal(c.reads, 5);
    assert_non_null(strstr(log, "test-only fault injection"));
    assert_non_null(strstr(log, "slow read"));
    setenv("DSKIT_ENGRAM_FAULT", "eio@x", 1);
    assert_int_not_equal(engram_store_open(placement, &src_wide, &o, &s), 0);
    unsetenv("DSKIT_ENGRAM_FAULT");
    assert_non_null(strstr(dsk_err_msg(), "eio@x"));
}

/* A fetch ended with its reads in flight, then another fetch, two fetches open at once, and the close. */
static void test_end_in_flight(void **state)
{
    (void)state;
    dsk_rng r;
    dsk_rng_seed(&r, seed + 13);
    int64_t *rows = make_rows(&src_wide, 64, &r);
    char placement[700];
    snprintf(placement, sizeof placement, "nvme:%s", wpack2);
    engram_store_opts o = {.queue_depth = 16, .cache_bytes = 64 << 10};
    engram_store *s;
    open_store(placement, &src_wide, &o, &s);
    uint8_t *dst = malloc((size_t)64 * 24 * 264 * 2);
    assert_non_null(dst);
    engram_fetch_layer q[ENGRAM_MAX_LAYERS] = {{0}};
    q[0] = (engram_fetch_layer){.rows = rows, .n = 64 * 24, .dst = dst};
    q[1] = (engram_fetch_layer){.rows = rows + 64 * 24, .n = 64 * 24, .dst = dst + 64 * 24 * 264};
    engram_fetch *a, *b;
    assert_ok(engram_fetch_begin(s, q, &a));
    engram_fetch_end(a); /* abandoned mid-flight */
    assert_ok(engram_fetch_begin(s, q, &a));
    assert_ok(engram_fetch_begin(s, q, &b)); /* the same rows twice, both open */
    assert_ok(engram_fetch_wait(b, 1, 5000));
    assert_true(engram_fetch_poll(a) >= 0);
    assert_ok(engram_fetch_wait(a, 0, 5000));
    assert_ok(engram_fetch_wait(a, 1, 5000));
    engram_fetch_end(b);
    engram_fetch_end(a);
    fetch_and_check(s, &src_wide, rows, 64, 0, 0);
    assert_ok(engram_fetch_begin(s, q, &a)); /* left open: close ends it */
    engram_store_close(s);
    free(dst);
    free(rows);
}

/* Open pack with stderr captured into log; the rows of a fetch checked. */
static void open_check_capture(const char *dir, const engram_source *src, char *log, size_t cap)
{
    char placement[800], errpath[700];
    snprintf(placement, sizeof placement, "nvme:%s", dir);
    dsk_rng r;
    dsk_rng_seed(&r, seed + 17);
    int64_t *rows = make_rows(src, 16, &r);
    int saved;
    engram_store *s = NULL;
    eng_capture_stderr_begin(&saved, errpath, sizeof errpath);
    int rc = engram_store_open(placement, src, NULL, &s);
    eng_capture_stderr_end(saved, errpath, log, cap);
    if (rc)
        fail_msg("open %s: %s", dir, dsk_err_msg());
    fetch_and_check(s, src, rows, 16, 0, 0);
    engram_store_close(s);
    free(rows);
}

/* O_DIRECT refused: the same rows through the page cache on the same path, said once on stderr. Linux
 * tmpfs accepts O_DIRECT since 6.6, so the refusal is also simulated (DSKIT_ENGRAM_FAULT=nodirect). */
static void test_odirect_fallback(void **state)
{
    (void)state;
    char log[8192];
    setenv("DSKIT_ENGRAM_FAULT", "nodirect", 1);
    open_check_capture(tpack2, &src_tiny, log, sizeof log);
    unsetenv("DSKIT_ENGRAM_FAULT");
    const char *hit = strstr(log, "reading through the page cache");
    if (!hit)
        fail_msg("no fallback message in: %s", log);
    assert_null(strstr(hit + 1, "reading through the page cache")); /* once, though 4 files were opened */

    struct statfs fs;
    if (statfs("/dev/shm", &fs) || fs.f_type != TMPFS_MAGIC_) {
        printf("no tmpfs at /dev/shm: the real-tmpfs half is skipped\n");
        return;
    }
    char dir[128];
    snprintf(dir, sizeof dir, "/dev/shm/dskit-engram-test-%ld", (long)getpid());
    assert_ok(eng_copy_dir(tpack2, dir));
    open_check_capture(dir, &src_tiny, log, sizeof log);
    eng_rm_tree(dir);
    hit = strstr(log, "reading through the page cache");
    printf("tmpfs at /dev/shm %s O_DIRECT\n", hit ? "refuses" : "accepts");
    assert_true(!hit || !strstr(hit + 1, "reading through the page cache"));
}

static void test_bad_requests(void **state)
{
    (void)state;
    char placement[700];
    snprintf(placement, sizeof placement, "nvme:%s", tpack1);
    engram_store *s;
    assert_int_not_equal(engram_store_open("nvme:", &src_tiny, NULL, &s), 0);
    assert_int_not_equal(engram_store_open("disk:/x", &src_tiny, NULL, &s), 0);
    assert_non_null(strstr(dsk_err_msg(), "expected host or nvme:DIR"));
    assert_int_not_equal(engram_store_open("host", NULL, NULL, &s), 0);
    engram_store_opts bad = {.tp = 2, .rank = 2};
    assert_int_not_equal(engram_store_open("host", &src_tiny, &bad, &s), 0);
    assert_int_not_equal(engram_store_open(placement, &src_wide, NULL, &s), 0); /* other layers */
    open_store(placement, &src_tiny, NULL, &s);
    assert_int_equal(engram_store_layers(s), 2);
    assert_int_equal(engram_store_rows(s, 1), 1402);
    assert_int_equal(engram_store_record_bytes(s, 0), 33);
    int64_t row = 714;
    uint8_t rec[64];
    engram_fetch_layer q[ENGRAM_MAX_LAYERS] = {{0}};
    q[0] = (engram_fetch_layer){.rows = &row, .n = 1, .dst = rec};
    engram_fetch *f = NULL;
    assert_int_not_equal(engram_fetch_begin(s, q, &f), 0);
    assert_null(f);
    assert_non_null(strstr(dsk_err_msg(), "row 714"));
    row = 713;
    assert_ok(engram_fetch_begin(s, q, &f));
    assert_int_not_equal(engram_fetch_wait(f, 2, 100), 0);
    assert_int_not_equal(engram_fetch_wait(f, 0, -1), 0);
    assert_ok(engram_fetch_wait(f, 0, 5000));
    assert_ok(engram_fetch_wait(f, 1, 0)); /* nothing asked of layer 2 */
    engram_fetch_end(f);
    engram_store_close(s);
}

/* The CLOCK cache against a plain model: a lookup gives the last record stored under its key or nothing,
 * never another key's; the capacity holds; recently used keys survive a sweep. */
static void test_cache_clock(void **state)
{
    (void)state;
    enum { CAP = 97, KEYS = 400, REC = 33 };
    row_cache c;
    assert_ok(row_cache_init(&c, CAP * REC + REC - 1, REC));
    assert_int_equal(c.cap, CAP);
    dsk_rng r;
    dsk_rng_seed(&r, seed + 19);
    static uint8_t model[KEYS][REC];
    static int stored[KEYS];
    uint8_t rec[REC];
    for (int step = 0; step < 200000; step++) {
        int k = (int)dsk_rng_below(&r, KEYS);
        uint64_t key = row_cache_key((int)(k & 1), k >> 1);
        if (dsk_rng_below(&r, 3)) {
            const uint8_t *hit = row_cache_get(&c, key);
            if (hit) {
                assert_true(stored[k]);
                assert_memory_equal(hit, model[k], REC);
            }
        } else {
            for (int i = 0; i < REC; i++)
                rec[i] = (uint8_t)dsk_rng_u64(&r);
            row_cache_put(&c, key, rec);
            memcpy(model[k], rec, REC);
            stored[k] = 1;
            assert_non_null(row_cache_get(&c, key));
        }
        assert_true(c.used <= CAP);
    }
    int present = 0;
    for (int k = 0; k < KEYS; k++)
        present += row_cache_get(&c, row_cache_key(k & 1, k >> 1)) != NULL;
    assert_int_equal(present, CAP);
    /* a hot key touched between inserts of cold keys stays */
    row_cache_clear(&c);
    row_cache_put(&c, 12345, rec);
    for (int i = 0; i < 10 * CAP; i++) {
        assert_non_null(row_cache_get(&c, 12345));
        row_cache_put(&c, 1000000 + (uint64_t)i, rec);
    }
    assert_non_null(row_cache_get(&c, 12345));
    row_cache_free(&c);
    assert_ok(row_cache_init(&c, 0, REC)); /* no cache */
    row_cache_put(&c, 1, rec);
    assert_null(row_cache_get(&c, 1));
    row_cache_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_tiny),        cmocka_unit_test(test_exact_wide),
        cmocka_unit_test(test_waves_and_caller_memory), cmocka_unit_test(test_rank_restricted),
        cmocka_unit_test(test_bad_block_lazy),    cmocka_unit_test(test_injected_faults),
        cmocka_unit_test(test_end_in_flight),     cmocka_unit_test(test_odirect_fallback),
        cmocka_unit_test(test_bad_requests),      cmocka_unit_test(test_cache_clock),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
