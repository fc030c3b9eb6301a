/* `dskit engram pack|verify` (docs/engram.md). */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/engram/engram_pack.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: dskit engram pack --model DIR --out OUTDIR [--tp N] [--block-rows R] [--force]\n"
               "       dskit engram verify PACKDIR [--model DIR]\n"
               "pack writes each Engram layer's table rows (e4m3 values and e8m0 scales of a row side by side)\n"
               "into files made for O_DIRECT reads, split over N ranks (default 1), R records per hashed block\n"
               "(default: as many as fit 4096 bytes). verify checks every header and block hash, and with --model\n"
               "that the files hold exactly that checkpoint's rows. Exit 0 good, 1 bad, 2 usage or I/O error.\n"
               "See docs/engram.md.\n");
}

static int cmd_pack(int argc, char **argv)
{
    const char *model = NULL, *out = NULL;
    engram_pack_opts o = {.tp = 1, .progress = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(a, "--force")) {
            o.force = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "dskit engram pack: %s needs a value (dskit engram --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--out"))
            out = v;
        else if (!strcmp(a, "--tp") || !strcmp(a, "--block-rows")) {
            int tp = !strcmp(a, "--tp");
            if (cli_parse_int(a, v, 1, tp ? 8 : 1 << 20, &n)) {
                fprintf(stderr, "dskit engram pack: %s\n", dsk_err_msg());
                return 2;
            }
            if (tp)
                o.tp = (int)n;
            else
                o.block_rows = n;
        } else {
            fprintf(stderr, "dskit engram pack: unknown option '%s' (dskit engram --help)\n", a);
            return 2;
        }
    }
    if (!model || !out) {
        fprintf(stderr, "dskit engram pack: --model DIR and --out OUTDIR are required (dskit engram --help)\n");
        return 2;
    }
    double t0 = dsk_now();
    st_set *ckpt = NULL;
    engram_source src;
    uint64_t bytes = 0;
    int rc = 2;
    if (st_open(model, &ckpt) || engram_source_from_model(ckpt, model, &src) || engram_pack_bytes(&src, &o, &bytes) ||
        engram_pack(&src, out, &o, NULL, NULL)) {
        fprintf(stderr, "dskit engram pack: %s\n", dsk_err_msg());
        goto done;
    }
    double dt = dsk_now() - t0;
    printf("packed %d Engram layer%s of %s into %s: tp %d, %d file%s, %.3f GB in %.1f s (%.0f MB/s)\n", src.n_layers,
           src.n_layers == 1 ? "" : "s", model, out, o.tp, src.n_layers * o.tp, src.n_layers * o.tp == 1 ? "" : "s",
           bytes / 1e9, dt, dt > 0 ? bytes / dt / 1e6 : 0.0);
    rc = 0;
done:
    st_close(ckpt);
    return rc;
}

static int cmd_verify_pack(int argc, char **argv)
{
    const char *dir = NULL, *model = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model = argv[++i];
        else if (argv[i][0] != '-' && !dir)
            dir = argv[i];
        else {
            fprintf(stderr, "dskit engram verify: unexpected argument '%s' (dskit engram --help)\n", argv[i]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "dskit engram verify: PACKDIR is required (dskit engram --help)\n");
        return 2;
    }
    st_set *ckpt = NULL;
    engram_source src;
    if (model && (st_open(model, &ckpt) || engram_source_from_model(ckpt, model, &src))) {
        fprintf(stderr, "dskit engram verify: %s\n", dsk_err_msg());
        st_close(ckpt);
        return 2;
    }
    int rc = engram_verify(dir, model ? &src : NULL, stdout);
    if (rc)
        fprintf(stderr, "dskit engram verify: %s: %s\n", rc == 1 ? "BAD" : "I/O error", dsk_err_msg());
    else
        printf("%s: good%s\n", dir, model ? " (rows equal the checkpoint's)" : "");
    st_close(ckpt);
    return rc;
}

int cmd_engram(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "pack"))
        return cmd_pack(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "verify"))
        return cmd_verify_pack(argc - 1, argv + 1);
    int help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (!help)
        fprintf(stderr, "dskit engram: expected pack or verify\n");
    usage(help ? stdout : stderr);
    return help ? 0 : 2;
}
