/* `dskit rank-follower`: a follower rank, started by rank 0 itself (never by hand): attach to the group's
 * shared memory, open this rank's slice of the model, then run rank 0's calls until it says stop. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/engine/engine.h"
#include "runtime/ranks/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_rank_follower(int argc, char **argv)
{
    engine_opts o = {0};
    long fd = -1, rank = -1, v;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *s = argv[i + 1];
        if (!strcmp(a, "--fd") && !cli_parse_int(a, s, 0, 1 << 20, &fd))
            continue;
        if (!strcmp(a, "--rank") && !cli_parse_int(a, s, 1, RANKS_MAX - 1, &rank))
            continue;
        if (!strcmp(a, "--tp") && !cli_parse_int(a, s, 2, RANKS_MAX, &v)) {
            o.tp = (int)v;
            continue;
        }
        if (!strcmp(a, "--backend")) {
            o.backend = s;
            continue;
        }
        if (!strcmp(a, "--model")) {
            o.model_dir = s;
            continue;
        }
        if (!strcmp(a, "--kit")) {
            o.kit = s[0] ? s : NULL;
            continue;
        }
        if (!strcmp(a, "--devices")) {
            o.devices = s[0] ? s : NULL;
            continue;
        }
        if (!strcmp(a, "--engram")) {
            o.engram = s;
            continue;
        }
        long lo = 0, hi = 0x7fffffffffffffffL;
        if (cli_parse_int(a, s, lo, hi, &v)) {
            fprintf(stderr, "dskit rank-follower: %s\n", dsk_err_msg());
            return 2;
        }
        if (!strcmp(a, "--max-seqs"))
            o.max_seqs = (int)v;
        else if (!strcmp(a, "--max-rows"))
            o.max_rows = (int)v;
        else if (!strcmp(a, "--context"))
            o.context = v;
        else if (!strcmp(a, "--pool"))
            o.pool = v;
        else if (!strcmp(a, "--threads"))
            o.threads = (int)v;
        else if (!strcmp(a, "--cache-bytes"))
            o.cache_bytes = (size_t)v;
        else if (!strcmp(a, "--engram-cache"))
            o.engram_cache = (size_t)v;
        else if (!strcmp(a, "--engram-timeout"))
            o.engram_timeout_ms = (int)v;
        else {
            fprintf(stderr, "dskit rank-follower: unknown option '%s' (this command is started by rank 0)\n", a);
            return 2;
        }
    }
    if (fd < 0 || rank < 1 || o.tp < 2 || !o.model_dir) {
        fprintf(stderr, "dskit rank-follower: started by rank 0 with --fd, --rank, --tp and --model\n");
        return 2;
    }
    char settings[1024];
    rank_group *g = NULL;
    engine *e = NULL;
    int rc = 1;
    if (tp_settings(&o, settings, sizeof settings) || rank_group_attach((int)fd, (int)rank, settings, 0, &g))
        goto done;
    o.rank_group = g;
    if (engine_open(&o, &e))
        goto done;
    rc = engine_follow(e) ? 1 : 0;
done:
    if (rc)
        fprintf(stderr, "dskit: rank %ld: %s\n", rank, dsk_err_msg());
    engine_close(e);
    rank_group_close(g);
    return rc;
}
