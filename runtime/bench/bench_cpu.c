/* `dskit bench cpu`: prefill and decode tokens/s of the CPU model, by default on the tiny synthetic
 * checkpoint (real vocabulary) generated into a temporary folder. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/common/util.h"
#include "runtime/engine/generate.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

typedef struct {
    const char *model_dir;
    long prompt, decode, threads, reps;
} bench_opts;

static int parse(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--model") && v)
            o->model_dir = v;
        else if (!strcmp(a, "--prompt-len") && v) {
            if (cli_parse_int(a, v, 1, 1 << 20, &o->prompt))
                return -1;
        } else if (!strcmp(a, "--decode") && v) {
            if (cli_parse_int(a, v, 1, 1 << 20, &o->decode))
                return -1;
        } else if (!strcmp(a, "--threads") && v) {
            if (cli_parse_int(a, v, 1, 64, &o->threads))
                return -1;
        } else if (!strcmp(a, "--reps") && v) {
            if (cli_parse_int(a, v, 1, 100, &o->reps))
                return -1;
        } else
            return dsk_err("bench cpu: unknown or incomplete option '%s' (options: --model DIR, --prompt-len N, "
                           "--decode N, --threads N, --reps N)",
                           a);
    }
    return 0;
}

/* One generation; the best of reps runs is reported. */
static int run_once(engine *e, const int32_t *prompt, const bench_opts *o, int draft, gen_stats *best)
{
    int32_t *out = dsk_malloc(sizeof(int32_t) * (size_t)o->decode);
    if (!out)
        return -1;
    for (long r = 0; r < o->reps; r++) {
        gen_opts g = {.max_tokens = (int)o->decode + 1, .sp = SAMPLE_GREEDY, .draft = draft};
        gen_stats st;
        if (engine_generate(e, prompt, (int)o->prompt, &g, out, &st)) {
            free(out);
            return -1;
        }
        if (r == 0 || st.prefill_s < best->prefill_s)
            best->prefill_s = st.prefill_s;
        if (r == 0 || st.decode_s < best->decode_s) {
            double p = best->prefill_s;
            *best = st;
            best->prefill_s = p;
        }
    }
    free(out);
    return 0;
}

int bench_cpu(int argc, char **argv)
{
    bench_opts o = {NULL, 128, 32, 2, 1};
    char root[256] = "", dir[300];
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "dskit bench cpu: %s\n", dsk_err_msg());
        return 2;
    }
    if (!o.model_dir) {
        snprintf(root, sizeof root, "%s/dskit-bench-cpu-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(root)) {
            perror("dskit bench cpu: mkdtemp");
            return 2;
        }
        snprintf(dir, sizeof dir, "%s/tiny", root);
        char *mk[] = {"mkmodel", "--preset", "tiny", "--seed", "1", "--out", dir, NULL};
        if (cmd_mkmodel(7, mk)) {
            nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
            return 1;
        }
        o.model_dir = dir;
    }
    engine *e = NULL;
    int rc = 1;
    double t0 = dsk_now();
    engine_opts eo = {.backend = "cpu", .model_dir = o.model_dir, .max_seqs = 1, .threads = (int)o.threads};
    if (engine_open(&eo, &e)) {
        fprintf(stderr, "dskit bench cpu: %s\n", dsk_err_msg());
        goto done;
    }
    double load_s = dsk_now() - t0;
    const engine_info *in = engine_get_info(e);
    int32_t *prompt = dsk_malloc(sizeof(int32_t) * (size_t)o.prompt);
    if (!prompt)
        goto done;
    dsk_rng r;
    dsk_rng_seed(&r, 42);
    for (long i = 0; i < o.prompt; i++)
        prompt[i] = (int32_t)dsk_rng_below(&r, (uint64_t)in->vocab);
    gen_stats serial, drafted;
    if (run_once(e, prompt, &o, 0, &serial) || (in->draft_block > 0 && run_once(e, prompt, &o, 1, &drafted))) {
        fprintf(stderr, "dskit bench cpu: %s\n", dsk_err_msg());
        free(prompt);
        goto done;
    }
    free(prompt);
    printf("dskit bench cpu: %s on %s, load %.2f s\n", o.model_dir, in->device, load_s);
    printf("%-10s %8s %10s %8s %10s %s\n", "mode", "prompt", "prefill/s", "decoded", "decode/s", "drafts");
    printf("%-10s %8ld %10.1f %8d %10.1f %s\n", "serial", o.prompt, (double)o.prompt / serial.prefill_s,
           serial.n_out - 1, (serial.n_out - 1) / serial.decode_s, "-");
    if (in->draft_block > 0)
        printf("%-10s %8ld %10.1f %8d %10.1f %.2f accepted/round (%d rounds)\n", "draft", o.prompt,
               (double)o.prompt / drafted.prefill_s, drafted.n_out - 1, (drafted.n_out - 1) / drafted.decode_s,
               drafted.rounds ? (double)drafted.accepted / drafted.rounds : 0.0, drafted.rounds);
    rc = 0;
done:
    engine_close(e);
    if (root[0])
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}
