/* The packed Engram formats on any bytes (docs/engram.md "File format"). The first byte picks the
 * reader: even, the rest is a file header (padded or cut to 4096 bytes, its xxh3-128 made right so that
 * mutations reach the field checks) for engram_header_decode; odd, the rest is engram-pack.json for
 * engram_manifest_read. What decodes is consistent: the file size and rank split it implies are formed
 * without overflow, and it encodes and decodes to the same bytes; a manifest that reads is within its
 * bounds and reads back the same after engram_manifest_write. */
#include "runtime/common/util.h"
#include "runtime/engram/engram_format.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>
#include <unistd.h>
#include <xxhash.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *scratch_dir(void)
{
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/dskit-fuzz-engram-XXXXXX");
        FUZZ_CHECK(mkdtemp(dir));
    }
    return dir;
}

static void fuzz_header(const uint8_t *data, size_t size)
{
    static uint8_t in[ENGRAM_HEADER_BYTES];
    memset(in, 0, sizeof in);
    memcpy(in, data, size < sizeof in ? size : sizeof in);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_withSeed(in, ENGRAM_HEADER_BYTES - ENGRAM_HASH_BYTES, 0));
    memcpy(in + ENGRAM_HEADER_BYTES - ENGRAM_HASH_BYTES, c.digest, 16);
    engram_header h;
    if (engram_header_decode(in, "fuzz.engram", &h))
        return;
    uint64_t blocks_bytes;
    FUZZ_CHECK(!__builtin_mul_overflow(h.block_count, (uint64_t)h.block_bytes, &blocks_bytes));
    FUZZ_CHECK(blocks_bytes <= UINT64_MAX - h.data_offset && engram_file_bytes(&h) == h.data_offset + blocks_bytes);
    FUZZ_CHECK(h.row_first + h.row_count <= h.table_rows);
    static uint8_t again[ENGRAM_HEADER_BYTES], thrice[ENGRAM_HEADER_BYTES];
    engram_header_encode(&h, again);
    engram_header h2;
    FUZZ_CHECK(engram_header_decode(again, "fuzz.engram", &h2) == 0);
    engram_header_encode(&h2, thrice);
    FUZZ_CHECK(!memcmp(again, thrice, sizeof again));
}

static void fuzz_manifest(const uint8_t *data, size_t size)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", scratch_dir(), ENGRAM_MANIFEST);
    FUZZ_CHECK(dsk_write_file_atomic(path, data, size) == 0);
    engram_manifest m;
    if (engram_manifest_read(scratch_dir(), &m))
        return;
    FUZZ_CHECK(m.tp >= 1 && m.tp <= ENGRAM_MAX_TP && m.n_layers >= 1 && m.n_layers <= ENGRAM_MAX_LAYERS);
    for (int i = 0; i < m.n_layers; i++)
        FUZZ_CHECK(m.layer[i].rows >= 1 && m.layer[i].rows <= ENGRAM_MAX_TABLE_ROWS);
    FUZZ_CHECK(engram_manifest_write(scratch_dir(), &m) == 0);
    engram_manifest back;
    FUZZ_CHECK(engram_manifest_read(scratch_dir(), &back) == 0);
    FUZZ_CHECK(!memcmp(&m, &back, sizeof m));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] % 2 == 0)
        fuzz_header(data + 1, size - 1);
    else
        fuzz_manifest(data + 1, size - 1);
    return 0;
}
