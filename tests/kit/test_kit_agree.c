/* `dskit verify`, `dskit info` and the runtime's loader (kit_open) on the same damaged kits: one check
 * decides for all three, with the same exit codes (issue 15: verify said OK to two kernels of one
 * variant and to an upper-case DSKIT_KIT_ROOT the loader refused; info gave 2 where verify gave 1), and
 * what the kit names is escaped on the way to the terminal (a newline in an entry name forged an "OK"
 * line; ESC sequences passed through; --json dropped a non-UTF-8 entry name). */
#include "manifest/archive.h"
#include "manifest/manifest.h"
#include "runtime/common/error.h"
#include "runtime/common/escape.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "tests/common/test_proc.h"
#include "tests/common/test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[256];
static char kit90[512]; /* from the kit_build fixture */

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dskit-test-kit-agree-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    const char *kits = getenv("DSKIT_TEST_KITS");
    if (!kits) {
        fprintf(stderr, "DSKIT_TEST_KITS is not set: run through ctest (the kit_build fixture builds the kits)\n");
        return -1;
    }
    snprintf(kit90, sizeof kit90, "%s/dskit-sm_90.tar.zst", kits);
    return dsk_file_exists(kit90) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* dskit CMD ARGS... (NULL-terminated) with stdout and stderr in out; returns the exit code. */
static int dskit(char *out, size_t cap, const char *cmd, const char *a1, const char *a2)
{
    char exe[600];
    snprintf(exe, sizeof exe, "%s/dskit", test_binary_dir());
    char *argv[] = {exe, (char *)cmd, (char *)a1, (char *)a2, NULL};
    test_status st = test_run(argv, out, cap, TEST_HANG_S, 0);
    if (!st.exited)
        fail_msg("dskit %s %s: signal %d:\n%s", cmd, a1, st.signal, out);
    return st.exit_code;
}

/* The sm_90 kit's manifest changed by fn (parsed, edited, serialised, root made right), at name. */
typedef void (*manifest_edit)(manifest *m);

static const char *with_manifest(const char *name, manifest_edit fn)
{
    static char path[700];
    kit_entries a;
    assert_ok(kit_archive_read_file(kit90, &a));
    kit_entry *mj = (kit_entry *)kit_entries_find(&a, "manifest.json");
    kit_entry *mx = (kit_entry *)kit_entries_find(&a, "manifest.xxh128");
    assert_non_null(mj);
    assert_non_null(mx);
    manifest m;
    assert_ok(manifest_parse((const char *)mj->data, mj->size, &m));
    fn(&m);
    char *text = manifest_serialize(&m);
    assert_non_null(text);
    manifest_free(&m);
    free(mj->data);
    mj->data = (unsigned char *)text;
    mj->size = strlen(text);
    char h[33];
    dsk_xxh128_hex(mj->data, mj->size, h);
    memcpy(mx->data, h, 32);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    assert_ok(kit_archive_write(path, &a));
    kit_entries_free(&a);
    return path;
}

/* Kernel 1 given kernel 0's family and variant under its own symbol. */
static void same_variant(manifest *m)
{
    assert_true(m->nkernels >= 2);
    mf_kernel *a = &m->kernels[0], *b = &m->kernels[1];
    free(b->family);
    b->family = strdup(a->family);
    b->nparams = a->nparams;
    memcpy(b->param, a->param, sizeof a->param);
}

static void long_family(manifest *m)
{
    free(m->kernels[0].family);
    m->kernels[0].family = malloc(301);
    memset(m->kernels[0].family, 'f', 300);
    m->kernels[0].family[300] = 0;
}

/* A family name that would clear the screen and one that reverses the line (JSON holds only UTF-8): a
 * good kit all the same. */
static void hostile_family(manifest *m)
{
    free(m->kernels[0].family);
    m->kernels[0].family = strdup("\x1b[2J\x1b]0;owned\x07rms");
    free(m->kernels[1].family);
    m->kernels[1].family = strdup("\xe2\x80\xae" "rms");
}

/* verify's exit code, info's, and what kit_open says, for one kit; env root as DSKIT_KIT_ROOT. */
static void expect_all(const char *path, const char *env_root, int code, const char *needle)
{
    char out[16384];
    if (env_root)
        setenv("DSKIT_KIT_ROOT", env_root, 1);
    int v = dskit(out, sizeof out, "verify", path, NULL);
    if (v != code || (needle && !strstr(out, needle)))
        fail_msg("dskit verify %s: exit %d, expected %d and '%s':\n%s", path, v, code, needle ? needle : "", out);
    int i = dskit(out, sizeof out, "info", path, NULL);
    if (i != code)
        fail_msg("dskit info %s: exit %d, expected %d (as verify):\n%s", path, i, code, out);
    kit *k = NULL;
    int rc = kit_open(path, NULL, &k);
    int want = code == 0 ? 0 : code == 1 ? KIT_OPEN_BAD : -1;
    if (rc != want || (needle && code && !strstr(dsk_err_msg(), needle)))
        fail_msg("kit_open %s: %d, expected %d and '%s': %s", path, rc, want, needle ? needle : "", dsk_err_msg());
    kit_close(k);
    unsetenv("DSKIT_KIT_ROOT");
}

static void test_agree(void **state)
{
    (void)state;
    expect_all(kit90, NULL, 0, NULL);
    expect_all(with_manifest("dskit-sm_90.same.tar.zst", same_variant), NULL, 1, "is the same variant");
    expect_all(with_manifest("dskit-sm_90.family.tar.zst", long_family), NULL, 1, "longer than");

    /* the pinned root, from the environment, in either case; a malformed one is exit 2 everywhere */
    kit *k;
    assert_ok(kit_open(kit90, NULL, &k));
    char upper[33];
    for (int i = 0; i < 33; i++)
        upper[i] = (char)(kit_root(k)[i] >= 'a' && kit_root(k)[i] <= 'f' ? kit_root(k)[i] - 32 : kit_root(k)[i]);
    kit_close(k);
    expect_all(kit90, upper, 0, NULL);
    expect_all(kit90, "0123456789ABCDEF0123456789abcdef", 1, "is not the pinned root");
    expect_all(kit90, "0123456789abcdef", 2, NULL);

    /* the arch a kit's file name promises binds the loader too */
    char *data, renamed[700], sub[600];
    size_t len;
    assert_ok(dsk_read_file(kit90, &data, &len));
    snprintf(sub, sizeof sub, "%s/renamed", tmpdir);
    assert_ok(dsk_mkdirs(sub));
    snprintf(renamed, sizeof renamed, "%s/dskit-sm_100.tar.zst", sub);
    assert_ok(dsk_write_file_atomic(renamed, data, len));
    expect_all(renamed, NULL, 1, "kit is for sm_90, expected sm_100");

    /* a truncated archive is a bad kit (1) for all three, a missing file an I/O error (2) */
    snprintf(renamed, sizeof renamed, "%s/dskit-sm_90.trunc.tar.zst", tmpdir);
    assert_ok(dsk_write_file_atomic(renamed, data, len / 2));
    free(data);
    expect_all(renamed, NULL, 1, "ARCHIVE");
    snprintf(renamed, sizeof renamed, "%s/absent.tar.zst", tmpdir);
    expect_all(renamed, NULL, 2, NULL);
}

/* No byte of out is a terminal control (C0 but newline, DEL) or outside well-formed UTF-8. */
static void expect_printable(const char *what, const char *out)
{
    if (!dsk_is_printable(out, strlen(out), DSK_ESC_KEEP_NEWLINES))
        fail_msg("%s printed a control character or invalid UTF-8:\n%s", what, dsk_esc(out));
}

static void test_hostile_names(void **state)
{
    (void)state;
    kit_entries a;
    assert_ok(kit_archive_read_file(kit90, &a));
    assert_ok(kit_entries_add(&a, "notes/x\nOK forged.tar.zst: sm_90, 1 kernels", "1", 1));
    assert_ok(kit_entries_add(&a, "notes/\x1b[31mred", "2", 1));
    assert_ok(kit_entries_add(&a, "notes/\xff\xfe", "3", 1));
    char path[700];
    snprintf(path, sizeof path, "%s/dskit-sm_90.names.tar.zst", tmpdir);
    assert_ok(kit_archive_write(path, &a));
    kit_entries_free(&a);

    char out[65536];
    assert_int_equal(dskit(out, sizeof out, "verify", path, NULL), 1);
    expect_printable("dskit verify", out);
    for (const char *line = out; line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, "OK", 2))
            fail_msg("a forged line in verify's report:\n%s", out);
    assert_non_null(strstr(out, "EXTRA    notes/x\\nOK forged"));
    assert_non_null(strstr(out, "EXTRA    notes/\\x1B[31mred"));
    assert_non_null(strstr(out, "EXTRA    notes/\\xFF\\xFE"));

    /* --json: every problem keeps its entry, as a string */
    assert_int_equal(dskit(out, sizeof out, "verify", path, "--json"), 1);
    json_error_t jerr;
    json_t *doc = json_loads(out, 0, &jerr);
    if (!doc)
        fail_msg("verify --json is not JSON (%s):\n%s", jerr.text, out);
    json_t *problems = json_object_get(doc, "problems");
    assert_int_equal(json_array_size(problems), 3);
    for (size_t i = 0; i < 3; i++)
        assert_true(json_is_string(json_object_get(json_array_get(problems, i), "entry")));
    json_decref(doc);

    /* a good kit whose family names are hostile: info prints them escaped, the loader accepts the kit */
    const char *fam = with_manifest("dskit-sm_90.fam.tar.zst", hostile_family);
    assert_int_equal(dskit(out, sizeof out, "info", fam, NULL), 0);
    expect_printable("dskit info", out);
    assert_non_null(strstr(out, "\\x1B[2J\\x1B]0;owned\\x07rms"));
    assert_non_null(strstr(out, "\\u{202E}rms"));
    /* and a message naming one on stderr is escaped too */
    kit *k;
    assert_ok(kit_open(fam, NULL, &k));
    assert_null(kit_find(k, "\x1b[2J\x1b]0;owned\x07rms", "T=1"));
    expect_printable("kit_find's message", dsk_err_msg());
    kit_close(k);
}

/* The escaper itself on each class it handles. */
static void test_escape(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"plain ascii ~", "plain ascii ~"},
        {"a\nb\r\tc", "a\\nb\\r\\tc"},
        {"\x1b[0m\x7f", "\\x1B[0m\\x7F"},
        {"caf\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x96\x81 \xf0\x9f\x98\x80"}, /* é ▁ 😀 kept */
        {"\xc2\x9b" "2J", "\\u{009B}2J"},                 /* C1 CSI */
        {"\xe2\x80\xae" "gpj.exe", "\\u{202E}gpj.exe"},   /* right-to-left override */
        {"\xe2\x80\xa8", "\\u{2028}"},                    /* line separator */
        {"\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x96", "\\xC0\\xAF \\xED\\xA0\\x80 \\xF4\\x90\\x80\\x80 \\xE2\\x96"},
        {"back\\slash", "back\\slash"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsk_escape(cases[i].in, strlen(cases[i].in), 0, out, sizeof out);
        if (strcmp(out, cases[i].out))
            fail_msg("escape case %zu: got '%s', expected '%s'", i, out, cases[i].out);
        /* idempotent: escaping the result changes nothing */
        char again[256];
        dsk_escape(out, strlen(out), 0, again, sizeof again);
        assert_string_equal(again, out);
    }
    dsk_escape("a\nb", 3, DSK_ESC_KEEP_NEWLINES, out, sizeof out);
    assert_string_equal(out, "a\nb");
    /* an escape that does not fit is left out whole */
    dsk_escape("ab\x1b", 3, 0, out, 6);
    assert_string_equal(out, "ab");
    /* dsk_esc cuts a long name with "...", never inside a UTF-8 sequence */
    char big[3000];
    for (int i = 0; i < 999; i++)
        memcpy(big + 3 * i, "\xe2\x96\x81", 3);
    big[2997] = 0;
    const char *e = dsk_esc(big);
    size_t n = strlen(e);
    assert_true(n < 1024);
    assert_string_equal(e + n - 3, "...");
    assert_true(dsk_is_printable(e, n, 0));
    /* messages are escaped as they are made, lines kept */
    dsk_err("entry '%s'\nnext line", "\x1b[31m");
    assert_string_equal(dsk_err_msg(), "entry '\\x1B[31m'\nnext line");
    dsk_err_ctx("kit \x07");
    assert_string_equal(dsk_err_msg(), "kit \\x07: entry '\\x1B[31m'\nnext line");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_agree),
        cmocka_unit_test(test_hostile_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
