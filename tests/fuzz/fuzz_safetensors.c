/* A safetensors shard on any bytes (held in memory): a bad header is an error naming the problem, never a
 * crash; a good one gives tensors whose bytes lie inside the shard, each found again by name. */
#include "runtime/weights/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_set *s;
    if (st_open_memory(data, size, "fuzz.safetensors", &s) != 0)
        return 0;
    for (int i = 0; i < st_count(s); i++) {
        const st_tensor *t = st_at(s, i);
        FUZZ_CHECK(st_get(s, t->name) == t);
        FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
        FUZZ_CHECK((const uint8_t *)t->data >= data && t->nbytes <= size);
        FUZZ_CHECK((size_t)((const uint8_t *)t->data - data) <= size - t->nbytes);
        FUZZ_CHECK(st_require(s, t->name, t->dtype, t->ndim, t->shape, NULL) == 0);
        /* touch the first and last byte: ASan sees a read outside the buffer */
        if (t->nbytes) {
            volatile uint8_t first = ((const uint8_t *)t->data)[0], last = ((const uint8_t *)t->data)[t->nbytes - 1];
            (void)first;
            (void)last;
        }
    }
    st_close(s);
    return 0;
}
