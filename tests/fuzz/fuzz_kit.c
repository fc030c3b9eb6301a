/* The kit reader on any archive bytes: kit_archive_read_memory then kit_verify_entries, as `dskit
 * verify` runs them. Never a crash, never more memory than the limits of manifest/archive.h. The first
 * byte picks the form: even, the rest is a tar that the harness compresses with zstd (so mutations
 * reach the tar and the manifest); odd, the rest is handed over as it is (zstd frames, other formats). */
#include "manifest/archive.h"
#include "tests/fuzz/fuzz_common.h"
#include "manifest/kitcheck.h"
#include "runtime/common/escape.h"

#include <archive.h>
#include <archive_entry.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static la_ssize_t collect(struct archive *ar, void *ctx, const void *buf, size_t n)
{
    (void)ar;
    return dsk_buf_append(ctx, buf, n) ? -1 : (la_ssize_t)n;
}

/* zstd(bytes), through libarchive's raw format (one unnamed entry, no tar around it). */
static int zstd_wrap(const uint8_t *data, size_t size, dsk_buf *out)
{
    struct archive *ar = archive_write_new();
    struct archive_entry *e = archive_entry_new();
    int rc = -1;
    if (ar && e && archive_write_add_filter_zstd(ar) == ARCHIVE_OK &&
        archive_write_set_filter_option(ar, "zstd", "compression-level", "1") == ARCHIVE_OK &&
        archive_write_set_format_raw(ar) == ARCHIVE_OK && archive_write_open(ar, out, NULL, collect, NULL) == ARCHIVE_OK) {
        archive_entry_set_pathname(e, "data");
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_size(e, (la_int64_t)size);
        if (archive_write_header(ar, e) == ARCHIVE_OK &&
            (size == 0 || archive_write_data(ar, data, size) == (la_ssize_t)size) && archive_write_close(ar) == ARCHIVE_OK)
            rc = 0;
    }
    if (e)
        archive_entry_free(e);
    if (ar)
        archive_write_free(ar);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    dsk_buf packed = {0};
    const void *bytes = data + 1;
    size_t len = size - 1;
    if (!(data[0] & 1)) {
        FUZZ_CHECK(zstd_wrap(data + 1, size - 1, &packed) == 0);
        bytes = packed.data;
        len = packed.len;
    }
    kit_entries a;
    if (kit_archive_read_memory(bytes, len, "fuzz.tar.zst", &a) == 0) {
        size_t total = 0;
        FUZZ_CHECK(a.n <= KIT_MAX_ENTRIES);
        for (int i = 0; i < a.n; i++) {
            FUZZ_CHECK(kit_entries_find(&a, a.e[i].path) == &a.e[i]);
            total += a.e[i].size;
        }
        FUZZ_CHECK(total <= KIT_MAX_TOTAL_BYTES);
        verify_report r;
        FUZZ_CHECK(kit_verify_entries(&a, NULL, "sm_90", &r) == 0);
        /* a kit with no problem has a manifest that parsed */
        FUZZ_CHECK(r.n > 0 || r.manifest_ok);
        /* ... and every kernel is the one the loader finds by its variant (kit_find's table), and every
         * problem is one printable line */
        for (int i = 0; r.n == 0 && i < r.m.nkernels; i++)
            FUZZ_CHECK(name_table_find(&r.variants, r.keys[i]) == i);
        for (int i = 0; i < r.n; i++)
            FUZZ_CHECK(dsk_is_printable(r.p[i].entry, strlen(r.p[i].entry), 0) &&
                       dsk_is_printable(r.p[i].detail, strlen(r.p[i].detail), 0));
        verify_report_free(&r);
        kit_entries_free(&a);
    }
    dsk_buf_free(&packed);
    return 0;
}
