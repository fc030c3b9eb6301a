/* The kit reader on hostile archives (no compiler needed): bounded memory and entry counts, exactly one
 * zstd layer, no hang on a FIFO, caps on the manifest's lists. Each case runs `dskit verify` (or the
 * reader) in a child with a time limit and, outside AddressSanitizer, an address-space limit. */
#include "manifest/archive.h"
#include "manifest/manifest.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "tests/common/test_util.h"
#include "tests/common/test_proc.h"

#include <archive.h>
#include <archive_entry.h>
#include <string.h>
#include <sys/stat.h>

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dskit-test-kit-reader-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tmp_path(const char *name)
{
    static char path[4][512];
    static int turn;
    turn = (turn + 1) % 4;
    snprintf(path[turn], sizeof path[turn], "%s/%s", tmpdir, name);
    return path[turn];
}

/* An entry of a crafted archive: data, or (data NULL) size zero bytes written in 1 MiB pieces. */
typedef struct {
    const char *path;
    size_t size;
    const void *data;
} crafted;

/* A tar with zstd_layers zstd filters over it (0: a plain tar), entries in the order given. */
static void write_crafted(const char *path, int zstd_layers, const crafted *e, int n)
{
    struct archive *ar = archive_write_new();
    assert_non_null(ar);
    for (int i = 0; i < zstd_layers; i++)
        assert_int_equal(archive_write_add_filter_zstd(ar), ARCHIVE_OK);
    if (zstd_layers)
        assert_int_equal(archive_write_set_filter_option(ar, "zstd", "compression-level", "1"), ARCHIVE_OK);
    assert_int_equal(archive_write_set_format_pax_restricted(ar), ARCHIVE_OK);
    assert_int_equal(archive_write_open_filename(ar, path), ARCHIVE_OK);
    static unsigned char zeros[1 << 20];
    struct archive_entry *ent = archive_entry_new();
    for (int i = 0; i < n; i++) {
        archive_entry_clear(ent);
        archive_entry_set_pathname(ent, e[i].path);
        archive_entry_set_filetype(ent, AE_IFREG);
        archive_entry_set_perm(ent, 0644);
        archive_entry_set_size(ent, (la_int64_t)e[i].size);
        assert_int_equal(archive_write_header(ar, ent), ARCHIVE_OK);
        for (size_t done = 0; done < e[i].size;) {
            size_t step = e[i].size - done < sizeof zeros ? e[i].size - done : sizeof zeros;
            const void *src = e[i].data ? (const void *)((const char *)e[i].data + done) : (const void *)zeros;
            assert_int_equal(archive_write_data(ar, src, step), (la_ssize_t)step);
            done += step;
        }
    }
    archive_entry_free(ent);
    assert_int_equal(archive_write_close(ar), ARCHIVE_OK);
    archive_write_free(ar);
}

static char dskit_path[600];

static test_status verify(const char *kit_path, char *out, size_t cap, size_t as_bytes)
{
    snprintf(dskit_path, sizeof dskit_path, "%s/dskit", test_binary_dir());
    char *argv[] = {dskit_path, "verify", (char *)kit_path, NULL};
    return test_run(argv, out, cap, TEST_HANG_S, as_bytes);
}

static void expect_bad(test_status st, const char *out, const char *needle)
{
    if (!st.exited || st.exit_code != 1)
        fail_msg("dskit verify: exit %d signal %d, expected exit 1:\n%s", st.exit_code, st.signal, out);
    if (!strstr(out, needle))
        fail_msg("dskit verify said\n%s\nwhich does not mention '%s'", out, needle);
}

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

/* The report's case: a small file of three 1 GiB zero entries. The reader stops at the first one,
 * before allocating it, so verify runs in 512 MiB of address space. */
static void test_huge_entries(void **state)
{
    (void)state;
    const char *path = tmp_path("huge.tar.zst");
    crafted e[] = {{"cubins/a.cubin", GIB, NULL}, {"cubins/b.cubin", GIB, NULL}, {"cubins/c.cubin", GIB, NULL}};
    write_crafted(path, 1, e, 3);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size < 1 << 20);
    char out[4096];
    expect_bad(verify(path, out, sizeof out, 512 * MIB), out, "entry cubins/a.cubin: size 1073741824 is more than");
}

/* Entries each under the entry limit whose sum is over the kit limit: the first past it is named. */
static void test_total_bytes(void **state)
{
    (void)state;
    const char *path = tmp_path("total.tar.zst");
    crafted e[] = {{"cubins/0.cubin", 60 * MIB, NULL}, {"cubins/1.cubin", 60 * MIB, NULL},
                   {"cubins/2.cubin", 60 * MIB, NULL}, {"cubins/3.cubin", 60 * MIB, NULL},
                   {"cubins/4.cubin", 60 * MIB, NULL}};
    write_crafted(path, 1, e, 5);
    char out[4096];
    expect_bad(verify(path, out, sizeof out, 1024 * MIB), out, "entry cubins/4.cubin: the entries so far");
    /* and the writer refuses to make such a kit */
    kit_entries a = {0};
    unsigned char *big = calloc(KIT_MAX_ENTRY_BYTES + 1, 1);
    assert_non_null(big);
    assert_ok(kit_entries_add(&a, "cubins/big.cubin", big, KIT_MAX_ENTRY_BYTES + 1));
    free(big);
    assert_int_equal(kit_archive_write(tmp_path("never.tar.zst"), &a), -1);
    assert_non_null(strstr(dsk_err_msg(), "cubins/big.cubin"));
    kit_entries_free(&a);
}

/* More entries than a kit may have (the report: 200,000 empty entries took over a minute). */
static void test_entry_count(void **state)
{
    (void)state;
    enum { N = KIT_MAX_ENTRIES + 50 };
    crafted *e = calloc(N, sizeof *e);
    char(*names)[32] = calloc(N, sizeof *names);
    assert_non_null(e);
    assert_non_null(names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "e/%06d", i);
        e[i] = (crafted){names[i], 0, NULL};
    }
    const char *path = tmp_path("count.tar.zst");
    write_crafted(path, 1, e, N);
    char out[4096], want[96];
    snprintf(want, sizeof want, "entry e/%06d: more than %d entries", KIT_MAX_ENTRIES, KIT_MAX_ENTRIES);
    expect_bad(verify(path, out, sizeof out, 1024 * MIB), out, want);
    free(e);
    free(names);
}

/* A kit of manifest.json (its root made right) and nothing else. */
static void write_manifest_kit(const char *path, const char *manifest_text)
{
    kit_entries a = {0};
    char root[40];
    dsk_xxh128_hex(manifest_text, strlen(manifest_text), root);
    strcat(root, "\n");
    assert_ok(kit_entries_add(&a, "manifest.json", manifest_text, strlen(manifest_text)));
    assert_ok(kit_entries_add(&a, "manifest.xxh128", root, 33));
    assert_ok(kit_archive_write(path, &a));
    kit_entries_free(&a);
}

/* More kernels than a kit may list (the report: 100,000 kernels took 30 s to compare). */
static void test_kernel_count(void **state)
{
    (void)state;
    dsk_buf m = {0};
    assert_ok(dsk_buf_printf(&m, "{\"format\": \"dskit/1\", \"arch\": \"sm_90\", \"toolchain\": {}, \"source\": {}, "
                                 "\"blobs\": {}, \"files\": {}, \"kernels\": ["));
    for (int i = 0; i <= MANIFEST_MAX_KERNELS; i++)
        assert_ok(dsk_buf_printf(&m, "%s{\"symbol\": \"k%d\"}", i ? ", " : "", i));
    assert_ok(dsk_buf_printf(&m, "]}"));
    const char *path = tmp_path("kernels.tar.zst");
    write_manifest_kit(path, m.data);
    dsk_buf_free(&m);
    char out[4096], want[96];
    snprintf(want, sizeof want, "%d kernels, more than a kit may have", MANIFEST_MAX_KERNELS + 1);
    expect_bad(verify(path, out, sizeof out, 1024 * MIB), out, want);
}

/* A kit is exactly one zstd-compressed tar. */
static void test_one_zstd_layer(void **state)
{
    (void)state;
    const char *text = "{}";
    crafted e[] = {{"manifest.json", 2, text}};
    char out[4096];
    const char *plain = tmp_path("plain.tar");
    write_crafted(plain, 0, e, 1);
    expect_bad(verify(plain, out, sizeof out, 0), out, "not zstd-compressed");
    const char *twice = tmp_path("twice.tar.zst");
    write_crafted(twice, 2, e, 1);
    expect_bad(verify(twice, out, sizeof out, 0), out, "compressed 2 times");
    const char *once = tmp_path("once.tar.zst");
    write_crafted(once, 1, e, 1);
    expect_bad(verify(once, out, sizeof out, 0), out, "MISSING  manifest.xxh128");
}

static int open_fifo_kit(void *arg)
{
    kit *k;
    if (kit_open(arg, NULL, &k) == 0)
        return 3;
    return strstr(dsk_err_msg(), "not a regular file") ? 0 : 4;
}

/* A FIFO given as the kit is refused at once (an open() of it would block until a writer came). */
static void test_fifo(void **state)
{
    (void)state;
    const char *path = tmp_path("fifo.tar.zst");
    assert_int_equal(mkfifo(path, 0644), 0);
    char out[4096];
    snprintf(dskit_path, sizeof dskit_path, "%s/dskit", test_binary_dir());
    char *argv[] = {dskit_path, "verify", (char *)path, NULL};
    test_status st = test_run(argv, out, sizeof out, TEST_HANG_S, 0);
    if (!st.exited || st.exit_code != 2 || !strstr(out, "not a regular file"))
        fail_msg("dskit verify FIFO: exit %d signal %d:\n%s", st.exit_code, st.signal, out);
    st = test_run_fn(open_fifo_kit, (void *)path, TEST_HANG_S, 0);
    assert_true(st.exited);
    assert_int_equal(st.exit_code, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_huge_entries),  cmocka_unit_test(test_total_bytes),
        cmocka_unit_test(test_entry_count),   cmocka_unit_test(test_kernel_count),
        cmocka_unit_test(test_one_zstd_layer), cmocka_unit_test(test_fifo),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
