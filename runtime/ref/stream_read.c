#include "runtime/ref/stream_read.h"

uint32_t ref_stream_read_fold(const uint32_t *words, size_t n)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++)
        acc ^= words[i];
    return acc;
}
