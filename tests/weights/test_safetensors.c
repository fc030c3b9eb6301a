/* Safetensors reader and writer: round trips on random tensors, determinism, sharding, index checks,
 * and rejection of malformed files with messages naming the tensor. */
#include "runtime/common/rng.h"
#include "runtime/weights/safetensors.h"
#include "tests/weights/weights_test_util.h"
#include "tests/common/test_proc.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

/* A random tensor description and its random bytes. */
typedef struct {
    char name[64];
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    unsigned char *data;
} tspec;

static void make_specs(tspec *t, int n, uint64_t seed)
{
    dsk_rng r;
    dsk_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        snprintf(t[i].name, sizeof t[i].name, "model.layers.%d.w%d.weight", i / 3, i % 3);
        t[i].dtype = (st_dtype)(i % ST_DTYPE_COUNT);
        t[i].ndim = (int)dsk_rng_below(&r, 4); /* 0-dim scalars included */
        size_t elems = 1;
        for (int d = 0; d < t[i].ndim; d++) {
            t[i].shape[d] = 1 + (int64_t)dsk_rng_below(&r, 9);
            elems *= (size_t)t[i].shape[d];
        }
        if (i == 5) { /* one empty tensor */
            t[i].ndim = 2;
            t[i].shape[0] = 3;
            t[i].shape[1] = 0;
            elems = 0;
        }
        t[i].nbytes = elems * st_dtype_size(t[i].dtype);
        t[i].data = malloc(t[i].nbytes + 1);
        for (size_t b = 0; b < t[i].nbytes; b++)
            t[i].data[b] = (unsigned char)dsk_rng_u64(&r);
    }
}

static void free_specs(tspec *t, int n)
{
    for (int i = 0; i < n; i++)
        free(t[i].data);
}

static void write_specs(const char *dir, uint64_t shard_bytes, const tspec *t, int n)
{
    st_writer *w;
    assert_ok(st_writer_open(dir, shard_bytes, &w));
    for (int i = 0; i < n; i++)
        assert_ok(st_writer_add(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, t[i].data, t[i].nbytes));
    assert_ok(st_writer_close(w));
}

static void check_specs(const st_set *s, const tspec *t, int n)
{
    assert_int_equal(st_count(s), n);
    for (int i = 0; i < n; i++) {
        const st_tensor *x = st_get(s, t[i].name);
        assert_non_null(x);
        assert_string_equal(x->name, t[i].name);
        assert_int_equal(x->dtype, t[i].dtype);
        assert_int_equal(x->ndim, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++)
            assert_int_equal(x->shape[d], t[i].shape[d]);
        assert_int_equal(x->nbytes, t[i].nbytes);
        assert_memory_equal(x->data, t[i].data, t[i].nbytes);
        assert_ok(st_require(s, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, NULL));
    }
    assert_null(st_get(s, "model.layers.0.missing"));
}

static void test_dtypes(void **state)
{
    (void)state;
    static const char *names[] = {"BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64",
                                  "U64", "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0"};
    static const size_t sizes[] = {1, 1, 1, 2, 2, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1, 1};
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        assert_string_equal(st_dtype_name((st_dtype)i), names[i]);
        assert_int_equal(st_dtype_size((st_dtype)i), sizes[i]);
        st_dtype d;
        assert_int_equal(st_dtype_parse(names[i], &d), 0);
        assert_int_equal(d, i);
    }
    st_dtype d;
    assert_int_equal(st_dtype_parse("F4", &d), -1);
}

/* Round trip through several shards; each shard file is also readable on its own. */
static void test_roundtrip_sharded(void **state)
{
    (void)state;
    enum { N = 40 };
    tspec t[N];
    make_specs(t, N, 11);
    const char *dir = scratch_dir("sharded", 0);
    write_specs(dir, 256, t, N);
    st_set *s;
    assert_ok(st_open(dir, &s));
    check_specs(s, t, N);
    /* tensors come out in shard order, each in the order written (= file order) */
    const char *prev_file = NULL;
    int shards = 0;
    for (int i = 0; i < N; i++) {
        assert_string_equal(st_at(s, i)->name, t[i].name);
        if (!prev_file || strcmp(prev_file, st_at(s, i)->file))
            shards++;
        prev_file = st_at(s, i)->file;
    }
    assert_true(shards > 3);
    assert_null(st_at(s, N));
    char last[600];
    snprintf(last, sizeof last, "%s/model-%05d-of-%05d.safetensors", dir, shards, shards);
    assert_string_equal(st_at(s, N - 1)->file, last);
    st_close(s);
    assert_int_equal(count_entries(dir), shards + 1);

    st_set *one;
    assert_ok(st_open(last, &one));
    assert_true(st_count(one) >= 1);
    assert_memory_equal(st_at(one, st_count(one) - 1)->data, t[N - 1].data, t[N - 1].nbytes);
    st_close(one);

    /* the index: total_size and one entry per tensor */
    char ipath[600], *text;
    size_t len;
    size_t total = 0;
    for (int i = 0; i < N; i++)
        total += t[i].nbytes;
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    assert_ok(dsk_read_file(ipath, &text, &len));
    char want[64];
    snprintf(want, sizeof want, "\"total_size\": %zu", total);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "\"model.layers.13.w0.weight\": \"model-"));
    free(text);
    free_specs(t, N);
}

static int files_equal(const char *a, const char *b)
{
    char *x, *y;
    size_t lx, ly;
    if (dsk_read_file(a, &x, &lx) || dsk_read_file(b, &y, &ly))
        return 0;
    int eq = lx == ly && !memcmp(x, y, lx);
    free(x);
    free(y);
    return eq;
}

/* Same calls give the same bytes; streaming in pieces gives the same bytes as whole adds. */
static void test_deterministic_and_streamed(void **state)
{
    (void)state;
    enum { N = 20 };
    tspec t[N];
    make_specs(t, N, 12);
    const char *a = scratch_dir("det-a", 0), *b = scratch_dir("det-b", 1);
    write_specs(a, 300, t, N);
    st_writer *w;
    assert_ok(st_writer_open(b, 300, &w));
    for (int i = 0; i < N; i++) {
        assert_ok(st_writer_begin(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape));
        size_t off = 0;
        while (off < t[i].nbytes) {
            size_t chunk = 1 + (off * 7 + (size_t)i) % 5;
            if (chunk > t[i].nbytes - off)
                chunk = t[i].nbytes - off;
            assert_ok(st_writer_write(w, t[i].data + off, chunk));
            off += chunk;
        }
        assert_ok(st_writer_end(w));
    }
    assert_ok(st_writer_close(w));
    int n = count_entries(a);
    assert_true(n > 2);
    assert_int_equal(count_entries(b), n);
    char pa[600], pb[600];
    for (int i = 1; i < n; i++) {
        snprintf(pa, sizeof pa, "%s/model-%05d-of-%05d.safetensors", a, i, n - 1);
        snprintf(pb, sizeof pb, "%s/model-%05d-of-%05d.safetensors", b, i, n - 1);
        assert_true(files_equal(pa, pb));
    }
    snprintf(pa, sizeof pa, "%s/model.safetensors.index.json", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors.index.json", b);
    assert_true(files_equal(pa, pb));
    free_specs(t, N);
}

/* The exact bytes of a one-tensor shard: length, header with fixed metadata, space padding. */
static void test_writer_layout(void **state)
{
    (void)state;
    const char *dir = scratch_dir("layout", 0);
    st_writer *w;
    assert_ok(st_writer_open(dir, 0, &w));
    int32_t v = -877912083;
    assert_ok(st_writer_add(w, "x.mcg", ST_I32, 0, NULL, &v, 4));
    assert_ok(st_writer_close(w));
    char p[600], *f;
    size_t len;
    snprintf(p, sizeof p, "%s/model-00001-of-00001.safetensors", dir);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0644);
    assert_ok(dsk_read_file(p, &f, &len));
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"x.mcg\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[0,4]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    assert_int_equal(len, 8 + padded + 4);
    uint64_t got;
    memcpy(&got, f, 8);
    assert_int_equal(got, padded);
    assert_memory_equal(f + 8, hdr, hl);
    for (size_t i = hl; i < padded; i++)
        assert_int_equal(f[8 + i], ' ');
    assert_memory_equal(f + 8 + padded, &v, 4);
    free(f);
    st_set *s;
    assert_ok(st_open(dir, &s));
    const st_tensor *t;
    assert_ok(st_require(s, "x.mcg", ST_I32, 0, NULL, &t));
    assert_int_equal(*(const int32_t *)t->data, v);
    st_close(s);
}

/* A failing writer leaves nothing behind; so does abort. */
static void test_writer_failures(void **state)
{
    (void)state;
    const char *dir = scratch_dir("wfail", 0);
    int64_t shape[2] = {3, 5};
    float data[15];
    for (int i = 0; i < 15; i++)
        data[i] = 1.5f + (float)i;
    st_writer *w;

    assert_ok(st_writer_open(dir, 16, &w));
    assert_ok(st_writer_add(w, "a", ST_F32, 2, shape, data, sizeof data));
    assert_ok(st_writer_add(w, "b", ST_F32, 2, shape, data, sizeof data)); /* second shard */
    assert_fails_with(st_writer_add(w, "a", ST_F32, 2, shape, data, sizeof data), "'a'", "twice");
    assert_fails_with(st_writer_close(w), "earlier call failed");
    assert_int_equal(count_entries(dir), 0);

    assert_ok(st_writer_open(dir, 0, &w));
    assert_fails_with(st_writer_add(w, "c", ST_F32, 2, shape, data, 59), "'c'", "59 bytes given", "60");
    st_writer_abort(w);
    assert_int_equal(count_entries(dir), 0);

    assert_ok(st_writer_open(dir, 0, &w));
    assert_ok(st_writer_begin(w, "d", ST_F16, 2, shape));
    assert_ok(st_writer_write(w, data, 20));
    assert_fails_with(st_writer_write(w, data, 20), "'d'", "more than its 30 bytes");
    st_writer_abort(w);

    assert_ok(st_writer_open(dir, 0, &w));
    assert_ok(st_writer_begin(w, "e", ST_F16, 2, shape));
    assert_ok(st_writer_write(w, data, 20));
    assert_fails_with(st_writer_end(w), "'e'", "20 bytes written", "30");
    st_writer_abort(w);

    assert_ok(st_writer_open(dir, 0, &w));
    assert_ok(st_writer_begin(w, "f", ST_F16, 2, shape));
    assert_fails_with(st_writer_close(w), "'f'", "not ended");
    assert_int_equal(count_entries(dir), 0);

    int64_t neg[1] = {-2};
    assert_ok(st_writer_open(dir, 0, &w));
    assert_fails_with(st_writer_add(w, "g", ST_F16, 1, neg, data, 0), "'g'", "negative");
    st_writer_abort(w);
    assert_ok(st_writer_open(dir, 0, &w));
    assert_fails_with(st_writer_add(w, "__metadata__", ST_F16, 0, NULL, data, 2), "not allowed");
    st_writer_abort(w);
    assert_ok(st_writer_open(dir, 0, &w));
    assert_fails_with(st_writer_add(w, "bad\xff", ST_F16, 0, NULL, data, 2), "UTF-8");
    st_writer_abort(w);
    assert_int_equal(count_entries(dir), 0);

    /* a name needing JSON escapes round-trips */
    assert_ok(st_writer_open(dir, 0, &w));
    assert_ok(st_writer_add(w, "q\"uo\\te\n", ST_F32, 2, shape, data, sizeof data));
    assert_ok(st_writer_close(w));
    st_set *s;
    assert_ok(st_open(dir, &s));
    assert_non_null(st_get(s, "q\"uo\\te\n"));
    st_close(s);
}

/* Many tensors: every one is found through the hash table. */
static void test_many_tensors(void **state)
{
    (void)state;
    enum { N = 5000 };
    const char *dir = scratch_dir("many", 0);
    st_writer *w;
    assert_ok(st_writer_open(dir, 8000, &w));
    char name[64];
    for (int i = 0; i < N; i++) {
        uint16_t v = (uint16_t)(i * 7);
        snprintf(name, sizeof name, "layers.%d.experts.%d.w1.suh", i / 384, i % 384);
        assert_ok(st_writer_add(w, name, ST_F16, 0, NULL, &v, 2));
    }
    assert_ok(st_writer_close(w));
    st_set *s;
    assert_ok(st_open(dir, &s));
    assert_int_equal(st_count(s), N);
    for (int i = N - 1; i >= 0; i--) {
        snprintf(name, sizeof name, "layers.%d.experts.%d.w1.suh", i / 384, i % 384);
        const st_tensor *t = st_get(s, name);
        assert_non_null(t);
        assert_int_equal(*(const uint16_t *)t->data, (uint16_t)(i * 7));
    }
    st_close(s);
}

static void test_require_messages(void **state)
{
    (void)state;
    const char *dir = scratch_dir("require", 0);
    st_writer *w;
    int64_t shape[2] = {4, 6};
    uint16_t data[24];
    for (int i = 0; i < 24; i++)
        data[i] = (uint16_t)(0x3c00 + i);
    assert_ok(st_writer_open(dir, 0, &w));
    assert_ok(st_writer_add(w, "blk.w", ST_BF16, 2, shape, data, sizeof data));
    assert_ok(st_writer_close(w));
    st_set *s;
    assert_ok(st_open(dir, &s));
    int64_t want[2] = {4, 7}, any[2] = {-1, 6};
    assert_fails_with(st_require(s, "blk.v", ST_BF16, 2, shape, NULL), "'blk.v'", "missing");
    assert_fails_with(st_require(s, "blk.w", ST_F16, 2, shape, NULL), "'blk.w'", "dtype BF16, expected F16");
    assert_fails_with(st_require(s, "blk.w", ST_BF16, 2, want, NULL), "'blk.w'", "shape [4, 6], expected [4, 7]");
    assert_fails_with(st_require(s, "blk.w", ST_BF16, 1, shape, NULL), "'blk.w'", "expected [4]");
    assert_ok(st_require(s, "blk.w", ST_BF16, 2, any, NULL));
    assert_ok(st_require(s, "blk.w", ST_BF16, -1, NULL, NULL));
    st_close(s);
}

/* Write a raw file: 8-byte length (declared; may lie), header text, then data_len random bytes. */
static void write_raw(const char *path, uint64_t declared, const char *header, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite(&declared, 8, 1, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++)
        fputc((int)(i * 37 + 11) & 0xff, f);
    fclose(f);
}

static void raw_case(const char *header, size_t data_len)
{
    const char *dir = scratch_dir("raw", 1);
    char p[600];
    snprintf(p, sizeof p, "%s/x.safetensors", dir);
    write_raw(p, strlen(header), header, data_len);
}

#define RAW_PATH(buf) snprintf(buf, sizeof buf, "%s/x.safetensors", scratch_dir("raw", 1))

static void test_malformed(void **state)
{
    (void)state;
    char p[600];
    st_set *s = NULL;

    /* a well-formed file opens: the baseline the cases below each break once */
    const char *good = "{\"__metadata__\":{\"format\":\"pt\"},\"a.w\":{\"dtype\":\"F16\",\"shape\":[2,3],"
                       "\"data_offsets\":[0,12]},\"a.b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}";
    raw_case(good, 20);
    snprintf(p, sizeof p, "%s/test-weights-%ld/raw/x.safetensors", test_binary_dir(), (long)getpid());
    assert_ok(st_open(p, &s));
    assert_int_equal(st_count(s), 2);
    st_close(s);

    /* truncated: fewer than 8 bytes */
    RAW_PATH(p);
    FILE *f = fopen(p, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    assert_fails_with(st_open(p, &s), "x.safetensors", "truncated");
    assert_null(s);

    /* header length beyond the file */
    RAW_PATH(p);
    write_raw(p, 1000, good, 20);
    assert_fails_with(st_open(p, &s), "x.safetensors", "header length 1000 runs past the end");

    /* bad JSON, non-object, duplicate key, bad metadata */
    raw_case("{\"a.w\":{\"dtype\":\"F16\",", 0);
    assert_fails_with(st_open(p, &s), "x.safetensors", "not valid JSON");
    raw_case("[1,2]", 0);
    assert_fails_with(st_open(p, &s), "not a JSON object");
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
             "\"a.w\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[2,4]}}", 4);
    assert_fails_with(st_open(p, &s), "not valid JSON", "a.w");
    raw_case("{\"__metadata__\":{\"format\":3}}", 0);
    assert_fails_with(st_open(p, &s), "__metadata__", "format");

    /* unknown dtype */
    raw_case("{\"a.w\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1);
    assert_fails_with(st_open(p, &s), "'a.w'", "unknown dtype \"F4\"");
    /* missing fields, bad shape entries, too many dims */
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"data_offsets\":[0,2]}}", 2);
    assert_fails_with(st_open(p, &s), "'a.w'", "\"shape\"");
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"shape\":[-1],\"data_offsets\":[0,2]}}", 2);
    assert_fails_with(st_open(p, &s), "'a.w'", "shape entry 0");
    raw_case("{\"a.w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1);
    assert_fails_with(st_open(p, &s), "'a.w'", "9 dimensions");
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[2]}}", 2);
    assert_fails_with(st_open(p, &s), "'a.w'", "data_offsets");
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[2,0]}}", 2);
    assert_fails_with(st_open(p, &s), "'a.w'", "end before they begin");

    /* shape x dtype != span */
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[0,10]}}", 12);
    assert_fails_with(st_open(p, &s), "'a.w'", "shape [2, 3] x F16 = 12 bytes", "span 10 bytes");
    /* a product that overflows 64 bits is a mismatch, not a wrap-around */
    raw_case("{\"a.w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", 0);
    assert_fails_with(st_open(p, &s), "'a.w'", "overflows", "does not match");

    /* overlapping spans */
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
             "\"a.b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[6,14]}}", 14);
    assert_fails_with(st_open(p, &s), "'a.b'", "overlaps tensor 'a.w'");
    /* an empty tensor inside another's span overlaps nothing */
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]},"
             "\"a.e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8);
    assert_ok(st_open(p, &s));
    st_close(s);

    /* span outside the file */
    raw_case("{\"a.w\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 7);
    assert_fails_with(st_open(p, &s), "'a.w'", "run past the data section (7 bytes)");

    /* a missing path */
    assert_fails_with(st_open("/nonexistent/ckpt", &s), "/nonexistent/ckpt");
    scratch_dir("empty", 2);
    snprintf(p, sizeof p, "%s/test-weights-%ld/empty", test_binary_dir(), (long)getpid());
    assert_fails_with(st_open(p, &s), "no model.safetensors.index.json");
}

/* Index and shards must agree; without an index every *.safetensors is read; names are unique. */
static void test_index_rules(void **state)
{
    (void)state;
    const char *dir = scratch_dir("index", 0);
    int64_t shape[1] = {4};
    float data[4] = {1, 2, 3, 4};
    st_writer *w;
    assert_ok(st_writer_open(dir, 16, &w));
    assert_ok(st_writer_add(w, "t.a", ST_F32, 1, shape, data, 16));
    assert_ok(st_writer_add(w, "t.b", ST_F32, 1, shape, data, 16));
    assert_ok(st_writer_close(w));
    char ip[600], s1[600];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", dir);
    snprintf(s1, sizeof s1, "%s/model-00001-of-00002.safetensors", dir);
    st_set *s;
    const char *f1 = "model-00001-of-00002.safetensors", *f2 = "model-00002-of-00002.safetensors";
    char idx[1024];

    /* index lists a tensor its shard does not hold */
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"t.a\":\"%s\",\"t.b\":\"%s\",\"t.c\":\"%s\"}}", f1, f2, f2);
    assert_ok(dsk_write_file_atomic(ip, idx, strlen(idx)));
    assert_fails_with(st_open(dir, &s), "'t.c'", "no such tensor");
    /* a shard holds a tensor the index does not list */
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"t.a\":\"%s\"}}", f1);
    assert_ok(dsk_write_file_atomic(ip, idx, strlen(idx)));
    assert_ok(st_open(dir, &s)); /* shard 2 is not named, so it is not read */
    assert_null(st_get(s, "t.b"));
    st_close(s);
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"t.a\":\"%s\",\"t.x\":\"%s\"}}", f1, f2);
    assert_ok(dsk_write_file_atomic(ip, idx, strlen(idx)));
    assert_fails_with(st_open(dir, &s), "'t.b'", "not listed in the index");
    /* index names the wrong shard */
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"t.a\":\"%s\",\"t.b\":\"%s\"}}", f2, f1);
    assert_ok(dsk_write_file_atomic(ip, idx, strlen(idx)));
    assert_fails_with(st_open(dir, &s), "'t.a'", "is in shard model-00001-of-00002.safetensors",
                      "index names model-00002");
    /* shard names must be plain file names; the index must have a weight_map */
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"t.a\":\"../%s\"}}", f1);
    assert_ok(dsk_write_file_atomic(ip, idx, strlen(idx)));
    assert_fails_with(st_open(dir, &s), "'t.a'", "invalid shard name");
    assert_ok(dsk_write_file_atomic(ip, "{}", 2));
    assert_fails_with(st_open(dir, &s), "weight_map");
    assert_ok(dsk_write_file_atomic(ip, "{", 1));
    assert_fails_with(st_open(dir, &s), "model.safetensors.index.json", "not valid JSON");
    /* a shard the index names but that does not exist */
    snprintf(idx, sizeof idx, "{\"weight_map\":{\"t.a\":\"%s\",\"t.z\":\"model-9.safetensors\"}}", f1);
    assert_ok(dsk_write_file_atomic(ip, idx, strlen(idx)));
    assert_fails_with(st_open(dir, &s), "model-9.safetensors");

    /* no index: both shards are read */
    unlink(ip);
    assert_ok(st_open(dir, &s));
    assert_int_equal(st_count(s), 2);
    assert_non_null(st_get(s, "t.a"));
    assert_non_null(st_get(s, "t.b"));
    st_close(s);

    /* no index and the same name in two shards */
    char s3[600];
    snprintf(s3, sizeof s3, "%s/zz.safetensors", dir);
    assert_int_equal(rename(s1, s3), 0);
    const char *dup = scratch_dir("dup", 1);
    assert_ok(st_writer_open(dup, 0, &w));
    assert_ok(st_writer_add(w, "t.b", ST_F32, 1, shape, data, 16));
    assert_ok(st_writer_close(w));
    char from[600];
    snprintf(from, sizeof from, "%s/model-00001-of-00001.safetensors", dup);
    assert_int_equal(rename(from, s1), 0);
    assert_fails_with(st_open(dir, &s), "'t.b'", "appears in both", "model-00001-of-00002",
                      "model-00002-of-00002");
}

/* A header over ST_MAX_HEADER_BYTES is refused before it is parsed (a 64 MB header cost 1.2 GB and 6 s):
 * here "{}" and spaces, valid JSON that the reader used to accept. */
static void test_header_cap(void **state)
{
    (void)state;
    char p[600];
    RAW_PATH(p);
    size_t hlen = (size_t)ST_MAX_HEADER_BYTES + 1;
    char *header = malloc(hlen + 1);
    assert_non_null(header);
    memset(header, ' ', hlen);
    header[0] = '{';
    header[1] = '}';
    header[hlen] = 0;
    write_raw(p, hlen, header, 0);
    free(header);
    st_set *s = NULL;
    assert_fails_with(st_open(p, &s), "x.safetensors", "header length 33554433 is more than the 33554432");
    /* the same cap holds for the shard index */
    const char *dir = scratch_dir("bigindex", 2);
    char ip[600];
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(ip, "wb");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), (off_t)ST_MAX_HEADER_BYTES + 1), 0);
    fclose(f);
    assert_fails_with(st_open(dir, &s), "model.safetensors.index.json", "more than");
}

/* In a child with a time limit: every way a FIFO can be given is refused at once, not waited on. */
static int open_fifos(void *arg)
{
    const char *dir = arg;
    char p[700];
    st_set *s;
    /* the checkpoint itself */
    snprintf(p, sizeof p, "%s/lone/fifo.safetensors", dir);
    if (st_open(p, &s) == 0 || !strstr(dsk_err_msg(), "not a regular file"))
        return 10;
    /* a *.safetensors of a folder without index */
    snprintf(p, sizeof p, "%s/lone", dir);
    if (st_open(p, &s) == 0 || !strstr(dsk_err_msg(), "not a regular file"))
        return 11;
    /* a shard the index names, and the index itself */
    snprintf(p, sizeof p, "%s/named", dir);
    if (st_open(p, &s) == 0 || !strstr(dsk_err_msg(), "not a regular file"))
        return 12;
    snprintf(p, sizeof p, "%s/index", dir);
    if (st_open(p, &s) == 0 || !strstr(dsk_err_msg(), "not a regular file"))
        return 13;
    return 0;
}

static void test_fifos(void **state)
{
    (void)state;
    const char *dir = scratch_dir("fifos", 3);
    char p[700];
    const char *paths[] = {"lone", "named", "index"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, paths[i]);
        assert_ok(dsk_mkdirs(p));
    }
    snprintf(p, sizeof p, "%s/lone/fifo.safetensors", dir);
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/named/fifo.safetensors", dir);
    assert_int_equal(mkfifo(p, 0644), 0);
    snprintf(p, sizeof p, "%s/named/model.safetensors.index.json", dir);
    const char *idx = "{\"weight_map\":{\"t.a\":\"fifo.safetensors\"}}";
    assert_ok(dsk_write_file_atomic(p, idx, strlen(idx)));
    snprintf(p, sizeof p, "%s/index/model.safetensors.index.json", dir);
    assert_int_equal(mkfifo(p, 0644), 0);
    test_status st = test_run_fn(open_fifos, (void *)dir, TEST_HANG_S, 0);
    if (!st.exited || st.exit_code != 0)
        fail_msg("opening FIFOs: exit %d, signal %d (14: it hung)", st.exit_code, st.signal);
}

/* HF-style vision names (vision.md §4): model.vision.*, model.aligner.* and model.image_{start,end,newline}
 * are found under their inference-style names, with or without index; names that only look alike keep
 * theirs; a tensor stored under both spellings is refused naming both. */
static void test_hf_vision_names(void **state)
{
    (void)state;
    static const struct {
        const char *stored, *canonical;
    } names[] = {
        {"model.vision.blocks.0.mlp.w1.weight", "vision.blocks.0.mlp.w1.weight"},
        {"model.vision.norm.weight", "vision.norm.weight"},
        {"model.aligner.w1.bias", "aligner.w1.bias"},
        {"model.image_start", "image_start"},
        {"model.image_end", "image_end"},
        {"model.image_newline", "image_newline"},
        {"vision.patch_embed.proj.bias", "vision.patch_embed.proj.bias"},
        {"model.layers.0.ffn.gate.bias_vl", "model.layers.0.ffn.gate.bias_vl"}, /* not a vision name */
        {"model.visionary.weight", "model.visionary.weight"},
        {"model.image_start_x", "model.image_start_x"},
        {"model.aligner", "model.aligner"},
        {"model.", "model."},
    };
    enum { N = sizeof names / sizeof names[0] };
    for (int i = 0; i < N; i++)
        assert_string_equal(st_name_canonical(names[i].stored), names[i].canonical);
    dsk_rng r;
    dsk_rng_seed(&r, (uint64_t)time(NULL));
    float data[N][4];
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 4; k++)
            data[i][k] = (float)dsk_rng_u64(&r) / 1e18f;
    int64_t shape[1] = {4};
    const char *dir = scratch_dir("hf", 0);
    st_writer *w;
    assert_ok(st_writer_open(dir, 40, &w)); /* a few shards: the index's names are checked too */
    for (int i = 0; i < N; i++)
        assert_ok(st_writer_add(w, names[i].stored, ST_F32, 1, shape, data[i], sizeof data[i]));
    assert_ok(st_writer_close(w));
    for (int pass = 0; pass < 2; pass++) { /* with the index, then without */
        st_set *s;
        assert_ok(st_open(dir, &s));
        assert_int_equal(st_count(s), N);
        for (int i = 0; i < N; i++) {
            const st_tensor *t = st_get(s, names[i].canonical);
            assert_non_null(t);
            assert_string_equal(t->name, names[i].canonical);
            assert_string_equal(t->stored_name, names[i].stored);
            assert_memory_equal(t->data, data[i], sizeof data[i]);
            if (strcmp(names[i].stored, names[i].canonical))
                assert_null(st_get(s, names[i].stored));
        }
        st_close(s);
        char ip[600];
        snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", dir);
        if (pass == 0)
            assert_int_equal(unlink(ip), 0);
    }
    /* both spellings of one tensor, in one shard or in two */
    for (int shards = 1; shards <= 2; shards++) {
        const char *two = scratch_dir("hf-two", 1);
        assert_ok(st_writer_open(two, shards == 1 ? 0 : 16, &w));
        assert_ok(st_writer_add(w, "vision.norm.weight", ST_F32, 1, shape, data[0], sizeof data[0]));
        assert_ok(st_writer_add(w, "model.vision.norm.weight", ST_F32, 1, shape, data[1], sizeof data[1]));
        assert_ok(st_writer_close(w));
        st_set *s;
        assert_fails_with(st_open(two, &s), "'vision.norm.weight' is stored twice", "'model.vision.norm.weight'");
    }
}

static int teardown(void **state)
{
    (void)state;
    scratch_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_roundtrip_sharded),
        cmocka_unit_test(test_deterministic_and_streamed),
        cmocka_unit_test(test_writer_layout),
        cmocka_unit_test(test_writer_failures),
        cmocka_unit_test(test_many_tensors),
        cmocka_unit_test(test_require_messages),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_index_rules),
        cmocka_unit_test(test_header_cap),
        cmocka_unit_test(test_fifos),
        cmocka_unit_test(test_hf_vision_names),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
