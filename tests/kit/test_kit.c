/* The kit end to end on the CPU: build kits for sm_90 and sm_121, verify them, refuse every kind of
 * damage with exit 1 and the entry named, reproducible bytes, no compiler in the runtime, named errors
 * for missing variants. */
#include "manifest/archive.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/driver/kit.h"
#include "tests/common/test_util.h"
#include "tests/common/test_proc.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];
static char kit90[512], kit121[512], tiny[512]; /* from the kit_build fixture */

/* Run a shell command, capture stdout+stderr, return the exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
    char full[4096];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    /* drain what did not fit: closing the pipe early would kill the command with SIGPIPE */
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int verify(const char *kit_path, const char *extra, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/dskit verify %s %s", test_binary_dir(), kit_path, extra ? extra : "");
    return run(cmd, out, cap);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dskit-test-kit-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    const char *kits = getenv("DSKIT_TEST_KITS");
    if (!kits) {
        fprintf(stderr, "DSKIT_TEST_KITS is not set: run through ctest (the kit_build fixture builds the kits)\n");
        return -1;
    }
    snprintf(kit90, sizeof kit90, "%s/dskit-sm_90.tar.zst", kits);
    snprintf(kit121, sizeof kit121, "%s/dskit-sm_121.tar.zst", kits);
    snprintf(tiny, sizeof tiny, "%s/tiny", kits);
    return dsk_file_exists(kit90) && dsk_file_exists(kit121) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_verify_good(void **state)
{
    (void)state;
    char out[8192];
    assert_int_equal(verify(kit90, NULL, out, sizeof out), 0);
    assert_non_null(strstr(out, "OK "));
    assert_int_equal(verify(kit121, "--json", out, sizeof out), 0);
    assert_non_null(strstr(out, "\"ok\": true"));
    assert_non_null(strstr(out, "\"arch\": \"sm_121\""));
}

/* Copy the sm_90 kit with one change applied, into name; returns its path. */
typedef void (*mutate_fn)(kit_entries *a);

static const char *damaged(const char *name, mutate_fn fn)
{
    static char path[512];
    kit_entries a;
    assert_ok(kit_archive_read_file(kit90, &a));
    fn(&a);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    assert_ok(kit_archive_write(path, &a));
    kit_entries_free(&a);
    return path;
}

static kit_entry *first_cubin(kit_entries *a)
{
    for (int i = 0; i < a->n; i++)
        if (!strncmp(a->e[i].path, "cubins/", 7))
            return &a->e[i];
    fail_msg("no cubin in the kit");
    return NULL;
}

static char cubin_name[128];

static void flip_byte(kit_entries *a)
{
    kit_entry *e = first_cubin(a);
    e->data[e->size / 2] ^= 0x40;
    snprintf(cubin_name, sizeof cubin_name, "%s", e->path);
}

static void remove_cubin(kit_entries *a)
{
    kit_entry *e = first_cubin(a);
    snprintf(cubin_name, sizeof cubin_name, "%s", e->path);
    free(e->path);
    free(e->data);
    *e = a->e[--a->n];
}

static void add_extra(kit_entries *a)
{
    assert_ok(kit_entries_add(a, "notes/extra.txt", "hello", 5));
}

static kit_entry *entry(kit_entries *a, const char *path)
{
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->e[i].path, path))
            return &a->e[i];
    fail_msg("no %s in the kit", path);
    return NULL;
}

/* Replace text in manifest.json; with `reroot`, also make manifest.xxh128 agree. */
static void edit_manifest(kit_entries *a, const char *from, const char *to, int reroot)
{
    kit_entry *m = entry(a, "manifest.json");
    char *text = malloc(m->size + 1);
    memcpy(text, m->data, m->size);
    text[m->size] = 0;
    char *hit = strstr(text, from);
    assert_non_null(hit);
    size_t pre = (size_t)(hit - text), fl = strlen(from), tl = strlen(to), n = m->size - fl + tl;
    unsigned char *d = malloc(n);
    memcpy(d, text, pre);
    memcpy(d + pre, to, tl);
    memcpy(d + pre + tl, hit + fl, m->size - pre - fl);
    free(m->data);
    free(text);
    m->data = d;
    m->size = n;
    if (reroot) {
        kit_entry *x = entry(a, "manifest.xxh128");
        char h[33];
        dsk_xxh128_hex(m->data, m->size, h);
        memcpy(x->data, h, 32);
    }
}

static void other_arch_rerooted(kit_entries *a)
{
    edit_manifest(a, "\"arch\": \"sm_90\"", "\"arch\": \"sm_100\"", 1);
}

static void other_arch_only(kit_entries *a)
{
    edit_manifest(a, "\"arch\": \"sm_90\"", "\"arch\": \"sm_100\"", 0);
}

static void future_format(kit_entries *a)
{
    edit_manifest(a, "\"format\": \"dskit/1\"", "\"format\": \"dskit/9\"", 1);
}

static void test_flipped_byte(void **state)
{
    (void)state;
    char out[8192];
    const char *p = damaged("dskit-sm_90.flip.tar.zst", flip_byte);
    assert_int_equal(verify(p, NULL, out, sizeof out), 1);
    char want[200];
    snprintf(want, sizeof want, "DIFFERS  %s", cubin_name);
    assert_non_null(strstr(out, want));
}

static void test_removed_cubin(void **state)
{
    (void)state;
    char out[8192], want[200];
    const char *p = damaged("dskit-sm_90.removed.tar.zst", remove_cubin);
    assert_int_equal(verify(p, NULL, out, sizeof out), 1);
    snprintf(want, sizeof want, "MISSING  %s", cubin_name);
    assert_non_null(strstr(out, want));
}

static void test_extra_file(void **state)
{
    (void)state;
    char out[8192];
    const char *p = damaged("dskit-sm_90.extra.tar.zst", add_extra);
    assert_int_equal(verify(p, NULL, out, sizeof out), 1);
    assert_non_null(strstr(out, "EXTRA    notes/extra.txt"));
}

static void test_edited_manifest(void **state)
{
    (void)state;
    char out[16384];
    /* edited without fixing the root: the root no longer matches */
    const char *p = damaged("dskit-sm_90.edited.tar.zst", other_arch_only);
    assert_int_equal(verify(p, NULL, out, sizeof out), 1);
    assert_non_null(strstr(out, "DIFFERS  manifest.json"));
    /* edited consistently: the arch disagrees with the file name and with every cubin */
    p = damaged("dskit-sm_90.tar.zst.rerooted", other_arch_rerooted);
    char renamed[700];
    char sub[300];
    snprintf(sub, sizeof sub, "%s/rerooted", tmpdir);
    assert_ok(dsk_mkdirs(sub));
    snprintf(renamed, sizeof renamed, "%s/dskit-sm_90.tar.zst", sub);
    assert_int_equal(rename(p, renamed), 0);
    assert_int_equal(verify(renamed, NULL, out, sizeof out), 1);
    assert_non_null(strstr(out, "ARCH     manifest.json: kit is for sm_100, expected sm_90"));
    assert_non_null(strstr(out, "ARCH     cubins/"));
    /* an unknown format version */
    p = damaged("dskit-sm_90.format.tar.zst", future_format);
    assert_int_equal(verify(p, NULL, out, sizeof out), 1);
    assert_non_null(strstr(out, "FORMAT   manifest.json"));
    assert_non_null(strstr(out, "unknown format 'dskit/9'"));
}

static void test_kit_root(void **state)
{
    (void)state;
    char out[8192], arg[64];
    kit *k;
    assert_ok(kit_open(kit90, NULL, &k));
    snprintf(arg, sizeof arg, "--kit-root %s", kit_root(k));
    assert_int_equal(verify(kit90, arg, out, sizeof out), 0);
    assert_int_equal(verify(kit90, "--kit-root 0123456789abcdef0123456789abcdef", out, sizeof out), 1);
    assert_non_null(strstr(out, "ROOT     manifest.json"));
    assert_int_equal(verify(kit90, "--kit-root xyz", out, sizeof out), 2);
    /* the runtime refuses a kit whose root differs from the pinned one */
    kit *bad;
    assert_int_equal(kit_open(kit90, "0123456789abcdef0123456789abcdef", &bad), KIT_OPEN_BAD);
    assert_non_null(strstr(dsk_err_msg(), "is not the pinned root"));
    kit_close(k);
}

static void test_truncated(void **state)
{
    (void)state;
    char *data, out[8192], path[600];
    size_t len;
    assert_ok(dsk_read_file(kit90, &data, &len));
    snprintf(path, sizeof path, "%s/dskit-sm_90.trunc.tar.zst", tmpdir);
    assert_ok(dsk_write_file_atomic(path, data, len * 2 / 3));
    free(data);
    assert_int_equal(verify(path, NULL, out, sizeof out), 1);
    assert_non_null(strstr(out, "truncated"));
    kit *k;
    assert_int_equal(kit_open(path, NULL, &k), KIT_OPEN_BAD);
    /* not a file at all: an I/O error, exit 2 */
    assert_int_equal(verify("/nonexistent/kit.tar.zst", NULL, out, sizeof out), 2);
}

/* The same sources give the same bytes, from a warm cache and from an empty one (every variant compiled
 * again): the tiny model's kit, a third of the full kit's compiles. */
static void test_reproducible(void **state)
{
    (void)state;
    char cmd[2048], out[65536], warm[600], cold[600], cache[600];
    snprintf(cache, sizeof cache, "%s/fresh-cache", tmpdir);
    snprintf(warm, sizeof warm, "%s/warm", tmpdir);
    snprintf(cold, sizeof cold, "%s/cold", tmpdir);
    snprintf(cmd, sizeof cmd, "%s/dskit-build --arch sm_90 --for %s --out %s", test_binary_dir(), tiny, warm);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "%s/dskit-build --arch sm_90 --for %s --out %s --cache %s", test_binary_dir(), tiny,
             cold, cache);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "(0 from the cache)"));
    char *a, *b, path[700];
    size_t la, lb;
    snprintf(path, sizeof path, "%s/dskit-sm_90.tar.zst", warm);
    assert_ok(dsk_read_file(path, &a, &la));
    snprintf(path, sizeof path, "%s/dskit-sm_90.tar.zst", cold);
    assert_ok(dsk_read_file(path, &b, &lb));
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
}

static void test_no_compiler_in_runtime(void **state)
{
    (void)state;
    char cmd[1024], out[16384];
    snprintf(cmd, sizeof cmd, "readelf -d %s/dskit", test_binary_dir());
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "(NEEDED)"));
    assert_null(strstr(out, "nvrtc"));
    assert_null(strstr(out, "libcuda"));
    assert_null(strstr(out, "nvJitLink"));
    /* and the builder does link NVRTC (the check above can tell them apart) */
    snprintf(cmd, sizeof cmd, "readelf -d %s/dskit-build", test_binary_dir());
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "libnvrtc"));
}

static void test_missing_variant(void **state)
{
    (void)state;
    kit *k;
    assert_ok(kit_open(kit90, NULL, &k));
    assert_non_null(kit_find(k, "rmsnorm", "T=128"));
    assert_non_null(kit_findf(k, "rowmm_bf16", "M=%d", 16));
    assert_null(kit_find(k, "rmsnorm", "T=999"));
    assert_non_null(strstr(dsk_err_msg(), "rmsnorm"));
    assert_non_null(strstr(dsk_err_msg(), "T=999"));
    assert_null(kit_find(k, "exl3_gemv", "K=4,CB=2,M=8"));
    assert_non_null(strstr(dsk_err_msg(), "exl3_gemv"));
    assert_non_null(strstr(dsk_err_msg(), "K=4,CB=2,M=8"));
    kit_close(k);
}

static void test_no_device(void **state)
{
    (void)state;
    char out[8192];
    if (dsk_cuda_open() == 0)
        skip(); /* a machine with a GPU: this check is for the CPU-only path */
    assert_int_equal(verify(kit90, "--device", out, sizeof out), 2);
    assert_non_null(strstr(out, "no CUDA device"));
}

static void test_builder_errors(void **state)
{
    (void)state;
    char cmd[2048], out[65536];
    snprintf(cmd, sizeof cmd, "%s/dskit-build --arch sm_75 --out %s/x", test_binary_dir(), tmpdir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "unknown arch 'sm_75'"));
    /* a kernel that does not compile: a copy of kit/ with one broken source */
    snprintf(cmd, sizeof cmd,
             "set -e; d=%s/brokenkit; rm -rf $d; cp -r %s/kit $d; rm -rf $d/cubins; "
             "printf 'this is not CUDA\\n' >> $d/src/rope.cu; cp %s/LICENSE %s/LICENSE; "
             "%s/dskit-build --src $d --arch sm_90 --out %s/broken --no-cache",
             tmpdir, test_source_dir(), test_source_dir(), tmpdir, test_binary_dir(), tmpdir);
    assert_int_equal(run(cmd, out, sizeof out), 1);
    assert_non_null(strstr(out, "family rope"));
    assert_non_null(strstr(out, "R="));
    assert_non_null(strstr(out, "rope.cu"));
    assert_non_null(strstr(out, "no kit written"));
    char path[600];
    snprintf(path, sizeof path, "%s/broken/dskit-sm_90.tar.zst", tmpdir);
    assert_false(dsk_file_exists(path));
}

static void test_needs(void **state)
{
    (void)state;
    char cmd[4096], out[65536];
    /* the tiny model (from the fixture), a variant of its config with the real q_lora width, and the same
     * model in the MCG codebook */
    snprintf(cmd, sizeof cmd,
             "set -e; mkdir -p %s/wide; "
             "sed -e 's/\"q_lora_rank\": *[0-9]*/\"q_lora_rank\": 1280/' %s/config.json > %s/wide/config.json; "
             "grep -q '\"q_lora_rank\": 1280' %s/wide/config.json; "
             "for f in %s/*.safetensors %s/model.safetensors.index.json; do ln -s \"$f\" %s/wide/; done; "
             "%s/dskit mkmodel --preset tiny --seed 3 --codebook mcg --out %s/tinymcg >/dev/null",
             tmpdir, tiny, tmpdir, tmpdir, tiny, tiny, tmpdir, test_binary_dir(), tmpdir);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    /* the full kit covers the tiny model */
    char arg[600];
    snprintf(arg, sizeof arg, "--needs %s", tiny);
    assert_int_equal(verify(kit90, arg, out, sizeof out), 0);
    /* --for builds exactly what it needs, and that kit passes --needs too */
    snprintf(cmd, sizeof cmd, "%s/dskit-build --arch sm_90 --for %s --out %s/fortiny", test_binary_dir(), tiny, tmpdir);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "needs"));
    char small[600];
    snprintf(small, sizeof small, "%s/fortiny/dskit-sm_90.tar.zst", tmpdir);
    assert_int_equal(verify(small, arg, out, sizeof out), 0);
    kit *full, *part;
    assert_ok(kit_open(kit90, NULL, &full));
    assert_ok(kit_open(small, NULL, &part));
    assert_true(kit_nkernels(part) < kit_nkernels(full));
    kit_close(full);
    kit_close(part);
    /* the real q_lora width needs an RMSNorm variant the tiny-only kit lacks: named, exit 1 */
    snprintf(arg, sizeof arg, "--needs %s/wide", tmpdir);
    assert_int_equal(verify(small, arg, out, sizeof out), 1);
    assert_non_null(strstr(out, "NEEDS    rmsnorm T=128"));
    /* the EXL3 variants come from the checkpoint: the same model in the MCG codebook needs others */
    snprintf(arg, sizeof arg, "--needs %s/tinymcg", tmpdir);
    assert_int_equal(verify(small, arg, out, sizeof out), 1);
    assert_non_null(strstr(out, "NEEDS    exl3_mm K=2,CB=1,M=8"));
    assert_int_equal(verify(kit90, arg, out, sizeof out), 0);
    /* a folder with no config.json: a usage / I/O error */
    snprintf(arg, sizeof arg, "--needs %s/nothing-here", tmpdir);
    assert_int_equal(verify(small, arg, out, sizeof out), 2);
    snprintf(cmd, sizeof cmd, "%s/dskit-build --arch sm_90 --for %s/nothing-here --out %s/x", test_binary_dir(), tmpdir,
             tmpdir);
    assert_int_equal(run(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--for"));
}

/* The kit folder's path goes to git as one argument (it went into a shell command line): a build from a
 * folder named with a quote runs nothing. A copy of kit/ there, built from the warm cache. */
static void test_quote_in_src(void **state)
{
    (void)state;
    char parent[600], src[700], out_dir[700], marker[700], cache[PATH_MAX + 32], out[65536];
    snprintf(parent, sizeof parent, "%s/x';touch PWNED;echo '", tmpdir);
    snprintf(src, sizeof src, "%s/kit", parent);
    snprintf(out_dir, sizeof out_dir, "%s/quoted", tmpdir);
    snprintf(marker, sizeof marker, "%s/PWNED", tmpdir);
    char source[PATH_MAX];
    assert_non_null(realpath(test_source_dir(), source));
    snprintf(cache, sizeof cache, "%s/kit/cubins/cache", source);
    char *copy[] = {"/bin/sh", "-c", "set -e; mkdir -p \"$1\"; cp -r \"$0/kit/src\" \"$0/kit/variants.json\" \"$1/\"; "
                    "cp \"$0/LICENSE\" \"$1/../LICENSE\"",
                    source, src, NULL};
    test_status st = test_run(copy, out, sizeof out, TEST_HANG_S, 0);
    assert_int_equal(st.exit_code, 0);
    char rel[600], builder[PATH_MAX], cwd[4096];
    snprintf(rel, sizeof rel, "%s/dskit-build", test_binary_dir());
    assert_non_null(realpath(rel, builder)); /* it runs from tmpdir */
    char *argv[] = {builder, "--arch", "sm_90", "--src", src, "--cache", cache, "--out", out_dir, NULL};
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(tmpdir), 0); /* where the injected command would have run */
    st = test_run(argv, out, sizeof out, TEST_HANG_S, 0);
    assert_int_equal(chdir(cwd), 0);
    if (!st.exited || st.exit_code)
        fail_msg("dskit-build --src with a quote: exit %d:\n%s", st.exit_code, out);
    assert_false(dsk_file_exists(marker));
    char kit_path[800];
    snprintf(kit_path, sizeof kit_path, "%s/dskit-sm_90.tar.zst", out_dir);
    assert_int_equal(verify(kit_path, NULL, out, sizeof out), 0);
}

/* A tiny spec (one variant) built with its own cache: a damaged, empty or unchecked cache entry is named
 * on stderr and compiled again, and the kit is the same bytes as from a clean compile. */
static void build_tiny(const char *src, const char *cache, const char *out_dir, char *out, size_t cap)
{
    char builder[600];
    snprintf(builder, sizeof builder, "%s/dskit-build", test_binary_dir());
    char *argv[] = {builder, "--arch", "sm_90", "--src", (char *)src, "--cache", (char *)cache, "--out",
                    (char *)out_dir, NULL};
    test_status st = test_run(argv, out, cap, TEST_HANG_S, 0);
    if (!st.exited || st.exit_code)
        fail_msg("dskit-build (tiny spec): exit %d:\n%s", st.exit_code, out);
}

static void read_kit(const char *out_dir, char **data, size_t *len)
{
    char path[800];
    snprintf(path, sizeof path, "%s/dskit-sm_90.tar.zst", out_dir);
    assert_ok(dsk_read_file(path, data, len));
}

static void test_cache_damage(void **state)
{
    (void)state;
    char src[600], cache[600], dir[600], cmd[4096], out[65536];
    snprintf(src, sizeof src, "%s/tinykit/kit", tmpdir);
    snprintf(cache, sizeof cache, "%s/tinykit/cache", tmpdir);
    snprintf(cmd, sizeof cmd,
             "set -e; mkdir -p %s; cp -r %s/kit/src %s/; cp %s/LICENSE %s/../LICENSE; "
             "printf '{\"format\": \"dskit-variants/1\", \"families\": [{\"family\": \"rmsnorm\", \"source\": "
             "\"rmsnorm.cu\", \"axes\": [{\"name\": \"T\", \"values\": [32]}], \"block\": \"T\", \"params\": "
             "[\"ptr\", \"ptr\", \"ptr\", \"i32\", \"i32\", \"f32\"]}]}' > %s/variants.json",
             src, test_source_dir(), src, test_source_dir(), src, src);
    assert_int_equal(run(cmd, out, sizeof out), 0);
    char *clean, *again;
    size_t clean_len, again_len;
    snprintf(dir, sizeof dir, "%s/tinykit/clean", tmpdir);
    build_tiny(src, cache, dir, out, sizeof out);
    assert_non_null(strstr(out, "compiled 1 variants (0 from the cache)"));
    read_kit(dir, &clean, &clean_len);
    /* the one cache entry and its checksum */
    char entry[800] = "", sum[800];
    snprintf(cmd, sizeof cmd, "ls %s/*.cubin", cache);
    assert_int_equal(run(cmd, entry, sizeof entry), 0);
    entry[strcspn(entry, "\n")] = 0;
    snprintf(sum, sizeof sum, "%.*s.xxh128", (int)(strlen(entry) - 6), entry);
    assert_true(dsk_file_exists(sum));
    static const struct {
        const char *damage, *said;
    } cases[] = {
        {"flip", "hashes to"}, {"empty", "is empty"}, {"nosum", "has no readable checksum"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *bytes;
        size_t n;
        assert_ok(dsk_read_file(entry, &bytes, &n));
        if (!strcmp(cases[i].damage, "flip")) {
            bytes[n / 2] ^= 0x10; /* inside the code: the ELF still parses */
            assert_ok(dsk_write_file_atomic(entry, bytes, n));
        } else if (!strcmp(cases[i].damage, "empty")) {
            assert_ok(dsk_write_file_atomic(entry, "", 0));
        } else {
            assert_int_equal(unlink(sum), 0);
        }
        free(bytes);
        snprintf(dir, sizeof dir, "%s/tinykit/%s", tmpdir, cases[i].damage);
        build_tiny(src, cache, dir, out, sizeof out);
        if (!strstr(out, entry) || !strstr(out, cases[i].said) || !strstr(out, "compiling it again"))
            fail_msg("a cache entry damaged by '%s' was not reported:\n%s", cases[i].damage, out);
        read_kit(dir, &again, &again_len);
        assert_int_equal(again_len, clean_len);
        assert_memory_equal(again, clean, clean_len);
        free(again);
    }
    /* repaired: the next build takes it from the cache */
    snprintf(dir, sizeof dir, "%s/tinykit/repaired", tmpdir);
    build_tiny(src, cache, dir, out, sizeof out);
    assert_non_null(strstr(out, "(1 from the cache)"));
    assert_null(strstr(out, "compiling it again"));
    free(clean);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_good),     cmocka_unit_test(test_flipped_byte),
        cmocka_unit_test(test_removed_cubin),   cmocka_unit_test(test_extra_file),
        cmocka_unit_test(test_edited_manifest), cmocka_unit_test(test_kit_root),
        cmocka_unit_test(test_truncated),       cmocka_unit_test(test_reproducible),
        cmocka_unit_test(test_no_compiler_in_runtime), cmocka_unit_test(test_missing_variant),
        cmocka_unit_test(test_no_device),       cmocka_unit_test(test_builder_errors),
        cmocka_unit_test(test_needs),           cmocka_unit_test(test_quote_in_src),
        cmocka_unit_test(test_cache_damage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
