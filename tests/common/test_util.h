/* Helpers shared by the cmocka tests. Include after <cmocka.h>'s prerequisites. */
#ifndef DSK_TEST_UTIL_H
#define DSK_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* The source and build trees, from the environment ctest sets (falls back to "." and "build"). */
static inline const char *test_source_dir(void)
{
    const char *s = getenv("DSKIT_SOURCE_DIR");
    return s ? s : ".";
}

static inline const char *test_binary_dir(void)
{
    const char *s = getenv("DSKIT_BINARY_DIR");
    return s ? s : "build";
}

/* A fresh seed every run, printed under what's name; DSKIT_TEST_SEED repeats one (the seed a failure
 * printed: the tests draw from it in a fixed order). */
static inline uint64_t test_seed(const char *what)
{
    const char *fixed = getenv("DSKIT_TEST_SEED");
    uint64_t seed = fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    printf("%s: seed %llu%s\n", what, (unsigned long long)seed, fixed ? " (DSKIT_TEST_SEED)" : "");
    return seed;
}

/* assert a dskit call succeeded; on failure print the dskit error message. */
#define assert_ok(call)                                                                            \
    do {                                                                                           \
        if ((call) != 0)                                                                           \
            fail_msg("%s failed: %s", #call, dsk_err_msg());                                       \
    } while (0)

#endif
