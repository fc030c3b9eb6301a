/* dskit engram pack / verify: round trips for the tiny preset (tp 1 and 2) and real-width tables, the
 * format's layout (header fields, block geometry, the rank split), the output appearing whole or not at
 * all, and every kind of damage refused by both verify and the store's open, naming the file. */
#include "runtime/engram/engram_format.h"
#include "tests/common/test_proc.h"
#include "tests/engram/engram_test_util.h"

static char root[512], tiny[600], wide_a[600], wide_b[600], pack1[600], pack2[600], wpack[600];
static st_set *ck_tiny, *ck_a, *ck_b;
static engram_source src_tiny, src_a, src_b;

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "%s/engram-pack-test-XXXXXX", test_binary_dir());
    if (!mkdtemp(root))
        return -1;
    uint64_t seed = eng_seed();
    printf("engram pack test: seed %" PRIu64 " in %s\n", seed, root);
    snprintf(tiny, sizeof tiny, "%s/tiny", root);
    snprintf(wide_a, sizeof wide_a, "%s/wide-a", root);
    snprintf(wide_b, sizeof wide_b, "%s/wide-b", root);
    snprintf(pack1, sizeof pack1, "%s/pack-tp1", root);
    snprintf(pack2, sizeof pack2, "%s/pack-tp2", root);
    snprintf(wpack, sizeof wpack, "%s/pack-wide", root);
    const int wide_ids[2] = {1, 14};
    if (eng_make_tiny(tiny, seed) || eng_make_wide(wide_a, 1001, 777, seed) || eng_make_wide(wide_b, 1001, 777, seed + 1) ||
        st_open(tiny, &ck_tiny) || engram_source_from_model(ck_tiny, tiny, &src_tiny) || st_open(wide_a, &ck_a) ||
        st_open(wide_b, &ck_b) || engram_source_from_checkpoint(ck_a, wide_ids, 2, &src_a) ||
        engram_source_from_checkpoint(ck_b, wide_ids, 2, &src_b)) {
        fprintf(stderr, "setup: %s\n", dsk_err_msg());
        return -1;
    }
    const char *p1[] = {"engram", "pack", "--model", tiny, "--out", pack1, NULL};
    const char *p2[] = {"engram", "pack", "--model", tiny, "--out", pack2, "--tp", "2", NULL};
    engram_pack_opts wo = {.tp = 1};
    if (eng_run(cmd_engram, p1) || eng_run(cmd_engram, p2) || engram_pack(&src_a, wpack, &wo, NULL, NULL)) {
        fprintf(stderr, "setup: %s\n", dsk_err_msg());
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    st_close(ck_tiny);
    st_close(ck_a);
    st_close(ck_b);
    return eng_rm_tree(root);
}

static void read_header(const char *path, engram_header *h)
{
    uint8_t buf[ENGRAM_HEADER_BYTES];
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof buf, f), sizeof buf);
    fclose(f);
    assert_ok(engram_header_decode(buf, path, h));
}

/* The tiny tables (32-wide rows: 33-byte records, 123 a block) and the split of 714 / 1402 rows. */
static void test_layout_tiny(void **state)
{
    (void)state;
    char path[700];
    engram_header h;
    snprintf(path, sizeof path, "%s/layer1.rank0of1.engram", pack1);
    read_header(path, &h);
    assert_int_equal(h.width, 32);
    assert_int_equal(h.record_bytes, 33);
    assert_int_equal(h.block_rows, 123);
    assert_int_equal(h.block_bytes, 4096);
    assert_int_equal(h.layer_id, 1);
    assert_int_equal(h.slot, 0);
    assert_int_equal(h.table_rows, 714);
    assert_int_equal(h.row_first, 0);
    assert_int_equal(h.row_count, 714);
    assert_int_equal(h.block_count, 6);
    assert_string_equal(h.weight.name, "layers.1.engram.embed.weight");
    assert_string_equal(h.scale.name, "layers.1.engram.embed.scale");
    assert_memory_equal(h.source_id, src_tiny.table[0].source_id, 16);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 4096 + 6 * 4096);

    snprintf(path, sizeof path, "%s/layer2.rank1of2.engram", pack2);
    read_header(path, &h);
    assert_int_equal(h.tp, 2);
    assert_int_equal(h.rank, 1);
    assert_int_equal(h.table_rows, 1402);
    assert_int_equal(h.row_first, 701);
    assert_int_equal(h.row_count, 701);
    assert_int_equal(h.block_count, 6);
}

/* Real-width rows: 264-byte records, 15 a block, the first and last block of each file hold exactly the
 * checkpoint's bytes at the documented places, and the block hash is the documented one. */
static void test_layout_wide(void **state)
{
    (void)state;
    char path[700];
    engram_header h;
    snprintf(path, sizeof path, "%s/layer14.rank0of1.engram", wpack);
    read_header(path, &h);
    assert_int_equal(h.record_bytes, 264);
    assert_int_equal(h.block_rows, 15);
    assert_int_equal(h.block_count, (777 + 14) / 15);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t blk[4096], rec[264];
    uint64_t last = h.block_count - 1;
    for (uint64_t b = 0; b <= last; b += last) {
        assert_int_equal(fseek(f, (long)(4096 + b * 4096), SEEK_SET), 0);
        assert_int_equal(fread(blk, 1, 4096, f), 4096);
        uint64_t first = b * 15, n = b == last ? 777 - first : 15;
        for (uint64_t i = 0; i < n; i++) {
            eng_expected(&src_a.table[1], (int64_t)(first + i), rec);
            assert_memory_equal(blk + i * 264, rec, 264);
        }
        for (size_t i = n * 264; i < 4096 - 16; i++) /* padding is zero */
            assert_int_equal(blk[i], 0);
        assert_true(engram_block_ok(blk, 4096, engram_block_seed(h.source_id, first)));
        assert_false(engram_block_ok(blk, 4096, engram_block_seed(h.source_id, first + 1)));
    }
    fclose(f);
}

static void test_geometry(void **state)
{
    (void)state;
    uint32_t rows, bytes;
    assert_ok(engram_block_geometry(264, 0, &rows, &bytes));
    assert_int_equal(rows, 15);
    assert_int_equal(bytes, 4096);
    assert_ok(engram_block_geometry(264, 16, &rows, &bytes));
    assert_int_equal(bytes, 8192);
    assert_ok(engram_block_geometry(264, 3000, &rows, &bytes));
    assert_int_equal(bytes, 794624);
    assert_int_not_equal(engram_block_geometry(264, 4000, &rows, &bytes), 0);
    uint64_t first, count;
    engram_rank_rows(1403, 2, 1, &first, &count);
    assert_int_equal(first, 702);
    assert_int_equal(count, 701);
    engram_rank_rows(5, 8, 7, &first, &count); /* more ranks than rows: empty tail ranks */
    assert_int_equal(count, 0);
}

static void test_verify_good(void **state)
{
    (void)state;
    assert_int_equal(engram_verify(pack1, &src_tiny, NULL), 0);
    assert_int_equal(engram_verify(pack2, &src_tiny, NULL), 0);
    assert_int_equal(engram_verify(pack2, NULL, NULL), 0);
    assert_int_equal(engram_verify(wpack, &src_a, NULL), 0);
    const char *v[] = {"engram", "verify", pack2, "--model", tiny, NULL};
    assert_int_equal(eng_run(cmd_engram, v), 0);
}

/* Exit statuses: 2 for usage and a folder that is not there. */
static void test_cli_usage(void **state)
{
    (void)state;
    char nothere[700];
    snprintf(nothere, sizeof nothere, "%s/nothere", root);
    const char *a[] = {"engram", "verify", nothere, NULL};
    assert_int_equal(eng_run(cmd_engram, a), 2);
    const char *b[] = {"engram", "verify", NULL};
    assert_int_equal(eng_run(cmd_engram, b), 2);
    const char *c[] = {"engram", "pack", "--model", tiny, NULL};
    assert_int_equal(eng_run(cmd_engram, c), 2);
    const char *d[] = {"engram", "pack", "--model", tiny, "--out", nothere, "--tp", "9", NULL};
    assert_int_equal(eng_run(cmd_engram, d), 2);
    const char *e[] = {"engram", "frobnicate", NULL};
    assert_int_equal(eng_run(cmd_engram, e), 2);
    assert_int_equal(access(nothere, F_OK), -1);
}

/* A copy of a pack to damage. */
static void fresh_copy(const char *src, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", root, name);
    eng_rm_tree(out);
    assert_ok(eng_copy_dir(src, out));
}

/* Both the verifier (exit 1) and the store's open must refuse, naming the file and saying why. */
static void expect_refused(const char *dir, const engram_source *src, const char *file, const char *why,
                           int store_verify_blocks)
{
    assert_int_equal(engram_verify(dir, src, NULL), 1);
    const char *msg = dsk_err_msg();
    if (!strstr(msg, file) || !strstr(msg, why))
        fail_msg("verify: expected '%s' and '%s' in: %s", file, why, msg);
    char placement[700];
    snprintf(placement, sizeof placement, "nvme:%s", dir);
    engram_store_opts o = {.verify_blocks = store_verify_blocks};
    engram_store *s = NULL;
    assert_int_not_equal(engram_store_open(placement, src, &o, &s), 0);
    assert_null(s);
    msg = dsk_err_msg();
    if (!strstr(msg, file) || !strstr(msg, why))
        fail_msg("store open: expected '%s' and '%s' in: %s", file, why, msg);
}

static void test_damage_truncated(void **state)
{
    (void)state;
    char dir[700], path[800];
    fresh_copy(pack2, "dmg-trunc", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/layer2.rank0of2.engram", dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 4096), 0);
    expect_refused(dir, &src_tiny, "layer2.rank0of2.engram", "truncated", 0);
    assert_int_equal(truncate(path, 100), 0); /* inside the header */
    expect_refused(dir, &src_tiny, "layer2.rank0of2.engram", "truncated", 0);
    const char *v[] = {"engram", "verify", dir, NULL};
    assert_int_equal(eng_run(cmd_engram, v), 1);
}

static void test_damage_block(void **state)
{
    (void)state;
    char dir[700], path[800];
    fresh_copy(pack1, "dmg-block", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/layer2.rank0of1.engram", dir);
    assert_ok(eng_flip_byte(path, 4096 + 3 * 4096 + 1234)); /* a record byte of block 3 */
    expect_refused(dir, &src_tiny, "layer2.rank0of1.engram", "block 3 ", 1);
    fresh_copy(pack1, "dmg-pad", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/layer1.rank0of1.engram", dir);
    assert_ok(eng_flip_byte(path, 4096 + 5 * 4096 + 4000)); /* the last block's zero padding */
    expect_refused(dir, &src_tiny, "layer1.rank0of1.engram", "block 5 ", 1);
}

static void test_damage_header(void **state)
{
    (void)state;
    char dir[700], path[800];
    fresh_copy(pack1, "dmg-header", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/layer1.rank0of1.engram", dir);
    assert_ok(eng_flip_byte(path, 60)); /* row_first */
    expect_refused(dir, &src_tiny, "layer1.rank0of1.engram", "header is damaged", 0);
    fresh_copy(pack1, "dmg-magic", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/layer1.rank0of1.engram", dir);
    assert_ok(eng_flip_byte(path, 0));
    expect_refused(dir, &src_tiny, "layer1.rank0of1.engram", "magic", 0);
}

static void test_damage_missing(void **state)
{
    (void)state;
    char dir[700], path[800];
    fresh_copy(pack2, "dmg-missing", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/layer1.rank1of2.engram", dir);
    assert_int_equal(remove(path), 0);
    expect_refused(dir, &src_tiny, "layer1.rank1of2.engram", "missing", 0);
    snprintf(path, sizeof path, "%s/%s", dir, ENGRAM_MANIFEST);
    assert_int_equal(remove(path), 0);
    expect_refused(dir, &src_tiny, ENGRAM_MANIFEST, "missing", 0);
}

/* A header whose fields agree with one another but claim more rows than a table may have: refused (2^62
 * rows in 4096-byte blocks of one row gave a file size of 4096 bytes, wrapped, which a header-only file
 * matched). */
static void test_rows_bound(void **state)
{
    (void)state;
    char path[800];
    snprintf(path, sizeof path, "%s/layer1.rank0of1.engram", pack1);
    engram_header h;
    read_header(path, &h);
    h.block_rows = 1;
    const uint64_t rows[] = {UINT64_C(1) << 62, ENGRAM_MAX_TABLE_ROWS + 1};
    for (int i = 0; i < 2; i++) {
        h.table_rows = rows[i];
        engram_rank_rows(h.table_rows, h.tp, h.rank, &h.row_first, &h.row_count);
        h.block_count = h.row_count / h.block_rows + (h.row_count % h.block_rows != 0);
        uint8_t buf[ENGRAM_HEADER_BYTES];
        engram_header_encode(&h, buf);
        engram_header back;
        assert_int_equal(engram_header_decode(buf, path, &back), -1);
        assert_non_null(strstr(dsk_err_msg(), "table rows"));
    }
}

typedef struct {
    const char *dir;
    const engram_source *src;
} fifo_case;

/* In a child: verify and the store's open both refuse at once, saying what the path is. */
static int refuse_fifo(void *arg)
{
    const fifo_case *c = arg;
    if (engram_verify(c->dir, c->src, NULL) == 0 || !strstr(dsk_err_msg(), "not a regular file"))
        return 3;
    char placement[700];
    snprintf(placement, sizeof placement, "nvme:%s", c->dir);
    engram_store_opts o = {.verify_blocks = 0};
    engram_store *s = NULL;
    if (engram_store_open(placement, c->src, &o, &s) == 0 || !strstr(dsk_err_msg(), "not a regular file"))
        return 4;
    return 0;
}

/* A FIFO in place of a pack file or of the manifest: refused, never waited on (the open of a FIFO blocks
 * until a writer comes; json_load_file and open(O_RDONLY) both did). */
static void test_fifo(void **state)
{
    (void)state;
    char dir[700], path[800];
    const char *names[] = {"layer1.rank1of2.engram", ENGRAM_MANIFEST};
    for (int i = 0; i < 2; i++) {
        fresh_copy(pack2, i ? "fifo-manifest" : "fifo-pack", dir, sizeof dir);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        assert_int_equal(remove(path), 0);
        assert_int_equal(mkfifo(path, 0644), 0);
        fifo_case c = {dir, &src_tiny};
        test_status st = test_run_fn(refuse_fifo, &c, 60, 0);
        if (!st.exited || st.exit_code != 0)
            fail_msg("a FIFO as %s: exit %d, signal %d (14: still waiting after 60 s)", names[i], st.exit_code,
                     st.signal);
    }
}

/* Files swapped between places: each header says where it belongs. */
static void test_damage_swapped(void **state)
{
    (void)state;
    char dir[700], a[800], b[800], t[800];
    fresh_copy(pack2, "dmg-swap", dir, sizeof dir);
    snprintf(a, sizeof a, "%s/layer1.rank0of2.engram", dir);
    snprintf(b, sizeof b, "%s/layer1.rank1of2.engram", dir);
    snprintf(t, sizeof t, "%s/tmp", dir);
    assert_int_equal(rename(a, t) || rename(b, a) || rename(t, b), 0);
    expect_refused(dir, &src_tiny, "layer1.rank0of2.engram", "the manifest puts", 0);
}

/* Packed from checkpoint A (same tensor names, shapes and shard header as B): refused for B, naming the
 * file; verify --model B says so too; the sample in the identity is what tells them apart. */
static void test_wrong_checkpoint(void **state)
{
    (void)state;
    assert_memory_equal(src_a.table[0].weight.shard_header, src_b.table[0].weight.shard_header, 16);
    assert_memory_not_equal(src_a.table[0].source_id, src_b.table[0].source_id, 16);
    expect_refused(wpack, &src_b, "layer1.rank0of1.engram", "another checkpoint", 0);
    assert_int_equal(engram_verify(wpack, &src_a, NULL), 0);
    /* the tiny pack against the wide checkpoint: other layers altogether */
    assert_int_equal(engram_verify(pack1, &src_a, NULL), 1);
    assert_non_null(strstr(dsk_err_msg(), "layer"));
}

/* Rows changed in the checkpoint after packing, with the identity (so far) unchanged: only the full
 * comparison of verify --model notices, naming the row. */
static void test_verify_compares_rows(void **state)
{
    (void)state;
    engram_source s = src_a;
    uint8_t *copy = malloc((size_t)s.table[0].rows * 256);
    assert_non_null(copy);
    memcpy(copy, s.table[0].values, (size_t)s.table[0].rows * 256);
    copy[517 * 256 + 9] ^= 1;
    s.table[0].values = copy;
    assert_int_equal(engram_verify(wpack, &s, NULL), 1);
    assert_non_null(strstr(dsk_err_msg(), "row 517 differs"));
    free(copy);
}

static int failing_rows(void *ctx, const engram_table *t, int64_t row0, int64_t n, uint8_t *rec)
{
    (void)ctx, (void)rec, (void)n;
    if (t->slot == 1) /* the first layer's file is written by then */
        return dsk_err("injected failure at row %lld", (long long)row0);
    return 0;
}

static int tmp_siblings(const char *dir)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls -d '%s'.engram-tmp-* >/dev/null 2>&1", dir);
    return system(cmd) == 0;
}

/* The output appears whole or not at all; existing folders are refused unless replaceable. */
static void test_pack_atomic(void **state)
{
    (void)state;
    char out[700], other[700], keep[800];
    snprintf(out, sizeof out, "%s/pack-fail", root);
    engram_pack_opts o = {.tp = 1};
    assert_int_not_equal(engram_pack(&src_a, out, &o, failing_rows, NULL), 0);
    assert_non_null(strstr(dsk_err_msg(), "injected failure"));
    assert_int_equal(access(out, F_OK), -1);
    assert_false(tmp_siblings(out));

    snprintf(other, sizeof other, "%s/not-a-pack", root);
    assert_int_equal(mkdir(other, 0755), 0);
    snprintf(keep, sizeof keep, "%s/keep.txt", other);
    FILE *f = fopen(keep, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
    o.block_rows = 0;
    assert_int_not_equal(engram_pack(&src_a, other, &o, NULL, NULL), 0);
    assert_non_null(strstr(dsk_err_msg(), "not an Engram pack"));
    assert_int_equal(access(keep, F_OK), 0);

    char again[700];
    fresh_copy(wpack, "pack-again", again, sizeof again);
    assert_int_not_equal(engram_pack(&src_b, again, &o, NULL, NULL), 0);
    assert_non_null(strstr(dsk_err_msg(), "--force"));
    assert_int_equal(engram_verify(again, &src_a, NULL), 0);
    o.force = 1;
    assert_ok(engram_pack(&src_b, again, &o, NULL, NULL));
    assert_int_equal(engram_verify(again, &src_b, NULL), 0);
    assert_false(tmp_siblings(again));
}

/* --block-rows: blocks of several pages, read back exactly. */
static void test_block_rows(void **state)
{
    (void)state;
    char out[700];
    snprintf(out, sizeof out, "%s/pack-blocks", root);
    engram_pack_opts o = {.tp = 2, .block_rows = 40};
    assert_ok(engram_pack(&src_a, out, &o, NULL, NULL));
    assert_int_equal(engram_verify(out, &src_a, NULL), 0);
    char path[800];
    engram_header h;
    snprintf(path, sizeof path, "%s/layer1.rank1of2.engram", out);
    read_header(path, &h);
    assert_int_equal(h.block_bytes, 12288);
    assert_int_equal(h.block_rows, 40);
    assert_int_equal(h.row_first, 501);
    assert_int_equal(h.row_count, 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_tiny),      cmocka_unit_test(test_layout_wide),
        cmocka_unit_test(test_geometry),         cmocka_unit_test(test_verify_good),
        cmocka_unit_test(test_cli_usage),        cmocka_unit_test(test_damage_truncated),
        cmocka_unit_test(test_damage_block),     cmocka_unit_test(test_damage_header),
        cmocka_unit_test(test_damage_missing),   cmocka_unit_test(test_damage_swapped),
        cmocka_unit_test(test_fifo),             cmocka_unit_test(test_rows_bound),
        cmocka_unit_test(test_wrong_checkpoint), cmocka_unit_test(test_verify_compares_rows),
        cmocka_unit_test(test_pack_atomic),      cmocka_unit_test(test_block_rows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
