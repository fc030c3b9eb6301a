/* model.safetensors.index.json on any bytes, beside two fixed shards (t.a in shard 1, t.b in shard 2):
 * a bad index is an error, never a crash; a good one opens exactly the tensors it lists. */
#include "runtime/common/util.h"
#include "runtime/weights/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64], index_path[128];

static void remove_shards(void)
{
    static const char *const names[] = {"model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    char p[192];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

static void make_shards(void)
{
    snprintf(dir, sizeof dir, "/tmp/dskit-fuzz-st-index-%ld", (long)getpid());
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    st_writer *w;
    int64_t shape[1] = {4};
    float v[4] = {1, 2, 3, 4};
    if (dsk_mkdirs(dir) || st_writer_open(dir, 16, &w) || st_writer_add(w, "t.a", ST_F32, 1, shape, v, 16) ||
        st_writer_add(w, "t.b", ST_F32, 1, shape, v, 16) || st_writer_close(w)) {
        fprintf(stderr, "%s\n", dsk_err_msg());
        abort();
    }
    atexit(remove_shards);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        make_shards();
    /* a plain rewrite: no fsync per run */
    FILE *f = fopen(index_path, "wb");
    FUZZ_CHECK(f && fwrite(data, 1, size, f) == size && fclose(f) == 0);
    st_set *s;
    if (st_open(dir, &s) == 0) {
        FUZZ_CHECK(st_count(s) <= 2);
        for (int i = 0; i < st_count(s); i++)
            FUZZ_CHECK(st_get(s, st_at(s, i)->name) == st_at(s, i));
        st_close(s);
    }
    return 0;
}
