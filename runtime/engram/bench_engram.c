/* `dskit bench engram`: one round's Engram reads (positions × 24 rows for each of 2 layers, uniformly
 * random rows, as the n-gram hash makes them) through the store, cold (no hot-row cache, the pack files
 * dropped from the page cache, O_DIRECT) and warm (every row of the measured rounds already in the
 * hot-row cache). By default on a synthetic pack of real-width 264-byte rows generated in $TMPDIR and
 * removed afterwards; --model packs (and also reads as `host`) a checkpoint's tables; --dir PACKDIR reads
 * the pack there, or (no pack there) generates it there, on the disk to be measured, and removes it. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/engram/engram_format.h"
#include "runtime/engram/engram_pack.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#define BENCH_LAYERS 2
#define BENCH_COLS 24
#define WAIT_MS 10000
#define BENCH_SLOW_MS 1000

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

typedef struct {
    const char *model, *dir;
    long rows;   /* synthetic rows per layer */
    long rounds; /* measured rounds per configuration */
    long cache_mb;
} bench_opts;

static int parse(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v)
            o->model = v;
        else if (!strcmp(a, "--dir") && v)
            o->dir = v;
        else if (!strcmp(a, "--rows") && v) {
            if (cli_parse_int(a, v, 1000, 1L << 34, &o->rows))
                return -1;
        } else if (!strcmp(a, "--rounds") && v) {
            if (cli_parse_int(a, v, 10, 1000000, &o->rounds))
                return -1;
        } else if (!strcmp(a, "--cache-mb") && v) {
            if (cli_parse_int(a, v, 1, 1 << 20, &o->cache_mb))
                return -1;
        } else
            return dsk_err("bench engram: unknown or incomplete option '%s' (options: --model DIR, --rows N, --dir "
                           "PACKDIR, --rounds N, --cache-mb MB)", a);
    }
    return 0;
}

/* Synthetic rows: random e4m3 codes and e8m0 scales near 2^0, cheap enough to write GB/s. */
static int synth_rows(void *ctx, const engram_table *t, int64_t row0, int64_t n, uint8_t *rec)
{
    (void)ctx;
    size_t w = (size_t)t->width, ns = w / 32, rb = w + ns;
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = ((uint64_t)t->layer_id << 48) ^ (uint64_t)(row0 + i);
        uint8_t *r = rec + (size_t)i * rb;
        for (size_t j = 0; j < w; j += 8) {
            uint64_t v = dsk_splitmix64(&x);
            memcpy(r + j, &v, 8);
        }
        for (size_t j = 0; j < ns; j++)
            r[w + j] = (uint8_t)(124 + (r[j] & 7));
    }
    return 0;
}

static void synth_source(long rows, engram_source *src)
{
    memset(src, 0, sizeof *src);
    src->n_layers = BENCH_LAYERS;
    static const int ids[BENCH_LAYERS] = {1, 14};
    for (int i = 0; i < BENCH_LAYERS; i++) {
        engram_table *t = &src->table[i];
        t->slot = i;
        t->layer_id = ids[i];
        t->rows = rows;
        t->width = 256;
        snprintf(t->weight.name, sizeof t->weight.name, "synthetic.layers.%d.engram.embed.weight", ids[i]);
        snprintf(t->scale.name, sizeof t->scale.name, "synthetic.layers.%d.engram.embed.scale", ids[i]);
        t->weight.nbytes = (uint64_t)rows * 256;
        t->scale.nbytes = (uint64_t)rows * 8;
        engram_table_identify(t);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct {
    double med_ms, p99_ms, rows_per_s, reads_per_round, mb_per_s, hit_rate;
    double usr_us_per_row, sys_us_per_row; /* this process's user and system time per row served */
    uint64_t slow;
} result;

static void cpu_seconds(double *usr, double *sys)
{
    struct rusage ru;
    *usr = *sys = 0;
    if (getrusage(RUSAGE_SELF, &ru))
        return;
    *usr = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
    *sys = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/* Rows of `rounds` rounds of `pos` positions: [round][layer][pos * 24], uniform over each table. */
static int64_t *draw_rows(const engram_store *s, int pos, long rounds, uint64_t seed)
{
    int64_t per = (int64_t)pos * BENCH_COLS;
    int nl = engram_store_layers(s);
    int64_t *rows = dsk_malloc(sizeof(int64_t) * (size_t)(rounds * nl * per));
    if (!rows)
        return NULL;
    dsk_rng r;
    dsk_rng_seed(&r, seed);
    for (long k = 0; k < rounds; k++)
        for (int l = 0; l < nl; l++)
            for (int64_t i = 0; i < per; i++)
                rows[(k * nl + l) * per + i] = (int64_t)dsk_rng_below(&r, (uint64_t)engram_store_rows(s, l));
    return rows;
}

/* One round: begin, then wait for layer 0 and layer 1 as the forward pass would. */
static int round_once(engram_store *s, const int64_t *rows, int64_t per, uint8_t *dst, double *ms)
{
    int nl = engram_store_layers(s);
    engram_fetch_layer q[ENGRAM_MAX_LAYERS] = {{0}};
    for (int l = 0; l < nl; l++)
        q[l] = (engram_fetch_layer){.rows = rows + l * per, .n = per,
                                    .dst = dst + (size_t)l * per * engram_store_record_bytes(s, 0)};
    double t0 = dsk_now();
    engram_fetch *f;
    if (engram_fetch_begin(s, q, &f))
        return -1;
    int rc = 0;
    for (int l = 0; l < nl && !rc; l++)
        rc = engram_fetch_wait(f, l, WAIT_MS);
    engram_fetch_end(f);
    *ms = (dsk_now() - t0) * 1e3;
    return rc;
}

static int run_config(engram_store *s, int pos, long rounds, int warm, result *res)
{
    int64_t per = (int64_t)pos * BENCH_COLS;
    int nl = engram_store_layers(s);
    int64_t *rows = draw_rows(s, pos, rounds, 1000003u * (uint64_t)pos + (uint64_t)warm);
    uint8_t *dst = dsk_malloc((size_t)(nl * per * engram_store_record_bytes(s, 0)));
    double *lat = dsk_malloc(sizeof(double) * (size_t)rounds);
    int rc = -1;
    if (!rows || !dst || !lat)
        goto done;
    if (engram_store_drop_cache(s))
        goto done;
    if (warm) /* fill the cache with exactly the rows to be measured */
        for (long k = 0; k < rounds; k++)
            if (round_once(s, rows + k * nl * per, per, dst, &lat[k]))
                goto done;
    engram_counters c0, c1;
    engram_store_counters(s, &c0);
    double total = 0, usr0, sys0, usr1, sys1;
    cpu_seconds(&usr0, &sys0);
    for (long k = 0; k < rounds; k++) {
        if (round_once(s, rows + k * nl * per, per, dst, &lat[k]))
            goto done;
        total += lat[k];
    }
    engram_store_counters(s, &c1);
    cpu_seconds(&usr1, &sys1);
    res->usr_us_per_row = (usr1 - usr0) * 1e6 / (double)(rounds * nl * per);
    res->sys_us_per_row = (sys1 - sys0) * 1e6 / (double)(rounds * nl * per);
    qsort(lat, (size_t)rounds, sizeof *lat, cmp_double);
    res->med_ms = lat[rounds / 2];
    res->p99_ms = lat[(rounds * 99) / 100 < rounds ? (rounds * 99) / 100 : rounds - 1];
    res->rows_per_s = (double)(rounds * nl * per) / (total / 1e3);
    res->reads_per_round = (double)(c1.reads - c0.reads) / (double)rounds;
    res->mb_per_s = (double)(c1.read_bytes - c0.read_bytes) / (total / 1e3) / 1e6;
    uint64_t lookups = (c1.cache_hits - c0.cache_hits) + (c1.cache_misses - c0.cache_misses);
    res->hit_rate = lookups ? (double)(c1.cache_hits - c0.cache_hits) / (double)lookups : 0.0;
    res->slow = c1.slow_reads - c0.slow_reads;
    rc = 0;
done:
    free(rows);
    free(dst);
    free(lat);
    return rc;
}

static int bench_store(const char *placement, const engram_source *src, long rounds, long cache_mb)
{
    static const int positions[] = {1, 16, 64};
    int host = !strcmp(placement, "host");
    for (int warm = 0; warm < (host ? 1 : 2); warm++) {
        /* a round of 3000 reads queues each behind hundreds of others: the bench's slow bound is 1 s, so
         * the store logs only true stalls (the server keeps the default) */
        engram_store_opts so = {.cache_bytes = warm ? (size_t)cache_mb << 20 : 0, .slow_read_ms = BENCH_SLOW_MS};
        engram_store *s;
        if (engram_store_open(placement, src, &so, &s))
            return -1;
        for (size_t p = 0; p < sizeof positions / sizeof positions[0]; p++) {
            int pos = positions[p];
            long n = pos == 64 ? (rounds + 1) / 2 : rounds;
            size_t need = (size_t)n * (size_t)pos * BENCH_COLS * BENCH_LAYERS * 300;
            if (warm && need > ((size_t)cache_mb << 20))
                n = (long)(((size_t)cache_mb << 20) / ((size_t)pos * BENCH_COLS * BENCH_LAYERS * 300));
            result r;
            if (run_config(s, pos, n, warm, &r)) {
                engram_store_close(s);
                return -1;
            }
            printf("%-10s %-5s %6d %8d %7ld %12.0f %9.3f %9.3f %9.1f %9.1f %6.0f%% %5llu %5.2f %5.2f\n", host ? "host" : "nvme",
                   host ? "-" : warm ? "warm" : "cold", pos, pos * BENCH_COLS * BENCH_LAYERS, n, r.rows_per_s, r.med_ms,
                   r.p99_ms, r.reads_per_round, r.mb_per_s, 100 * r.hit_rate, (unsigned long long)r.slow,
                   r.usr_us_per_row, r.sys_us_per_row);
            fflush(stdout);
        }
        engram_store_close(s);
    }
    return 0;
}

/* The folder holding path (for the free-space check). */
static void parent_dir(const char *path, char *out, size_t cap)
{
    snprintf(out, cap, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == out)
        out[1] = 0;
    else
        *slash = 0;
}

int bench_engram(int argc, char **argv)
{
    bench_opts o = {.rows = 7500000, .rounds = 200, .cache_mb = 512};
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "dskit bench engram: %s\n", dsk_err_msg());
        return 2;
    }
    char made[512] = "", pack[600], placement[700], man[700], what[900];
    st_set *ckpt = NULL;
    engram_source src;
    int rc = 1;
    snprintf(man, sizeof man, "%s/%s", o.dir ? o.dir : "", ENGRAM_MANIFEST);
    int existing = o.dir && dsk_file_exists(man);
    if (o.model && (st_open(o.model, &ckpt) || engram_source_from_model(ckpt, o.model, &src)))
        goto fail;
    if (existing) {
        snprintf(pack, sizeof pack, "%s", o.dir);
        snprintf(what, sizeof what, "the existing pack %s", o.dir);
    } else {
        if (o.dir) { /* generated there (the disk to measure), removed afterwards */
            snprintf(pack, sizeof pack, "%s", o.dir);
            snprintf(made, sizeof made, "%s", o.dir);
        } else {
            const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
            snprintf(made, sizeof made, "%s/dskit-bench-engram-XXXXXX", tmp);
            if (!mkdtemp(made)) {
                fprintf(stderr, "dskit bench engram: mkdtemp %s: %s\n", made, strerror(errno));
                made[0] = 0;
                goto done;
            }
            snprintf(pack, sizeof pack, "%s/pack", made);
        }
        if (o.model)
            snprintf(what, sizeof what, "the Engram tables of %s packed into %s", o.model, pack);
        else {
            synth_source(o.rows, &src);
            snprintf(what, sizeof what, "a synthetic pack of 2 x %ld rows of 264 bytes in %s", o.rows, pack);
        }
        engram_pack_opts po = {.tp = 1, .progress = 1};
        uint64_t bytes;
        struct statvfs vfs;
        char parent[640];
        parent_dir(pack, parent, sizeof parent);
        if (engram_pack_bytes(&src, &po, &bytes))
            goto fail;
        /* keep well clear of a full disk: at most half of what is free */
        if (statvfs(parent, &vfs) == 0 && bytes > (uint64_t)vfs.f_bavail * vfs.f_frsize / 2) {
            dsk_err("the pack needs %.2f GB; only %.2f GB are free in %s (use --rows)", bytes / 1e9,
                    (double)vfs.f_bavail * vfs.f_frsize / 1e9, parent);
            goto fail;
        }
        double t0 = dsk_now();
        if (engram_pack(&src, pack, &po, o.model ? NULL : synth_rows, NULL)) {
            if (o.dir)
                made[0] = 0; /* refused or failed: nothing of ours is there */
            goto fail;
        }
        double dt = dsk_now() - t0;
        printf("dskit bench engram: packed %.2f GB in %.1f s (%.0f MB/s)\n", bytes / 1e9, dt, bytes / dt / 1e6);
    }
    printf("dskit bench engram: %s; 24 rows per position per layer, 2 layers, uniform random rows; cold: no "
           "hot-row cache, files dropped from the page cache, O_DIRECT; warm: %ld MB hot-row cache holding every "
           "measured row; slow: reads over %d ms; usr/r, sys/r: this process's user and system CPU microseconds "
           "per row\n", what, o.cache_mb, BENCH_SLOW_MS);
    printf("%-10s %-5s %6s %8s %7s %12s %9s %9s %9s %9s %7s %5s %5s %5s\n", "placement", "cache", "pos", "rows",
           "rounds", "rows/s", "med ms", "p99 ms", "reads/rd", "MB/s", "hits", "slow", "usr/r", "sys/r");
    snprintf(placement, sizeof placement, "nvme:%s", pack);
    if (bench_store(placement, existing && !o.model ? NULL : &src, o.rounds, o.cache_mb))
        goto fail;
    if (o.model && bench_store("host", &src, o.rounds, o.cache_mb))
        goto fail;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "dskit bench engram: %s\n", dsk_err_msg());
done:
    st_close(ckpt);
    if (made[0] && nftw(made, rm_entry, 16, FTW_DEPTH | FTW_PHYS))
        fprintf(stderr, "dskit bench engram: could not remove %s: %s\n", made, strerror(errno));
    return rc;
}
