/* kit/variants.json on any bytes: spec_parse and spec_expand (dskit-build --list) refuse a bad spec with
 * a message, never a crash, a hang or an overflow (UBSan); every variant they give has a unique symbol
 * that fits the manifest, block and shared memory in range. */
#include "builder/spec.h"
#include "runtime/weights/name_table.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    variant_spec s;
    if (spec_parse((const char *)data, size, "fuzz/variants.json", &s) != 0)
        return 0;
    spec_variant *v;
    int n;
    if (spec_expand(&s, &v, &n) == 0) {
        FUZZ_CHECK(n <= SPEC_MAX_VARIANTS);
        name_table seen = {0};
        for (int i = 0; i < n; i++) {
            int prior;
            FUZZ_CHECK(strlen(v[i].symbol) <= MANIFEST_MAX_SYMBOL);
            FUZZ_CHECK(v[i].block >= 1 && v[i].block <= 1024 && v[i].smem >= 0);
            FUZZ_CHECK(name_table_insert(&seen, v[i].symbol, i, &prior) == 0 && prior < 0);
        }
        name_table_free(&seen);
        free(v);
    }
    spec_free(&s);
    return 0;
}
