/* Shared by the Engram store tests: checkpoints to pack (the tiny preset, and small real-width tables),
 * file damage, and the expected record of a row. */
#ifndef DSK_ENGRAM_TEST_UTIL_H
#define DSK_ENGRAM_TEST_UTIL_H

#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/common/rng.h"
#include "runtime/engram/engram_pack.h"
#include "tests/common/test_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int eng_rm_entry(const char *p, const struct stat *sb, int f, struct FTW *w)
{
    (void)sb, (void)f, (void)w;
    return remove(p);
}

static inline int eng_rm_tree(const char *path)
{
    return nftw(path, eng_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh seed per run (printed, so a failure can be replayed). */
static inline uint64_t eng_seed(void)
{
    return ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20)) % 1000000007u;
}

/* dskit mkmodel --preset tiny --seed seed --out dir */
static inline int eng_make_tiny(const char *dir, uint64_t seed)
{
    char s[32];
    snprintf(s, sizeof s, "%" PRIu64, seed);
    char *argv[] = {"mkmodel", "--preset", "tiny", "--seed", s, "--out", (char *)dir, NULL};
    return cmd_mkmodel(7, argv);
}

/* A checkpoint holding only real-width Engram tables (256 values + 8 scales a row) for backbone layers 1
 * and 14, with rows1 and rows14 rows of random bytes, after an unrelated tensor (so data offsets are not
 * 0). Two seeds give two checkpoints with identical headers and different data. */
static inline int eng_make_wide(const char *dir, int64_t rows1, int64_t rows14, uint64_t seed)
{
    st_writer *w;
    if (st_writer_open(dir, 0, &w))
        return -1;
    dsk_rng r;
    dsk_rng_seed(&r, seed);
    uint8_t pre[1000];
    for (size_t i = 0; i < sizeof pre; i++)
        pre[i] = (uint8_t)dsk_rng_u64(&r);
    int64_t pshape[1] = {(int64_t)sizeof pre};
    if (st_writer_add(w, "aaa.unrelated", ST_U8, 1, pshape, pre, sizeof pre)) {
        st_writer_abort(w);
        return -1;
    }
    const int ids[2] = {1, 14};
    const int64_t rows[2] = {rows1, rows14};
    for (int l = 0; l < 2; l++) {
        char name[96];
        for (int part = 0; part < 2; part++) {
            int64_t width = part ? 8 : 256;
            size_t n = (size_t)(rows[l] * width);
            uint8_t *v = malloc(n);
            if (!v) {
                st_writer_abort(w);
                return -1;
            }
            for (size_t i = 0; i < n; i++)
                v[i] = (uint8_t)(dsk_rng_u64(&r) >> 56);
            int64_t shape[2] = {rows[l], width};
            snprintf(name, sizeof name, "layers.%d.engram.embed.%s", ids[l], part ? "scale" : "weight");
            int rc = st_writer_add(w, name, part ? ST_F8_E8M0 : ST_F8_E4M3, 2, shape, v, n);
            free(v);
            if (rc) {
                st_writer_abort(w);
                return -1;
            }
        }
    }
    return st_writer_close(w);
}

/* The record the checkpoint says row `row` of table t has. */
static inline void eng_expected(const engram_table *t, int64_t row, uint8_t *rec)
{
    size_t w = (size_t)t->width, ns = w / 32;
    memcpy(rec, t->values + (size_t)row * w, w);
    memcpy(rec + w, t->scales + (size_t)row * ns, ns);
}

/* XOR one byte of a file at off with 0x5a. */
static inline int eng_flip_byte(const char *path, off_t off)
{
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return -1;
    uint8_t b;
    int rc = -1;
    if (pread(fd, &b, 1, off) == 1) {
        b ^= 0x5a;
        rc = pwrite(fd, &b, 1, off) == 1 ? 0 : -1;
    }
    close(fd);
    return rc;
}

/* Copy a folder of regular files (a pack) to dst. */
static inline int eng_copy_dir(const char *src, const char *dst)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src, dst);
    return system(cmd) == 0 ? 0 : -1;
}

/* Call a dskit command's function with a NULL-terminated argument list; returns its exit status. */
static inline int eng_run(int (*fn)(int, char **), const char *const *args)
{
    char *argv[32];
    int argc = 0;
    while (args[argc] && argc < 31) {
        argv[argc] = (char *)args[argc];
        argc++;
    }
    argv[argc] = NULL;
    dsk_err_clear();
    return fn(argc, argv);
}

/* Run f with stderr captured into buf (cap bytes, NUL-terminated). */
static inline void eng_capture_stderr_begin(int *saved, char *path, size_t cap)
{
    snprintf(path, cap, "%s/engram-stderr-XXXXXX", test_binary_dir());
    int fd = mkstemp(path);
    fflush(stderr);
    *saved = dup(2);
    dup2(fd, 2);
    close(fd);
}

static inline void eng_capture_stderr_end(int saved, const char *path, char *buf, size_t cap)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        size_t n = fread(buf, 1, cap - 1, f);
        buf[n] = 0;
        fclose(f);
    }
    remove(path);
}

#endif
