/* Helpers for the weights tests: scratch folders under the build tree and raw file writing. */
#ifndef DSK_WEIGHTS_TEST_UTIL_H
#define DSK_WEIGHTS_TEST_UTIL_H

#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "tests/common/test_util.h"

#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* rm -rf path */
static inline void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh, empty scratch folder build/test-weights-<pid>/<name>; the path lives in a static slot
 * chosen by the caller (slot 0..3) so several may be in use at once. */
static inline const char *scratch_dir(const char *name, int slot)
{
    static char paths[4][512];
    snprintf(paths[slot], sizeof paths[slot], "%s/test-weights-%ld/%s", test_binary_dir(), (long)getpid(),
             name);
    rm_tree(paths[slot]);
    if (dsk_mkdirs(paths[slot]) != 0)
        fail_msg("%s", dsk_err_msg());
    return paths[slot];
}

static inline void scratch_cleanup(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/test-weights-%ld", test_binary_dir(), (long)getpid());
    rm_tree(p);
}

/* Number of entries in a folder (excluding . and ..), -1 if it cannot be read. */
static inline int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* assert that a dskit call failed and that its message contains every given fragment. */
#define assert_fails_with(call, ...)                                                               \
    do {                                                                                           \
        dsk_err_clear();                                                                           \
        if ((call) == 0)                                                                           \
            fail_msg("%s succeeded, expected an error", #call);                                    \
        const char *frags_[] = {__VA_ARGS__};                                                      \
        for (size_t i_ = 0; i_ < sizeof frags_ / sizeof frags_[0]; i_++)                           \
            if (!strstr(dsk_err_msg(), frags_[i_]))                                                \
                fail_msg("%s: message \"%s\" lacks \"%s\"", #call, dsk_err_msg(), frags_[i_]);     \
    } while (0)

#endif
