/* Safetensors reader: map every shard read-only, check each header completely before any tensor is
 * handed out, and index all names in one hash table. */
#include "runtime/weights/safetensors.h"
#include "runtime/common/error.h"
#include "runtime/common/util.h"
#include "runtime/weights/name_table.h"

#include <dirent.h>
#include <endian.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    char *path;
    void *map;     /* whole file, PROT_READ */
    size_t size;
    int borrowed;  /* map is the caller's memory (st_open_memory), not a mapping */
    char *names;   /* arena holding this shard's tensor names */
    int first;     /* its tensors are set->tensors[first .. first + count) */
    int count;
} st_shard;

struct st_set {
    st_shard *shards; /* [n_shards] */
    int n_shards;
    st_tensor *tensors; /* [count] */
    int count;
    name_table index;
};

static const struct {
    const char *name;
    size_t size;
} dtype_info[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},   [ST_U8] = {"U8", 1},       [ST_I8] = {"I8", 1},
    [ST_I16] = {"I16", 2},     [ST_U16] = {"U16", 2},     [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},     [ST_I64] = {"I64", 8},     [ST_U64] = {"U64", 8},
    [ST_F16] = {"F16", 2},     [ST_BF16] = {"BF16", 2},   [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},     [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_F8_E8M0] = {"F8_E8M0", 1},
};

size_t st_dtype_size(st_dtype dtype)
{
    return (unsigned)dtype < ST_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

const char *st_dtype_name(st_dtype dtype)
{
    return (unsigned)dtype < ST_DTYPE_COUNT ? dtype_info[dtype].name : "?";
}

int st_dtype_parse(const char *name, st_dtype *out)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (!strcmp(name, dtype_info[i].name)) {
            *out = (st_dtype)i;
            return 0;
        }
    return -1;
}

const char *st_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += shape[i] < 0 ? (size_t)snprintf(buf + n, cap - n, i ? ", *" : "*")
                          : (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

const char *st_name_canonical(const char *stored)
{
    static const char *const prefixed[] = {"vision.", "aligner."};
    static const char *const whole[] = {"image_start", "image_end", "image_newline"};
    if (strncmp(stored, "model.", 6))
        return stored;
    const char *rest = stored + 6;
    for (size_t i = 0; i < sizeof prefixed / sizeof prefixed[0]; i++)
        if (!strncmp(rest, prefixed[i], strlen(prefixed[i])))
            return rest;
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
        if (!strcmp(rest, whole[i]))
            return rest;
    return stored;
}

/* A non-negative JSON integer, or -1. */
static int64_t json_count(const json_t *v)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    return (int64_t)json_integer_value(v);
}

/* Check one header entry and fill t (name and data pointer set by the caller). */
static int parse_entry(const char *name, json_t *e, size_t data_len, st_tensor *t, uint64_t *begin)
{
    if (!json_is_object(e))
        return dsk_err("tensor '%s': header entry is not an object", name);
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape");
    json_t *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd))
        return dsk_err("tensor '%s': missing or non-string \"dtype\"", name);
    if (st_dtype_parse(json_string_value(jd), &t->dtype) != 0)
        return dsk_err("tensor '%s': unknown dtype \"%s\"", name, json_string_value(jd));
    if (!json_is_array(js))
        return dsk_err("tensor '%s': missing or non-array \"shape\"", name);
    if (json_array_size(js) > ST_MAX_DIMS)
        return dsk_err("tensor '%s': %zu dimensions, at most %d supported", name, json_array_size(js),
                       ST_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    uint64_t elems = 1;
    int overflow = 0;
    for (int i = 0; i < t->ndim; i++) {
        int64_t d = json_count(json_array_get(js, (size_t)i));
        if (d < 0)
            return dsk_err("tensor '%s': shape entry %d is not a non-negative integer", name, i);
        t->shape[i] = d;
        overflow |= __builtin_mul_overflow(elems, (uint64_t)d, &elems);
    }
    uint64_t nbytes;
    overflow |= __builtin_mul_overflow(elems, (uint64_t)st_dtype_size(t->dtype), &nbytes);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return dsk_err("tensor '%s': \"data_offsets\" is not an array of two integers", name);
    int64_t b = json_count(json_array_get(jo, 0)), end = json_count(json_array_get(jo, 1));
    if (b < 0 || end < 0)
        return dsk_err("tensor '%s': \"data_offsets\" is not an array of two non-negative integers", name);
    if (end < b)
        return dsk_err("tensor '%s': data_offsets [%lld, %lld] end before they begin", name,
                       (long long)b, (long long)end);
    char sb[200];
    if (overflow)
        return dsk_err("tensor '%s': shape %s x %s overflows 64 bits, so it does not match its data span",
                       name, st_shape_str(t->ndim, t->shape, sb, sizeof sb), st_dtype_name(t->dtype));
    if (nbytes != (uint64_t)(end - b))
        return dsk_err("tensor '%s': shape %s x %s = %llu bytes, but its data_offsets span %lld bytes",
                       name, st_shape_str(t->ndim, t->shape, sb, sizeof sb), st_dtype_name(t->dtype),
                       (unsigned long long)nbytes, (long long)(end - b));
    if ((uint64_t)end > data_len)
        return dsk_err("tensor '%s': data_offsets [%lld, %lld] run past the data section (%zu bytes)",
                       name, (long long)b, (long long)end, data_len);
    t->nbytes = (size_t)nbytes;
    *begin = (uint64_t)b;
    return 0;
}

typedef struct {
    uint64_t begin;
    int idx;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->idx - y->idx;
}

/* Parse and check a mapped shard's header; append its tensors (file order) to set->tensors. */
static int parse_shard(st_set *set, st_shard *sh)
{
    if (sh->size < 8)
        return dsk_err("truncated: %zu bytes, but a safetensors file starts with an 8-byte header length",
                       sh->size);
    uint64_t hlen;
    memcpy(&hlen, sh->map, 8);
    hlen = le64toh(hlen);
    if (hlen > sh->size - 8)
        return dsk_err("header length %llu runs past the end of the file (%zu bytes); truncated?",
                       (unsigned long long)hlen, sh->size);
    if (hlen > ST_MAX_HEADER_BYTES)
        return dsk_err("header length %llu is more than the %d bytes a header may have", (unsigned long long)hlen,
                       ST_MAX_HEADER_BYTES);
    const char *header = (const char *)sh->map + 8;
    size_t data_len = sh->size - 8 - (size_t)hlen;
    const unsigned char *data = (const unsigned char *)header + hlen;

    json_error_t jerr;
    json_t *root = json_loadb(header, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return dsk_err("header is not valid JSON (line %d, column %d: %s)", jerr.line, jerr.column,
                       jerr.text);
    int rc = -1;
    span *spans = NULL;
    if (!json_is_object(root)) {
        dsk_err("header is not a JSON object");
        goto out;
    }
    size_t n = 0, name_bytes = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(val)) {
                dsk_err("\"__metadata__\" is not an object");
                goto out;
            }
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    dsk_err("\"__metadata__\" entry \"%s\" is not a string", mk);
                    goto out;
                }
            }
            continue;
        }
        n++;
        name_bytes += strlen(key) + 1;
    }
    if (n > (size_t)(INT32_MAX / 2) - (size_t)set->count) {
        dsk_err("too many tensors (%zu)", n);
        goto out;
    }
    st_tensor *grown = dsk_realloc(set->tensors, ((size_t)set->count + n) * sizeof *grown);
    spans = dsk_malloc(n * sizeof *spans);
    sh->names = dsk_malloc(name_bytes);
    if (grown)
        set->tensors = grown;
    if (!grown || !spans || !sh->names)
        goto out;
    st_tensor *tv = set->tensors + set->count;
    char *np = sh->names;
    size_t i = 0;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__"))
            continue;
        st_tensor *t = &tv[i];
        *t = (st_tensor){0};
        if (parse_entry(key, val, data_len, t, &spans[i].begin) != 0)
            goto out;
        size_t kl = strlen(key) + 1;
        memcpy(np, key, kl);
        t->stored_name = np;
        t->name = st_name_canonical(np);
        np += kl;
        t->data = data + spans[i].begin;
        t->file = sh->path;
        spans[i].idx = (int)i;
        i++;
    }
    /* Overlap: after sorting by start, each non-empty span must begin at or after the furthest end
     * seen so far. Empty tensors occupy no bytes and overlap nothing. */
    qsort(spans, n, sizeof *spans, span_cmp);
    uint64_t reach = 0;
    int reach_idx = -1;
    for (i = 0; i < n; i++) {
        const st_tensor *t = &tv[spans[i].idx];
        if (!t->nbytes)
            continue;
        if (reach_idx >= 0 && spans[i].begin < reach) {
            dsk_err("tensor '%s' (bytes %llu..%llu) overlaps tensor '%s' (ending at %llu)", t->name,
                    (unsigned long long)spans[i].begin, (unsigned long long)(spans[i].begin + t->nbytes),
                    tv[reach_idx].name, (unsigned long long)reach);
            goto out;
        }
        reach = spans[i].begin + t->nbytes;
        reach_idx = spans[i].idx;
    }
    /* Hand tensors out in file order. */
    st_tensor *sorted = dsk_malloc(n * sizeof *sorted);
    if (!sorted)
        goto out;
    for (i = 0; i < n; i++)
        sorted[i] = tv[spans[i].idx];
    memcpy(tv, sorted, n * sizeof *sorted);
    free(sorted);
    sh->first = set->count;
    sh->count = (int)n;
    set->count += (int)n;
    rc = 0;
out:
    free(spans);
    json_decref(root);
    return rc;
}

/* Map path read-only and parse it as one more shard of set. */
static int add_shard(st_set *set, const char *path)
{
    st_shard *grown = dsk_realloc(set->shards, ((size_t)set->n_shards + 1) * sizeof *grown);
    if (!grown)
        return -1;
    set->shards = grown;
    st_shard *sh = &set->shards[set->n_shards];
    *sh = (st_shard){0};
    sh->path = dsk_strdup(path);
    if (!sh->path)
        return -1;
    set->n_shards++;
    struct stat st;
    int fd = dsk_open_regular(path, &st);
    if (fd < 0)
        return -1;
    sh->size = (size_t)st.st_size;
    if (sh->size) {
        void *m = mmap(NULL, sh->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return dsk_err_errno("cannot map %s", path);
        }
        sh->map = m;
    }
    close(fd);
    if (parse_shard(set, sh) != 0)
        return dsk_err_ctx("%s", path);
    return 0;
}

/* Index every tensor by its inference-style name; a name in two shards, or stored both HF-style and
 * inference-style, is an error. */
static int build_index(st_set *set)
{
    for (int i = 0; i < set->count; i++) {
        int prior;
        const st_tensor *t = &set->tensors[i];
        if (name_table_insert(&set->index, t->name, i, &prior) != 0)
            return -1;
        if (prior < 0)
            continue;
        const st_tensor *p = &set->tensors[prior];
        if (strcmp(p->stored_name, t->stored_name))
            return dsk_err("tensor '%s' is stored twice, as '%s' (%s) and as '%s' (%s)", t->name, p->stored_name,
                           p->file, t->stored_name, t->file);
        return dsk_err("tensor '%s' appears in both %s and %s", t->name, p->file, t->file);
    }
    return 0;
}

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = dsk_malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Open exactly the shards model.safetensors.index.json names and check that index and shards list
 * the same tensors in the same shards. */
static int open_indexed(st_set *set, const char *dir, const char *index_path)
{
    char *text;
    size_t text_len;
    if (dsk_read_file_max(index_path, ST_MAX_HEADER_BYTES, "shard index", &text, &text_len))
        return -1;
    json_error_t jerr;
    json_t *root = json_loadb(text, text_len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return dsk_err("%s: not valid JSON (line %d, column %d: %s)", index_path, jerr.line, jerr.column,
                       jerr.text);
    int rc = -1;
    const char **files = NULL;
    size_t n_files = 0;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        dsk_err("%s: no \"weight_map\" object", index_path);
        goto out;
    }
    files = dsk_malloc((json_object_size(map) + 1) * sizeof *files);
    if (!files)
        goto out;
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        const char *f = json_string_value(val);
        if (!f || !*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
            dsk_err("%s: tensor '%s' maps to an invalid shard name (a plain file name is expected)",
                    index_path, key);
            goto out;
        }
        files[n_files++] = f;
    }
    qsort(files, n_files, sizeof *files, str_cmp);
    for (size_t i = 0; i < n_files; i++) {
        if (i && !strcmp(files[i], files[i - 1]))
            continue;
        char *p = path_join(dir, files[i]);
        int r = p ? add_shard(set, p) : -1;
        free(p);
        if (r != 0)
            goto out;
    }
    if (build_index(set) != 0)
        goto out;
    for (int s = 0; s < set->n_shards; s++) {
        const char *base = strrchr(set->shards[s].path, '/') + 1;
        for (int i = 0; i < set->shards[s].count; i++) {
            const st_tensor *t = &set->tensors[set->shards[s].first + i];
            const char *listed = json_string_value(json_object_get(map, t->stored_name));
            if (!listed) {
                dsk_err("%s: tensor '%s' of shard %s is not listed in the index", index_path, t->stored_name,
                        base);
                goto out;
            }
            if (strcmp(listed, base)) {
                dsk_err("%s: tensor '%s' is in shard %s but the index names %s", index_path, t->stored_name,
                        base, listed);
                goto out;
            }
        }
    }
    json_object_foreach(map, key, val) {
        const st_tensor *t = st_get(set, st_name_canonical(key));
        if (!t || strcmp(t->stored_name, key)) {
            dsk_err("%s: the index lists tensor '%s' in shard %s, which has no such tensor", index_path,
                    key, json_string_value(val));
            goto out;
        }
    }
    rc = 0;
out:
    free(files);
    json_decref(root);
    return rc;
}

/* A folder without index: every *.safetensors file in it, in name order. */
static int open_folder(st_set *set, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return dsk_err_errno("cannot open folder %s", dir);
    char **names = NULL;
    size_t n = 0;
    int rc = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || l <= 12 || strcmp(e->d_name + l - 12, ".safetensors"))
            continue;
        char **grown = dsk_realloc(names, (n + 1) * sizeof *names);
        if (!grown)
            goto out;
        names = grown;
        if (!(names[n] = dsk_strdup(e->d_name)))
            goto out;
        n++;
    }
    if (!n) {
        dsk_err("%s: no model.safetensors.index.json and no *.safetensors file", dir);
        goto out;
    }
    qsort(names, n, sizeof *names, str_cmp);
    for (size_t i = 0; i < n; i++) {
        char *p = path_join(dir, names[i]);
        int r = p ? add_shard(set, p) : -1;
        free(p);
        if (r != 0)
            goto out;
    }
    rc = build_index(set);
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

int st_open(const char *path, st_set **out)
{
    *out = NULL;
    st_set *set = dsk_calloc(1, sizeof *set);
    if (!set)
        return -1;
    struct stat st;
    int rc;
    if (stat(path, &st) != 0) {
        rc = dsk_err_errno("cannot open checkpoint %s", path);
    } else if (S_ISDIR(st.st_mode)) {
        char *index = path_join(path, "model.safetensors.index.json");
        if (!index)
            rc = -1;
        else if (access(index, F_OK) == 0)
            rc = open_indexed(set, path, index);
        else
            rc = open_folder(set, path);
        free(index);
    } else {
        rc = add_shard(set, path);
        if (rc == 0)
            rc = build_index(set);
    }
    if (rc != 0) {
        st_close(set);
        return -1;
    }
    *out = set;
    return 0;
}

int st_open_memory(const void *data, size_t len, const char *name, st_set **out)
{
    *out = NULL;
    st_set *set = dsk_calloc(1, sizeof *set);
    st_shard *sh = dsk_calloc(1, sizeof *sh);
    if (!set || !sh) {
        free(set);
        free(sh);
        return -1;
    }
    set->shards = sh;
    set->n_shards = 1;
    sh->borrowed = 1;
    sh->map = (void *)data;
    sh->size = len;
    int rc = (sh->path = dsk_strdup(name)) ? 0 : -1;
    if (rc == 0 && parse_shard(set, sh) != 0)
        rc = dsk_err_ctx("%s", name);
    if (rc == 0)
        rc = build_index(set);
    if (rc != 0) {
        st_close(set);
        return -1;
    }
    *out = set;
    return 0;
}

void st_close(st_set *set)
{
    if (!set)
        return;
    for (int i = 0; i < set->n_shards; i++) {
        if (set->shards[i].map && !set->shards[i].borrowed)
            munmap(set->shards[i].map, set->shards[i].size);
        free(set->shards[i].names);
        free(set->shards[i].path);
    }
    free(set->shards);
    free(set->tensors);
    name_table_free(&set->index);
    free(set);
}

const st_tensor *st_get(const st_set *set, const char *name)
{
    int i = name_table_find(&set->index, name);
    return i < 0 ? NULL : &set->tensors[i];
}

int st_require(const st_set *set, const char *name, st_dtype dtype, int ndim, const int64_t *shape,
               const st_tensor **out)
{
    const st_tensor *t = st_get(set, name);
    if (!t)
        return dsk_err("tensor '%s' is missing", name);
    if (t->dtype != dtype)
        return dsk_err("tensor '%s' (%s): dtype %s, expected %s", name, t->file, st_dtype_name(t->dtype),
                       st_dtype_name(dtype));
    if (ndim >= 0) {
        int same = t->ndim == ndim;
        for (int i = 0; same && i < ndim; i++)
            same = shape[i] < 0 || shape[i] == t->shape[i];
        if (!same) {
            char a[200], b[200];
            return dsk_err("tensor '%s' (%s): shape %s, expected %s", name, t->file,
                           st_shape_str(t->ndim, t->shape, a, sizeof a), st_shape_str(ndim, shape, b, sizeof b));
        }
    }
    if (out)
        *out = t;
    return 0;
}

int st_count(const st_set *set)
{
    return set->count;
}

const st_tensor *st_at(const st_set *set, int i)
{
    return i >= 0 && i < set->count ? &set->tensors[i] : NULL;
}
