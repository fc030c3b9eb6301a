/* `dskit bench exchange`: one exchange of each decode-sized payload between two ranks on this host
 * (5120 fp32 per row × 1-16 rows: the wo_b and MoE partials; 64640 fp32 per row: the head's logits half),
 * through the host shared-memory transport the CPU backend uses, against a memcpy of the same bytes
 * measured in the same run. The GPU transports (CUDA IPC, NCCL) get their rows when the GPU engine runs. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/ranks/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    const char *what;
    size_t floats;
    int gather; /* 1: all-gather (logits), 0: all-gather + sum (partials) */
} payload;

/* Both ranks run this: every payload, warm-up then reps timed exchanges; rank 0 prints. */
static int exchange_loop(rank_group *g, int reps)
{
    rank_xchg *x = rank_group_xchg(g);
    const payload ps[] = {{"partial, 1 row", 5120, 0},  {"partial, 2 rows", 2 * 5120, 0},
                          {"partial, 4 rows", 4 * 5120, 0}, {"partial, 8 rows", 8 * 5120, 0},
                          {"partial, 16 rows", 16 * 5120, 0}, {"logits half, 1 row", 64640, 1},
                          {"logits half, 6 rows", 6 * 64640, 1}};
    size_t maxf = 6 * 64640;
    float *buf = dsk_malloc(sizeof(float) * maxf), *all = dsk_malloc(sizeof(float) * maxf * (size_t)x->tp);
    float *copy = dsk_malloc(sizeof(float) * maxf);
    double *t = dsk_malloc(sizeof(double) * (size_t)reps);
    int rc = -1;
    if (!buf || !all || !copy || !t)
        goto done;
    for (size_t i = 0; i < maxf; i++)
        buf[i] = (float)(i % 977) * 0.25f;
    if (x->rank == 0)
        printf("%-22s %10s %12s %12s %10s %12s\n", "payload", "bytes", "median us", "p99 us", "GB/s", "memcpy us");
    for (size_t p = 0; p < sizeof ps / sizeof ps[0]; p++) {
        size_t bytes = ps[p].floats * sizeof(float);
        for (int r = -reps / 10 - 1; r < reps; r++) {
            double t0 = dsk_now();
            int e = ps[p].gather ? x->allgather(x, buf, bytes, all) : x->allgather_sum(x, buf, ps[p].floats);
            if (e)
                goto done;
            if (r >= 0)
                t[r] = dsk_now() - t0;
        }
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        double med = t[reps / 2], p99 = t[reps * 99 / 100];
        double c0 = dsk_now();
        for (int r = 0; r < reps; r++)
            memcpy(copy, buf, bytes);
        double cp = (dsk_now() - c0) / reps;
        if (x->rank == 0)
            printf("%-22s %10zu %12.1f %12.1f %10.2f %12.2f\n", ps[p].what, bytes, med * 1e6, p99 * 1e6,
                   (double)bytes * x->tp / med / 1e9, cp * 1e6);
    }
    rc = 0;
done:
    free(buf);
    free(all);
    free(copy);
    free(t);
    return rc;
}

int bench_exchange(int argc, char **argv)
{
    long fd = -1, rank = 0, reps = 2000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--fd") && !cli_parse_int(argv[i], argv[i + 1], 0, 1 << 20, &fd))
            continue;
        if (!strcmp(argv[i], "--rank") && !cli_parse_int(argv[i], argv[i + 1], 1, RANKS_MAX - 1, &rank))
            continue;
        if (!strcmp(argv[i], "--reps") && !cli_parse_int(argv[i], argv[i + 1], 10, 1000000, &reps))
            continue;
        fprintf(stderr, "dskit bench exchange: unknown option '%s' (--reps N)\n", argv[i]);
        return 2;
    }
    rank_group *g = NULL;
    int rc;
    if (fd >= 0) { /* the follower this command started */
        if (rank_group_attach((int)fd, (int)rank, "bench exchange", 0, &g))
            goto fail;
        rc = exchange_loop(g, (int)reps);
        rank_group_close(g);
        return rc ? 1 : 0;
    }
    char reps_s[32];
    snprintf(reps_s, sizeof reps_s, "%ld", reps);
    char *fargv[] = {"dskit", "bench", "exchange", "--fd", "{FD}", "--rank", "{RANK}", "--reps", reps_s, NULL};
    rank_group_opts o = {.tp = 2, .settings = "bench exchange", .follower_argv = fargv};
    if (rank_group_open(&o, &g))
        goto fail;
    printf("dskit bench exchange: 2 ranks on this host, host shared memory (the CPU backend's transport), %ld "
           "exchanges per payload\n",
           reps);
    rc = exchange_loop(g, (int)reps);
    rank_group_close(g);
    if (!rc)
        return 0;
fail:
    fprintf(stderr, "dskit bench exchange: %s\n", dsk_err_msg());
    return 1;
}
