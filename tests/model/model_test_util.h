/* Shared by the model tests: a synthetic checkpoint generated once per test program into a temporary
 * folder (never committed), loaded with every EXL3 weight decoded once. */
#ifndef DSK_MODEL_TEST_UTIL_H
#define DSK_MODEL_TEST_UTIL_H

#include "tests/common/test_util.h"

#include "runtime/cli.h"
#include "runtime/common/error.h"
#include "runtime/cpu/cpu_model.h"
#include "runtime/engine/engine.h"

#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char model_test_root[1024];

static int model_test_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Generate preset with seed into a fresh temporary folder and load it; NULL on failure. */
static inline cpu_model *model_test_make(const char *preset, uint64_t seed)
{
    snprintf(model_test_root, sizeof model_test_root, "%s/model-test-XXXXXX", test_binary_dir());
    if (!mkdtemp(model_test_root))
        return NULL;
    char dir[1100], s[32];
    snprintf(dir, sizeof dir, "%s/ckpt", model_test_root);
    snprintf(s, sizeof s, "%" PRIu64, seed);
    char *argv[] = {"mkmodel", "--preset", (char *)preset, "--seed", s, "--out", dir, NULL};
    if (cmd_mkmodel(7, argv)) {
        fprintf(stderr, "mkmodel failed: %s\n", dsk_err_msg());
        return NULL;
    }
    cpu_model *m;
    if (cpu_model_load(dir, (size_t)1 << 30, &m)) {
        fprintf(stderr, "cpu_model_load failed: %s\n", dsk_err_msg());
        return NULL;
    }
    return m;
}

/* An engine (cpu backend) on the checkpoint model_test_make wrote. */
static inline engine *model_test_engine(int max_seqs)
{
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/ckpt", model_test_root);
    engine_opts o = {.backend = "cpu", .model_dir = dir, .max_seqs = max_seqs, .cache_bytes = (size_t)1 << 30};
    engine *e;
    if (engine_open(&o, &e)) {
        fprintf(stderr, "engine_open failed: %s\n", dsk_err_msg());
        return NULL;
    }
    return e;
}

static inline void model_test_cleanup(cpu_model *m)
{
    cpu_model_free(m);
    if (model_test_root[0])
        nftw(model_test_root, model_test_rm, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
