/* The variant spec and its expressions on hostile input: every bad kit/variants.json is exit 2 with a
 * message from `dskit-build --list`, never a crash, a hang or an overflow; --arch lists; the git commit is
 * read without a shell. Each dskit-build runs in a child with a time limit. */
#include "builder/expr.h"
#include "builder/git.h"
#include "builder/spec.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "tests/common/test_util.h"
#include "tests/common/test_proc.h"

#include <string.h>
#include <sys/stat.h>

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dskit-test-spec-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A kit folder holding only variants.json with one family whose fields are given as JSON text. */
static const char *spec_dir(const char *families)
{
    static char dir[512];
    static int n;
    snprintf(dir, sizeof dir, "%s/kit%d", tmpdir, n++);
    assert_ok(dsk_mkdirs(dir));
    char path[600];
    snprintf(path, sizeof path, "%s/variants.json", dir);
    dsk_buf b = {0};
    assert_ok(dsk_buf_printf(&b, "{\"format\": \"dskit-variants/1\", \"families\": [%s]}", families));
    assert_ok(dsk_write_file_atomic(path, b.data, b.len));
    dsk_buf_free(&b);
    return dir;
}

static char builder[600];

/* dskit-build --list over a spec; the exit status and output. */
static test_status list(const char *families, char *out, size_t cap)
{
    snprintf(builder, sizeof builder, "%s/dskit-build", test_binary_dir());
    char *argv[] = {builder, "--arch", "sm_90", "--list", "--src", (char *)spec_dir(families), NULL};
    return test_run(argv, out, cap, TEST_HANG_S, 1u << 30);
}

/* dskit-build --list-defines for one arch over a spec. */
static test_status list_defines(const char *families, const char *arch, char *out, size_t cap)
{
    snprintf(builder, sizeof builder, "%s/dskit-build", test_binary_dir());
    char *argv[] = {builder, "--arch", (char *)arch, "--list-defines", "--src", (char *)spec_dir(families), NULL};
    return test_run(argv, out, cap, TEST_HANG_S, 1u << 30);
}

static void expect_refused(const char *families, const char *needle)
{
    char out[8192];
    test_status st = list(families, out, sizeof out);
    if (!st.exited || st.exit_code != 2)
        fail_msg("dskit-build --list: exit %d, signal %d, expected exit 2, for %.200s:\n%.2000s", st.exit_code,
                 st.signal, families, out);
    if (!strstr(out, needle))
        fail_msg("dskit-build --list said\n%.2000s\nwhich does not mention '%s'", out, needle);
}

/* One family "f" with the given axes and block expression. */
static char *family(const char *axes, const char *block)
{
    dsk_buf b = {0};
    assert_ok(dsk_buf_printf(&b, "{\"family\": \"f\", \"source\": \"f.cu\", \"axes\": [%s], \"block\": \"%s\", "
                                 "\"params\": [\"ptr\"]}",
                             axes, block));
    return b.data;
}

static void expect_family_refused(const char *axes, const char *block, const char *needle)
{
    char *f = family(axes, block);
    expect_refused(f, needle);
    free(f);
}

/* An expression nested n deep: open n times, then 1, then close n times. */
static char *nested(const char *open, const char *close, int n)
{
    size_t lo = strlen(open), lc = strlen(close);
    char *s = malloc((lo + lc) * (size_t)n + 2);
    assert_non_null(s);
    char *p = s;
    for (int i = 0; i < n; i++, p += lo)
        memcpy(p, open, lo);
    *p++ = '1';
    for (int i = 0; i < n; i++, p += lc)
        memcpy(p, close, lc);
    *p = 0;
    return s;
}

static void test_good_spec(void **state)
{
    (void)state;
    char out[8192];
    char *f = family("{\"name\": \"T\", \"values\": [32, 64]}, {\"name\": \"M\", \"range\": [-1, 1]}",
                     "max(T * (M + 2), 32)");
    test_status st = list(f, out, sizeof out);
    free(f);
    assert_true(st.exited);
    assert_int_equal(st.exit_code, 0);
    assert_non_null(strstr(out, "f__T32_Mm1"));
    assert_non_null(strstr(out, "f__T64_M1"));
    assert_non_null(strstr(out, "6 variants in 1 families"));
}

/* 13 axes: the cleanup walked axes never allocated (SIGSEGV). */
static void test_too_many_axes(void **state)
{
    (void)state;
    dsk_buf axes = {0};
    for (int i = 0; i < 13; i++)
        assert_ok(dsk_buf_printf(&axes, "%s{\"name\": \"A%d\", \"values\": [1]}", i ? ", " : "", i));
    expect_family_refused(axes.data, "32", "13 axes, more than 12");
    dsk_buf_free(&axes);
}

/* Expressions nested 200,000 deep overflowed the stack. */
static void test_deep_expressions(void **state)
{
    (void)state;
    static const char *const forms[][2] = {{"(", ")"}, {"!", ""}, {"-", ""}, {"min(1,", ")"}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char *e = nested(forms[i][0], forms[i][1], 200000);
        expect_family_refused("{\"name\": \"T\", \"values\": [32]}", e, "nested more than 64 deep");
        free(e);
    }
    /* 60 deep is fine */
    int64_t v;
    expr_env env = {NULL, NULL, 0};
    char *e = nested("(", ")", 60);
    assert_ok(expr_eval(e, &env, &v));
    assert_int_equal(v, 1);
    free(e);
}

/* -2^63 / -1 and % -1 raised SIGFPE; every other overflow is an error too. */
static void test_arithmetic_overflow(void **state)
{
    (void)state;
    const char *min = "{\"name\": \"X\", \"values\": [-9223372036854775808]}";
    const char *max = "{\"name\": \"X\", \"values\": [9223372036854775807]}";
    expect_family_refused(min, "X / -1", "overflows 64 bits");
    expect_family_refused(min, "X % -1", "overflows 64 bits");
    expect_family_refused(min, "-X", "overflows 64 bits");
    expect_family_refused(min, "X - 1", "overflows 64 bits");
    expect_family_refused(max, "X + 1", "overflows 64 bits");
    expect_family_refused(max, "X * 2", "overflows 64 bits");
    expect_family_refused(max, "X / 0", "division by zero");
    expect_family_refused(max, "99999999999999999999", "number too large");
    const char *names[] = {"X"};
    int64_t values[] = {INT64_MIN}, v;
    expr_env env = {names, values, 1};
    assert_ok(expr_eval("X % 7 + X / 2 / -1", &env, &v));
    assert_int_equal(v, INT64_MIN % 7 + INT64_C(4611686018427387904));
    assert_ok(expr_eval("9223372036854775807 - 1", &env, &v));
    assert_int_equal(v, INT64_MAX - 1);
}

/* A range [-2^63, 2^63 - 1] overflowed hi - lo; 12 axes of range [0, 4096] never finished. */
static void test_ranges_and_products(void **state)
{
    (void)state;
    expect_family_refused("{\"name\": \"X\", \"range\": [-9223372036854775808, 9223372036854775807]}", "32",
                          "bad range");
    dsk_buf axes = {0};
    for (int i = 0; i < 12; i++)
        assert_ok(dsk_buf_printf(&axes, "%s{\"name\": \"A%d\", \"range\": [0, 4096]}", i ? ", " : "", i));
    expect_family_refused(axes.data, "32", "more than 65536 combinations");
    dsk_buf_free(&axes);
    /* under the per-family cap, but over the whole spec's */
    dsk_buf fams = {0};
    for (int i = 0; i < 17; i++)
        assert_ok(dsk_buf_printf(&fams,
                                 "%s{\"family\": \"f%d\", \"source\": \"f.cu\", \"axes\": [{\"name\": \"A\", \"range\": "
                                 "[0, 4095]}, {\"name\": \"B\", \"range\": [0, 15]}], \"where\": \"0\", "
                                 "\"block\": 32, \"params\": []}",
                                 i ? ", " : "", i));
    expect_refused(fams.data, "more than 1048576 combinations together");
    dsk_buf_free(&fams);
    /* more variants than a kit holds */
    expect_family_refused("{\"name\": \"A\", \"range\": [0, 4095]}, {\"name\": \"B\", \"range\": [0, 2]}", "32",
                          "more than 8192 variants");
}

static void test_names(void **state)
{
    (void)state;
    /* a duplicate axis name was accepted */
    expect_family_refused("{\"name\": \"T\", \"values\": [1]}, {\"name\": \"T\", \"values\": [2]}", "32",
                          "axis T is declared twice");
    /* symbols past 159 characters were cut, and cut symbols collided */
    dsk_buf axes = {0};
    for (int i = 0; i < 8; i++)
        assert_ok(dsk_buf_printf(&axes, "%s{\"name\": \"AXIS_WITH_A_LONG_NAME_%d\", \"values\": [1000000, 2000000]}",
                                 i ? ", " : "", i));
    expect_family_refused(axes.data, "32", "longer than 159 characters");
    dsk_buf_free(&axes);
    /* two families making one symbol */
    expect_refused("{\"family\": \"a\", \"source\": \"a.cu\", \"axes\": [{\"name\": \"K\", \"values\": [1]}], "
                   "\"block\": 32, \"params\": []}, "
                   "{\"family\": \"a__K1\", \"source\": \"a.cu\", \"block\": 32, \"params\": []}",
                   "families a and a__K1 both make the symbol a__K1");
}

/* --arch naming one arch twice compiled it twice and then failed its own check; "," built nothing. */
static void test_arch_lists(void **state)
{
    (void)state;
    char out[8192];
    snprintf(builder, sizeof builder, "%s/dskit-build", test_binary_dir());
    const char *lists[][2] = {{"sm_90,sm_90", "names sm_90 twice"}, {",", "names no architecture"},
                              {"", "names no architecture"}, {"sm_90,sm_7", "unknown arch 'sm_7'"}};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        char *argv[] = {builder, "--arch", (char *)lists[i][0], "--list", NULL};
        test_status st = test_run(argv, out, sizeof out, TEST_HANG_S, 0);
        if (!st.exited || st.exit_code != 2 || !strstr(out, lists[i][1]))
            fail_msg("--arch '%s': exit %d:\n%.1000s", lists[i][0], st.exit_code, out);
    }
}

/* The kit folder's path reaches git as one argument: a quote in it runs nothing (the shell that used to
 * run git would have run "touch PWNED" in the current folder). */
/* 'archs': a family built for some archs only (vision_mm_wgmma: sm_90), and what is refused */
static void test_family_archs(void **state)
{
    (void)state;
    const char *two = "{\"family\": \"g\", \"source\": \"g.cu\", \"block\": 32, \"params\": [\"ptr\"]}, "
                      "{\"family\": \"h\", \"source\": \"h.cu\", \"block\": 32, \"params\": [\"ptr\"], "
                      "\"archs\": [\"sm_90\"], \"target_suffix\": \"a\"}";
    char out[8192];
    const char *archs[] = {"sm_90", "sm_90a", "sm_100"};
    for (int i = 0; i < 3; i++) {
        test_status st = list_defines(two, archs[i], out, sizeof out);
        assert_true(st.exited);
        assert_int_equal(st.exit_code, 0);
        assert_non_null(strstr(out, "g g.cu"));
        if (i < 2)
            assert_non_null(strstr(out, "h h.cu"));
        else
            assert_null(strstr(out, "h h.cu"));
    }
    expect_refused("{\"family\": \"h\", \"source\": \"h.cu\", \"block\": 32, \"params\": [\"ptr\"], \"archs\": []}",
                   "'archs' must be a list");
    expect_refused("{\"family\": \"h\", \"source\": \"h.cu\", \"block\": 32, \"params\": [\"ptr\"], "
                   "\"archs\": [\"sm_90a\"]}",
                   "archs[0] is not an arch without suffix");
}

static void test_git_without_shell(void **state)
{
    (void)state;
    char dir[600], marker[600], head[600], cwd[4096];
    snprintf(marker, sizeof marker, "%s/PWNED", tmpdir);
    snprintf(dir, sizeof dir, "%s/x';touch PWNED;echo '", tmpdir);
    snprintf(head, sizeof head, "%s/head.txt", tmpdir);
    assert_ok(dsk_mkdirs(dir));
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0);
    char *commit = builder_git_commit(dir);
    assert_int_equal(chdir(cwd), 0);
    assert_false(dsk_file_exists(marker));
    free(commit);
    /* inside a checkout, the commit is read */
    const char *cmd = "command -v git >/dev/null || exit 7; cd \"$0\" && git init -q . && "
                      "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m t && git rev-parse HEAD > \"$1\"";
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, dir, head, NULL};
    char out[4096];
    test_status st = test_run(argv, out, sizeof out, TEST_HANG_S, 0);
    if (st.exited && st.exit_code == 7)
        skip();
    if (!st.exited || st.exit_code)
        fail_msg("making a git checkout: %s", out);
    char *want;
    size_t n;
    assert_ok(dsk_read_file(head, &want, &n));
    assert_int_equal(chdir(tmpdir), 0);
    commit = builder_git_commit(dir);
    assert_int_equal(chdir(cwd), 0);
    assert_non_null(commit);
    assert_memory_equal(commit, want, 40);
    assert_false(dsk_file_exists(marker));
    free(commit);
    free(want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_spec),         cmocka_unit_test(test_too_many_axes),
        cmocka_unit_test(test_deep_expressions),  cmocka_unit_test(test_arithmetic_overflow),
        cmocka_unit_test(test_ranges_and_products), cmocka_unit_test(test_names),
        cmocka_unit_test(test_arch_lists),        cmocka_unit_test(test_git_without_shell),
        cmocka_unit_test(test_family_archs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
