/* `dskit mkmodel`: write a synthetic checkpoint (config.json, safetensors shards and index, tokenizer
 * files) for a preset, deterministically from a seed. The output folder appears whole or not at all:
 * everything is written into a temporary sibling folder that is renamed into place at the end. */
#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/mkmodel/mkmodel.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#ifndef DSKIT_SOURCE_TREE
#define DSKIT_SOURCE_TREE "."
#endif

static const char *const tokenizer_rel = "data/tokenizer/deepseek-v3-tokenizer.json";

/* The command's help, with one line per preset. */
static void usage(FILE *f)
{
    fprintf(f, "usage: dskit mkmodel --preset NAME --out DIR [--seed N] [--codebook mul1|mcg|3inst]\n"
               "                     [--shard-size BYTES[k|M|G]] [--tokenizer FILE] [--force]\n"
               "Write a synthetic checkpoint with random weights; the same seed gives the same bytes.\n"
               "Presets:\n");
    for (int i = 0; mkmodel_preset_name(i); i++)
        fprintf(f, "  %-12s %s\n", mkmodel_preset_name(i), mkmodel_preset_summary(mkmodel_preset_name(i)));
    fprintf(f, "--seed defaults to 0, --codebook to mul1, --shard-size to 4G; --force replaces an existing\n"
               "checkpoint folder. See docs/mkmodel.md.\n");
}

/* Byte count with an optional k/M/G (binary) suffix. */
static int parse_size(const char *opt, const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10, end++;
    else if (*end == 'M')
        shift = 20, end++;
    else if (*end == 'G')
        shift = 30, end++;
    if (errno || end == s || *end || s[0] == '-' || v == 0 || v > (ULLONG_MAX >> shift))
        return dsk_err("%s: '%s' is not a positive size (bytes, or a number with k, M or G)", opt, s);
    *out = (uint64_t)v << shift;
    return 0;
}

/* The committed V3 tokenizer: beside the source tree this binary was built from, or relative to the
 * executable (build/dskit -> ../data). */
static int find_tokenizer(char *out, size_t cap)
{
    int len = snprintf(out, cap, "%s/%s", DSKIT_SOURCE_TREE, tokenizer_rel);
    if (len > 0 && (size_t)len < cap && dsk_file_exists(out))
        return 0;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            for (int up = 1; up <= 2; up++) {
                len = snprintf(out, cap, "%s/%s%s", exe, up == 1 ? "../" : "../../", tokenizer_rel);
                if (len > 0 && (size_t)len < cap && dsk_file_exists(out))
                    return 0;
            }
        }
    }
    return dsk_err("cannot find %s (looked beside the source tree %s and the executable); pass --tokenizer FILE",
                   tokenizer_rel, DSKIT_SOURCE_TREE);
}

/* nftw callback of remove_tree. */
static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) ? -1 : 0;
}

/* rm -r of a folder this command created or was told to replace. */
static int remove_tree(const char *path)
{
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return dsk_err_errno("cannot remove %s", path);
    return 0;
}

/* 1 if dir holds nothing, 0 if it holds something, -1 on error. *checkpoint: it holds a config.json or a
 * safetensors index (what --force may replace). */
static int dir_state(const char *dir, int *checkpoint)
{
    DIR *d = opendir(dir);
    if (!d)
        return dsk_err_errno("cannot open %s", dir);
    int empty = 1;
    *checkpoint = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        empty = 0;
        if (!strcmp(e->d_name, "config.json") || !strcmp(e->d_name, "model.safetensors.index.json"))
            *checkpoint = 1;
    }
    closedir(d);
    return empty;
}

typedef struct {
    const char *preset, *out, *tokenizer;
    uint64_t seed, shard_bytes;
    int codebook, force;
} mk_opts;

/* Options into *o: 0 ok, 1 help asked, -1 a message says what is wrong. */
static int parse_args(int argc, char **argv, mk_opts *o)
{
    memset(o, 0, sizeof *o);
    o->codebook = 2;
    o->shard_bytes = 4ull << 30;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--force")) {
            o->force = 1;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (a[0] != '-' || a[1] != '-')
            return dsk_err("unexpected argument '%s'", a);
        if (i + 1 >= argc)
            return dsk_err("%s needs a value", a);
        const char *v = argv[++i];
        long n;
        if (!strcmp(a, "--preset"))
            o->preset = v;
        else if (!strcmp(a, "--out"))
            o->out = v;
        else if (!strcmp(a, "--tokenizer"))
            o->tokenizer = v;
        else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(a, v, 0, LONG_MAX, &n))
                return -1;
            o->seed = (uint64_t)n;
        } else if (!strcmp(a, "--codebook")) {
            if ((o->codebook = mkmodel_codebook_parse(v)) < 0)
                return -1;
        } else if (!strcmp(a, "--shard-size")) {
            if (parse_size(a, v, &o->shard_bytes))
                return -1;
        } else
            return dsk_err("unknown option '%s'", a);
    }
    if (!o->preset)
        return dsk_err("--preset is required (one of %s)", mkmodel_preset_names());
    if (!mkmodel_preset_summary(o->preset))
        return dsk_err("--preset: unknown preset '%s' (one of %s)", o->preset, mkmodel_preset_names());
    if (!o->out || !o->out[0])
        return dsk_err("--out DIR is required");
    return 0;
}

/* Check that DIR may be written: absent, an empty folder, or (with --force) a checkpoint folder. */
static int check_out(const mk_opts *o, int *exists)
{
    struct stat st;
    *exists = 0;
    if (stat(o->out, &st) != 0) {
        if (errno != ENOENT)
            return dsk_err_errno("cannot check --out %s", o->out);
        return 0;
    }
    if (!S_ISDIR(st.st_mode))
        return dsk_err("--out %s exists and is not a folder", o->out);
    *exists = 1;
    int ckpt = 0, empty = dir_state(o->out, &ckpt);
    if (empty < 0)
        return -1;
    if (!empty && !o->force)
        return dsk_err("--out %s is not empty; pass --force to replace it", o->out);
    if (!empty && !ckpt)
        return dsk_err("--out %s is not empty and holds no config.json or safetensors index; refusing to "
                       "replace a folder that does not look like a checkpoint",
                       o->out);
    return 0;
}

/* dir/name = text plus a newline, atomically. */
static int write_text(const char *dir, const char *name, const char *text)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return dsk_err("path %s/%s is too long", dir, name);
    size_t n = strlen(text);
    char *buf = dsk_malloc(n + 2);
    if (!buf)
        return -1;
    memcpy(buf, text, n);
    buf[n] = '\n';
    int rc = dsk_write_file_atomic(path, buf, n + 1);
    free(buf);
    return rc;
}

/* Refuse early when the folder holding out has less than need bytes free. */
static int space_check(const char *out, uint64_t need)
{
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", out);
    size_t n = strlen(parent);
    while (n > 1 && parent[n - 1] == '/')
        parent[--n] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else
        slash[slash == parent ? 1 : 0] = 0;
    struct statvfs vfs;
    if (statvfs(parent, &vfs) != 0)
        return 0; /* best effort: the writes themselves report a full disk */
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (avail < need)
        return dsk_err("--out %s: the checkpoint needs about %.2f GB but only %.2f GB are free", out, need / 1e9,
                       avail / 1e9);
    return 0;
}

/* Tensor data bytes of the whole schema (for the space check and the summary). */
static uint64_t schema_bytes(const schema_tensor *t, int n)
{
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t e = 1;
        for (int d = 0; d < t[i].ndim; d++)
            e *= (uint64_t)t[i].shape[d];
        switch (t[i].kind) {
        case TENSOR_EXL3:
            total += e * (uint64_t)t[i].bits / 8 + 2 * (uint64_t)(t[i].shape[0] + t[i].shape[1]) + 4;
            break;
        case TENSOR_BF16:
            total += 2 * e;
            break;
        case TENSOR_F8_ROWS:
            total += e + e / 32;
            break;
        case TENSOR_I64:
            total += 8 * e;
            break;
        default:
            total += 4 * e;
        }
    }
    return total;
}

/* Everything but the final rename, into the temporary folder tmp. */
static int generate(const mk_opts *o, const model_config *cfg, const char *cfg_text, const schema_tensor *t,
                    int n, const char *tmp, mkmodel_stats *st, int *n_tok)
{
    char tok[4096];
    if (o->tokenizer)
        snprintf(tok, sizeof tok, "%s", o->tokenizer);
    else if (find_tokenizer(tok, sizeof tok))
        return -1;
    if (write_text(tmp, "config.json", cfg_text) ||
        mkmodel_tokenizer(tok, tmp, cfg->vocab_size, cfg->max_seq_len, n_tok))
        return -1;
    st_writer *w;
    if (st_writer_open(tmp, o->shard_bytes, &w))
        return -1;
    mkmodel_gen g = {.seed = o->seed, .codebook = o->codebook, .cfg = cfg};
    for (int i = 0; i < n; i++)
        if (mkmodel_write_tensor(w, &g, &t[i], st)) {
            st_writer_abort(w);
            return -1;
        }
    return st_writer_close(w);
}

/* Move tmp to out; an existing out (empty, or a checkpoint under --force) is set aside and removed. */
static int publish(const char *tmp, const char *out, int exists)
{
    char old[4096];
    if (exists) {
        snprintf(old, sizeof old, "%s.mkmodel-old-%ld", out, (long)getpid());
        if (rename(out, old) != 0)
            return dsk_err_errno("cannot move the old %s aside", out);
    }
    if (rename(tmp, out) != 0) {
        int e = errno;
        if (exists && rename(old, out) != 0)
            fprintf(stderr, "dskit mkmodel: the old %s is left at %s\n", out, old);
        errno = e;
        return dsk_err_errno("cannot rename %s to %s", tmp, out);
    }
    if (exists && remove_tree(old))
        fprintf(stderr, "dskit mkmodel: warning: %s\n", dsk_err_msg());
    return 0;
}

int cmd_mkmodel(int argc, char **argv)
{
    mk_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc > 0) {
        usage(stdout);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "dskit mkmodel: %s (dskit mkmodel --help lists the options)\n", dsk_err_msg());
        return 2;
    }
    double t0 = dsk_now();
    static const char *const cb_names[3] = {"3inst", "mcg", "mul1"};
    char *cfg_text = NULL, tmp[4096];
    model_config cfg;
    schema_tensor *t = NULL;
    int n = 0, exists, n_tok = 0, made_tmp = 0;
    mkmodel_stats st = {0};
    rc = 2;
    if (mkmodel_preset_config(o.preset, cb_names[o.codebook], o.seed, &cfg_text) ||
        model_config_parse(cfg_text, "preset config", &cfg) || model_schema(&cfg, &t, &n))
        goto done;
    /* the folder that will hold DIR (and its temporary twin) is created if missing */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", o.out);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) {
        *slash = 0;
        if (dsk_mkdirs(parent))
            goto done;
    }
    if (check_out(&o, &exists) || space_check(o.out, schema_bytes(t, n)))
        goto done;
    snprintf(tmp, sizeof tmp, "%s.mkmodel-tmp-%ld", o.out, (long)getpid());
    if (mkdir(tmp, 0755) != 0) {
        dsk_err_errno("cannot create the temporary folder %s", tmp);
        goto done;
    }
    made_tmp = 1;
    if (generate(&o, &cfg, cfg_text, t, n, tmp, &st, &n_tok) || publish(tmp, o.out, exists))
        goto done;
    made_tmp = 0;
    printf("wrote %s: preset %s, seed %" PRIu64 ", codebook %s\n"
           "  %d tensors (%d stored entries), %.1f MB of tensor data, %d tokens added to tokenizer.json\n"
           "  %.2f s\n",
           o.out, o.preset, o.seed, cb_names[o.codebook], st.tensors, st.stored, st.bytes / 1e6, n_tok,
           dsk_now() - t0);
    rc = 0;
done:
    if (rc)
        fprintf(stderr, "dskit mkmodel: %s\n", dsk_err_msg());
    if (made_tmp && remove_tree(tmp))
        fprintf(stderr, "dskit mkmodel: could not clean up: %s\n", dsk_err_msg());
    free(cfg_text);
    free(t);
    return rc;
}
